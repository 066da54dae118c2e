"""The ``collabfl`` command: experiments, the loopback federation, and ``collabfl admin``
for a running coordinator; one module a command group, wiring in main.py."""
