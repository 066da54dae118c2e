"""collabfl: personalized federated learning with learned collaboration.

The source folders stay at the repository's top level (client/, coordinator/, strategies/,
...); this package links them under one import namespace, ``collabfl.<folder>``, so that the
installed names never collide (``import client``) and editors and type checkers resolve
``collabfl.`` imports straight from the source tree.
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
