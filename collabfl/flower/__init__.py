"""The Flower runtime: a real federation's adapters, both ends in one room.

The codec (instructions and replies as Flower Message content), the ClientApp that runs
them at a participant, the node session that keeps a client's state between messages, the
ServerApp that drives a method, the ``ClientPool`` adapter it drives through, and the
helpers that start Flower's own processes.
"""
