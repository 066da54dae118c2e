"""A method's coordinator-side state after its last completed round, on disk.

Tensors (FedAvg's global model, anywhere in nested dicts and lists: a coalition method keeps
one state per coalition) go to a safetensors file under their dotted path, and the JSON holds
a ``{"$tensor": path}`` marker in their place. Each round's checkpoint has a folder of its
own (``round-<t>``) and the previous round's is kept: the runtime saves round t before the
coordinator records it, so if that record fails (or the process dies in between) the
resume after round t-1 still finds its checkpoint.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors.torch import load_file, save_file

from collabfl.kernel.atomic import replacing, write_text
from collabfl.strategies.rounds import Resume

TENSORS, STATE = "checkpoint.safetensors", "checkpoint.json"


TENSOR_MARK = "$tensor"


def save_checkpoint(folder: Path, round_index: int, checkpoint: dict[str, Any]) -> None:
    """Save round ``round_index``'s checkpoint; keep the previous round's, drop older ones."""
    tensors: dict[str, torch.Tensor] = {}
    plain = _extract(checkpoint, "", tensors)
    target = folder / f"round-{round_index}"
    target.mkdir(parents=True, exist_ok=True)
    if tensors:
        with replacing(target / TENSORS) as tmp:
            save_file(tensors, str(tmp))
    record = {"round": round_index, "state": plain, "tensors": sorted(tensors)}
    write_text(target / STATE, json.dumps(record))
    for old in folder.glob("round-*"):
        number = old.name.removeprefix("round-")
        if number.isdigit() and int(number) < round_index - 1:
            shutil.rmtree(old, ignore_errors=True)


def load_checkpoint(folder: Path, expected_round: int) -> Resume:
    """The checkpoint of ``expected_round``; ValueError if the folder holds none."""
    source = folder / f"round-{expected_round}"
    if not (source / STATE).exists():
        source = folder  # the layout before per-round folders: one checkpoint, the last
    path = source / STATE
    if not path.exists():
        raise ValueError(f"no checkpoint in {folder} to resume round {expected_round + 1} from")
    record = json.loads(path.read_text())
    if record["round"] != expected_round:
        raise ValueError(
            f"checkpoint in {folder} is of round {record['round']}, not {expected_round}"
        )
    tensors = load_file(source / TENSORS) if record["tensors"] else {}
    checkpoint = _restore(dict(record["state"]), tensors)
    for name in record["tensors"]:  # files written before markers: top-level tensors only
        checkpoint.setdefault(name, tensors[name])
    return Resume(expected_round, checkpoint)


def _extract(value: Any, path: str, tensors: dict[str, torch.Tensor]) -> Any:
    """``value`` with every tensor moved into ``tensors`` and replaced by a marker."""
    if isinstance(value, torch.Tensor | np.ndarray):
        tensors[path] = torch.as_tensor(value).detach().cpu().contiguous()
        return {TENSOR_MARK: path}
    if isinstance(value, dict):
        return {
            k: _extract(v, f"{path}.{k}" if path else str(k), tensors) for k, v in value.items()
        }
    if isinstance(value, list | tuple):
        return [_extract(v, f"{path}.{n}", tensors) for n, v in enumerate(value)]
    return value


def _restore(value: Any, tensors: dict[str, torch.Tensor]) -> Any:
    if isinstance(value, dict):
        if set(value) == {TENSOR_MARK}:
            return tensors[value[TENSOR_MARK]]
        return {k: _restore(v, tensors) for k, v in value.items()}
    if isinstance(value, list):
        return [_restore(v, tensors) for v in value]
    return value
