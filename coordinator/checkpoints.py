"""A method's coordinator-side state after its last completed round, on disk.

Tensors (FedAvg's global model) go to a safetensors file and everything else to JSON; both
are replaced atomically, JSON last, so a reader sees either the old or the new checkpoint.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors.torch import load_file, save_file

from collabfl.client.atomic import replacing, write_text
from collabfl.strategies.rounds import Resume

TENSORS, STATE = "checkpoint.safetensors", "checkpoint.json"


def save_checkpoint(folder: Path, round_index: int, checkpoint: dict[str, Any]) -> None:
    tensors = {k: _to_tensor(v) for k, v in checkpoint.items() if _is_tensor(v)}
    plain = {k: v for k, v in checkpoint.items() if not _is_tensor(v)}
    folder.mkdir(parents=True, exist_ok=True)
    if tensors:
        with replacing(folder / TENSORS) as tmp:
            save_file(tensors, str(tmp))
    record = {"round": round_index, "state": plain, "tensors": sorted(tensors)}
    write_text(folder / STATE, json.dumps(record))


def load_checkpoint(folder: Path, expected_round: int) -> Resume:
    """The checkpoint of ``expected_round``; ValueError if the folder holds another."""
    path = folder / STATE
    if not path.exists():
        raise ValueError(f"no checkpoint in {folder} to resume round {expected_round + 1} from")
    record = json.loads(path.read_text())
    if record["round"] != expected_round:
        raise ValueError(
            f"checkpoint in {folder} is of round {record['round']}, not {expected_round}"
        )
    checkpoint = dict(record["state"])
    if record["tensors"]:
        tensors = load_file(folder / TENSORS)
        checkpoint.update({name: tensors[name] for name in record["tensors"]})
    return Resume(expected_round, checkpoint)


def _is_tensor(value: Any) -> bool:
    return isinstance(value, torch.Tensor | np.ndarray)


def _to_tensor(value: torch.Tensor | np.ndarray) -> torch.Tensor:
    return torch.as_tensor(value).detach().cpu().contiguous()
