"""collabfl: personalized federated learning with learned collaboration.

The source folders stay at the repository's top level (client/, coordinator/, strategies/,
...); this package links them under one import namespace, ``collabfl.<folder>``, so that the
installed names never collide (``import client``) and editors and type checkers resolve
``collabfl.`` imports straight from the source tree.
"""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("collabfl")
except PackageNotFoundError:  # a source tree used without installing it
    __version__ = "0+unknown"
