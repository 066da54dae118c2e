"""Plain-Flower FedAvg app used as the round-time floor of a Flower federation."""
