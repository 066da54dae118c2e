"""Bounds on what a peer's model may hold, shared by the fetcher and the daemon's flags.

Kept apart from the fetcher (client/peers.py) so that the client daemon, which serves
files and never touches a tensor, can offer the flag without importing torch.
"""

MAX_PEER_WEIGHT = 1e4
"""Default bound on |weight| of a peer model.

Trained weights of the models here stay far below 10; a finite 3e38 is no model but an
attack on the aggregate (a weighted sum of such values overflows to Inf, or one peer
drowns all others). 1e4 leaves three orders of magnitude of room for honest models and
still keeps any average of them far from float32 overflow.
"""
