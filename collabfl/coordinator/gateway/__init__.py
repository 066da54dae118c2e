"""The coordinator's public port: the Fleet API gateway to the loopback SuperLink, the
enrolment endpoint beside it, and the bounds that keep a flood of callers from costing more
than a ration.
"""
