"""Records each import of itself (a line with the importing pid in the file named by
``COLLABFL_IMPORT_MARKER``): what a preloaded module's imports are counted by."""

import os

with open(os.environ["COLLABFL_IMPORT_MARKER"], "a") as _marker:
    _marker.write(f"{os.getpid()}\n")
