"""The shared kernel: what both the participant and the coordinator build on.

Flat weight vectors, the model zoo, local training and evaluation, crash-safe files, TLS
material, child-process supervision and grant signing. Nothing here knows about methods,
rounds or Flower.
"""
