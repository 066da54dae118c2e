"""Where a node's tensors live: one device spec, resolved once, and every tensor that enters
the node's math placed there.

A spec is ``cpu``, ``cuda`` (the current CUDA device), ``cuda:N`` or ``auto`` (CUDA when torch
sees a device, else the CPU). ``check_spec`` reads only the spelling, so a coordinator without a
GPU can accept a run its clients' GPUs will serve; ``resolve_device`` also checks that the
device exists on this machine, which is what a client daemon does when it starts.

Tensors reach a client from its peers (bytes read on the CPU), from the coordinator
(aggregates, discriminators, SPO's targets) and from its saved state. ``place`` puts each on
the node's device where it enters; the strategy math then refuses operands on two devices
(``require_same_device``) instead of failing deep inside torch, or, worse, silently skipping a
step.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # torch is imported only where a device is resolved (daemon start-up)
    import torch

DEVICE_FORMS = "cpu, cuda, cuda:N or auto"
_SPEC = re.compile(r"cpu|auto|cuda(:\d+)?")


def check_spec(spec: str) -> str:
    """``spec`` if it is spelled as a device spec; ValueError naming the value otherwise."""
    if not isinstance(spec, str) or _SPEC.fullmatch(spec) is None:
        raise ValueError(f"device {spec!r} is not one of {DEVICE_FORMS}")
    return spec


def resolve_device(spec: str) -> torch.device:
    """The torch device ``spec`` names on this machine; ValueError (one line: the value and
    what exists) when it names a CUDA device torch does not see."""
    import torch

    check_spec(spec)
    available = torch.cuda.is_available()
    if spec == "auto":
        return torch.device("cuda" if available else "cpu")
    if spec == "cpu":
        return torch.device("cpu")
    if not available:
        raise ValueError(
            f"device {spec!r}: torch sees no CUDA device (torch {torch.__version__}); "
            "use cpu, or run where CUDA is"
        )
    device = torch.device(spec)
    count = torch.cuda.device_count()
    if device.index is not None and device.index >= count:
        raise ValueError(
            f"device {spec!r}: torch sees {count} CUDA device(s), cuda:0 to cuda:{count - 1}"
        )
    return device


def place(tensor: torch.Tensor, device: torch.device) -> torch.Tensor:
    """``tensor`` on ``device`` (itself when it is there already)."""
    return tensor if tensor.device == device else tensor.to(device)


def require_same_device(first: Any, second: Any, what: str) -> None:
    """ValueError naming both devices when two torch tensors of ``what`` live on different
    devices (NumPy arrays and other vectors pass: they have one device)."""
    import torch

    if not (isinstance(first, torch.Tensor) and isinstance(second, torch.Tensor)):
        return
    if first.device != second.device:
        raise ValueError(
            f"{what}: tensors on two devices, {first.device} and {second.device}; "
            "every tensor must be placed on the node's device first (kernel/devices.py)"
        )


def device_report(spec: str) -> tuple[bool, str]:
    """Whether ``spec`` can be used here, and one line saying what it resolves to, e.g.
    ``cuda:0: NVIDIA H200, 139 GiB`` (for ``collabfl doctor``)."""
    import torch

    try:
        device = resolve_device(spec)
    except ValueError as error:
        return False, str(error)
    if device.type != "cuda":
        return True, f"{spec}: cpu ({torch.get_num_threads()} threads, torch {torch.__version__})"
    index = torch.cuda.current_device() if device.index is None else device.index
    props = torch.cuda.get_device_properties(index)
    gib = props.total_memory / 2**30
    return True, f"cuda:{index}: {props.name}, {gib:.0f} GiB"
