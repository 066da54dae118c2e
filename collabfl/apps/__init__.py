"""The Flower apps: the ServerApp that drives a run and the ClientApp that serves a
participant's steps, with what they share (the wire codec's use, the client pool, sessions,
sub-steps, reply checks). They sit above the rooms they use (coordinator, engine, client)
and above the Flower runtime the daemons run them in (collabfl/flower/), as Flower's own
``flwr/serverapp`` and ``flwr/clientapp`` sit above its SuperLink and SuperNode."""
