"""collabfl: personalized federated learning with learned collaboration.

Each room is a package here (``collabfl.client``, ``collabfl.coordinator``, ...), one import
namespace whose names never collide once installed (``import client`` would); the repository's
top-level client/, coordinator/, ... are links to these folders.
"""


def __getattr__(name: str) -> str:
    """``collabfl.__version__``, read from the installed package's metadata when first asked
    for: importlib.metadata costs tens of milliseconds that most imports do not need."""
    if name != "__version__":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("collabfl")
    except PackageNotFoundError:  # a source tree used without installing it
        return "0+unknown"
