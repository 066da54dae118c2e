"""The sub-step relay: the ServerApp's and members' exchange of sub-step messages through the
coordinator.
"""
