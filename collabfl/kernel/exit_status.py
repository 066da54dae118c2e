"""The exit status every collabfl command and daemon ends with, so scripts can tell the cases.

2 means the input or the usage was wrong and nothing ran (fix the command, not the machine);
1 means something failed while running (a coordinator out of reach, a run that failed, a
daemon whose parts kept failing); 130 means Ctrl-C stopped it (128 + SIGINT).
"""

from typing import Final

OK: Final = 0
FAILURE: Final = 1
USAGE: Final = 2
INTERRUPTED: Final = 130
