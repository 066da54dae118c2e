"""The Flower SuperLink the coordinator runs on loopback: its process, its Control API, the
ServerApps it launches for our runs, and the SuperNode keys it must keep.
"""
