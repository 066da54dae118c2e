"""The model zoo (one small network per supported dataset, and a ResNet-18 for 32×32 images)
and user-supplied models."""

from __future__ import annotations

from collections.abc import Callable, Collection

import torch
from torch import nn

from collabfl.kernel.user_code import UserCodeError, is_import_path, load_object


def mnist1d_cnn(num_classes: int = 10, length: int = 40) -> nn.Module:
    """A small 1-D CNN for MNIST-1D (about 95% test accuracy when trained centrally)."""
    return nn.Sequential(
        nn.Conv1d(1, 32, kernel_size=5, padding=2),
        nn.ReLU(),
        nn.MaxPool1d(2),
        nn.Conv1d(32, 32, kernel_size=3, padding=1),
        nn.ReLU(),
        nn.MaxPool1d(2),
        nn.Conv1d(32, 32, kernel_size=3, padding=1),
        nn.ReLU(),
        nn.Flatten(),
        nn.Linear(32 * (length // 4), 64),
        nn.ReLU(),
        nn.Linear(64, num_classes),
    )


def cifar_cnn(num_classes: int = 10) -> nn.Module:
    """The DPFL paper's CNN for 32×32×3 images (LeNet-5 shaped)."""
    return nn.Sequential(
        nn.Conv2d(3, 6, kernel_size=5),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(6, 16, kernel_size=5),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Linear(16 * 5 * 5, 120),
        nn.ReLU(),
        nn.Linear(120, 84),
        nn.ReLU(),
        nn.Linear(84, num_classes),
    )


def femnist_cnn(num_classes: int = 62) -> nn.Module:
    """The LEAF benchmark's CNN for 28×28 FEMNIST characters."""
    return nn.Sequential(
        nn.Conv2d(1, 32, kernel_size=5, padding=2),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(32, 64, kernel_size=5, padding=2),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Linear(64 * 7 * 7, 2048),
        nn.ReLU(),
        nn.Linear(2048, num_classes),
    )


class BasicBlock(nn.Module):
    """Two 3×3 convolutions with BatchNorm and an identity (or 1×1 projection) shortcut."""

    def __init__(self, inputs: int, outputs: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(inputs, outputs, 3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(outputs)
        self.conv2 = nn.Conv2d(outputs, outputs, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(outputs)
        self.shortcut: nn.Module = nn.Identity()
        if stride != 1 or inputs != outputs:
            self.shortcut = nn.Sequential(
                nn.Conv2d(inputs, outputs, 1, stride=stride, bias=False), nn.BatchNorm2d(outputs)
            )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = torch.relu(self.bn1(self.conv1(x)))
        return torch.relu(self.bn2(self.conv2(out)) + self.shortcut(x))


def resnet18(num_classes: int = 10) -> nn.Module:
    """ResNet-18 with the CIFAR stem (one 3×3 convolution at stride 1, no max-pool), for
    3×32×32 images; 11.2 M parameters at 10 classes.

    Written here rather than taken from torchvision: torchvision's PyPI wheels are built for
    one torch release each and do not import beside the torch this project pins, and its
    ResNet has the ImageNet stem (7×7 stride-2 convolution and max-pool), which leaves a
    32×32 image 8×8 before the first stage.

    Its BatchNorm running statistics are float buffers, so they travel and are averaged with
    the weights (kernel/flat.py); ``num_batches_tracked`` is an integer and stays local.
    """
    layers: list[nn.Module] = [
        nn.Conv2d(3, 64, 3, padding=1, bias=False),
        nn.BatchNorm2d(64),
        nn.ReLU(),
    ]
    inputs = 64
    for stage, width in enumerate((64, 128, 256, 512)):
        stride = 1 if stage == 0 else 2
        layers += [BasicBlock(inputs, width, stride), BasicBlock(width, width, 1)]
        inputs = width
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(512, num_classes)]
    return nn.Sequential(*layers)


MODELS: dict[str, Callable[[int], nn.Module]] = {
    "mnist1d_cnn": mnist1d_cnn,
    "cifar_cnn": cifar_cnn,
    "femnist_cnn": femnist_cnn,
    "resnet18": resnet18,
}

ModelFactory = Callable[[], nn.Module]
"""A user's model: a function of no arguments that returns a fresh ``nn.Module``."""


def build_model(
    name: str, num_classes: int, seed: int, allowed: Collection[str] | None = None
) -> nn.Module:
    """Build ``name`` with weights drawn from ``seed``: every client gets the same start.

    ``name`` is a zoo entry (built for ``num_classes``) or an import path ``pkg.mod:factory``
    of a ``ModelFactory``, resolved under ``allowed`` (kernel/user_code.py).
    """
    if is_import_path(name):
        factory = load_object(name, allowed)
        if not callable(factory):
            raise UserCodeError(f"model {name!r} is not callable: it must be a model factory")
        return seeded_module(factory, seed, name)
    if name not in MODELS:
        raise ValueError(f"unknown model {name!r}; choose one of {sorted(MODELS)}")
    return seeded_module(lambda: MODELS[name](num_classes), seed, name)


def seeded_module(factory: ModelFactory, seed: int, label: str) -> nn.Module:
    """``factory()`` with torch's global generator seeded for its initial weights (and left
    as it was); ``label`` names the factory in the error for anything but a Module."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        try:
            module = factory()
        except Exception as e:  # the user's code: any failure is theirs to fix, in one line
            raise UserCodeError(
                f"model factory {label} failed when called with no arguments: "
                f"{type(e).__name__}: {e} (model.name needs a function that takes none and "
                "returns a torch.nn.Module)"
            ) from None
    if not isinstance(module, nn.Module):
        kind = type(module).__name__
        raise UserCodeError(
            f"model factory {label} returned a {kind} object, not a torch.nn.Module"
        )
    if not any(p.requires_grad for p in module.parameters()):
        raise UserCodeError(f"model factory {label} returned a module with no trainable parameter")
    return module


def head_parameters(module: nn.Module, layers: int = 2) -> int:
    """Parameters of the last ``layers`` fully connected layers (pFedGraph's "final layers").

    They sit at the end of the parameter vector, since every model here ends in its head.
    """
    linear = [m for m in module.modules() if isinstance(m, nn.Linear)][-layers:]
    return sum(p.numel() for m in linear for p in m.parameters())
