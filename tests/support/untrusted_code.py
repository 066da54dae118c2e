"""Code a participant never allowed: the attack tests check that it is never imported."""

from torch import nn

IMPORTED = True


def make_net() -> nn.Module:
    return nn.Sequential(nn.Flatten(), nn.Linear(40, 10))
