"""client/data."""
