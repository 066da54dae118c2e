"""The model zoo's names and each dataset's default model, apart from the networks
(kernel/models.py) so that a config names and checks them without importing torch."""

from __future__ import annotations

ZOO = ("mnist1d_cnn", "cifar_cnn", "femnist_cnn", "resnet18")
"""The names ``kernel.models.MODELS`` builds (a test keeps the two equal)."""

DEFAULT_MODEL = {
    "mnist1d": "mnist1d_cnn",
    "cifar10": "cifar_cnn",
    "cinic10": "cifar_cnn",
    "femnist": "femnist_cnn",
}
"""``model.name = "auto"``: the model each dataset trains."""
