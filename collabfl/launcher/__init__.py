"""``collabfl federation up``: a whole federation of local processes (coordinator,
SuperLink, client daemons) on one machine, with or without TLS."""
