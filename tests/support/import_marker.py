"""Records each import of itself (a line with the importing pid in the file named by
``COLLABFL_IMPORT_MARKER``), then takes ``COLLABFL_IMPORT_DELAY`` seconds (if set): a
preloaded module whose imports are counted, or one that is slow to import."""

import os
import time

with open(os.environ["COLLABFL_IMPORT_MARKER"], "a") as _marker:
    _marker.write(f"{os.getpid()}\n")
time.sleep(float(os.environ.get("COLLABFL_IMPORT_DELAY", "0")))
