"""The Flower runtime the daemons run collabfl's apps in (collabfl/apps/): the commands that
start Flower's processes, the warm executor, the ServerApp launcher, SuperExec auth, the
gate a submitted app passes, and the wire codec. It imports only the kernel and the
method code, never the rooms above.
"""
