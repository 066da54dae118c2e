"""CIFAR-10 from tiny files in the real ``cifar-10-batches-py`` format."""

from __future__ import annotations

import io
import os
import pickle
import struct
from pathlib import Path
from typing import ClassVar

import numpy as np
import pytest

from collabfl.client.data import load_pool
from collabfl.client.data.cinic10 import CLASSES
from collabfl.client.data.images import CIFAR10_MEAN, CIFAR10_STD

PER_BATCH = 4
LABEL_NAMES = [name.encode() for name in CLASSES]  # CIFAR-10 and CINIC-10 share them


def _batch(seed: int) -> dict[bytes, object]:
    rng = np.random.default_rng(seed)
    return {
        b"batch_label": f"batch {seed}".encode(),
        b"labels": [int(v) for v in rng.integers(0, 10, PER_BATCH)],
        b"data": rng.integers(0, 256, (PER_BATCH, 3072), dtype=np.uint8),
        b"filenames": [f"img_{seed}_{i}.png".encode() for i in range(PER_BATCH)],
    }


class _Python2Pickler(pickle._Pickler):
    """Writes bytes as Python 2 ``str`` opcodes, as the original CIFAR-10 files do."""

    dispatch: ClassVar[dict] = dict(pickle._Pickler.dispatch)

    def save_py2_str(self, obj: bytes) -> None:
        if len(obj) < 256:
            self.write(pickle.SHORT_BINSTRING + bytes([len(obj)]) + obj)
        else:
            self.write(pickle.BINSTRING + struct.pack("<i", len(obj)) + obj)
        self.memoize(obj)

    dispatch[bytes] = save_py2_str


def _dump(obj: object, path: Path, protocol: int | str = 2) -> None:
    if protocol == "py2":
        buffer = io.BytesIO()
        _Python2Pickler(buffer, protocol=2).dump(obj)
        # numpy 1.x, which wrote the real files, named its module numpy.core.
        path.write_bytes(buffer.getvalue().replace(b"numpy._core.", b"numpy.core."))
        return
    with path.open("wb") as f:
        pickle.dump(obj, f, protocol=protocol)


def _write_cifar(root: Path, protocol: int | str = "py2") -> dict[str, dict[bytes, object]]:
    folder = root / "cifar-10-batches-py"
    folder.mkdir(parents=True)
    names = [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]
    batches = {name: _batch(seed) for seed, name in enumerate(names)}
    for name, batch in batches.items():
        _dump(batch, folder / name, protocol)
    meta = {b"label_names": LABEL_NAMES, b"num_cases_per_batch": PER_BATCH, b"num_vis": 3072}
    _dump(meta, folder / "batches.meta", protocol)
    return batches


@pytest.mark.parametrize("protocol", ["py2", 2, pickle.HIGHEST_PROTOCOL])
def test_loads_batches_in_order(tmp_path: Path, protocol: int | str) -> None:
    batches = _write_cifar(tmp_path, protocol)
    pool = load_pool("cifar10", root=tmp_path, cache_dir=tmp_path / "cache")
    assert pool.name == "cifar10" and pool.num_classes == 10
    assert pool.input_shape == (3, 32, 32)
    assert pool.train.x.shape == (5 * PER_BATCH, 3, 32, 32)
    assert pool.test.x.shape == (PER_BATCH, 3, 32, 32)
    assert pool.train.x.dtype == np.float32 and pool.train.y.dtype == np.int64
    train_labels = [v for i in range(1, 6) for v in batches[f"data_batch_{i}"][b"labels"]]
    assert pool.train.y.tolist() == train_labels
    assert pool.test.y.tolist() == batches["test_batch"][b"labels"]


def test_pixels_are_channel_first_and_normalized(tmp_path: Path) -> None:
    batches = _write_cifar(tmp_path)
    raw = batches["data_batch_1"][b"data"]
    pool = load_pool("cifar10", root=tmp_path, cache_dir=tmp_path)
    # Row layout: 1024 red values, then green, then blue, each row-major 32x32.
    for channel in range(3):
        pixel = raw[0, channel * 1024 + 5 * 32 + 7] / 255.0
        expected = (pixel - CIFAR10_MEAN[channel]) / CIFAR10_STD[channel]
        assert pool.train.x[0, channel, 5, 7] == pytest.approx(expected, abs=1e-5)


class _RunsShell:
    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[object, tuple[str]]:
        return os.system, (f"touch {self.marker}",)


def test_pickle_with_forbidden_global_is_refused(tmp_path: Path) -> None:
    _write_cifar(tmp_path)
    marker = tmp_path / "pwned"
    folder = tmp_path / "cifar-10-batches-py"
    _dump({b"data": _RunsShell(marker), b"labels": []}, folder / "data_batch_2")
    with pytest.raises(pickle.UnpicklingError, match=r"data_batch_2.*refusing to load global"):
        load_pool("cifar10", root=tmp_path, cache_dir=tmp_path)
    assert not marker.exists()


def test_missing_folder_names_expected_path(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="cifar-10-batches-py"):
        load_pool("cifar10", root=tmp_path, cache_dir=tmp_path)


def test_missing_batch_file_is_named(tmp_path: Path) -> None:
    _write_cifar(tmp_path)
    (tmp_path / "cifar-10-batches-py" / "data_batch_3").unlink()
    with pytest.raises(FileNotFoundError, match="data_batch_3"):
        load_pool("cifar10", root=tmp_path, cache_dir=tmp_path)


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ({b"data": np.zeros((4, 100), np.uint8), b"labels": [0, 1, 2, 3]}, "3072"),
        ({b"data": np.zeros((4, 3072), np.uint8), b"labels": [0, 1]}, "labels"),
        ({b"data": np.zeros((4, 3072), np.uint8), b"labels": [0, 1, 2, 10]}, "labels"),
        ({b"data": np.zeros((4, 3072), np.float64), b"labels": [0, 1, 2, 3]}, "uint8"),
        ({b"labels": [0, 1, 2, 3]}, "data"),
        ([1, 2, 3], "dict"),
    ],
)
def test_malformed_batch_is_a_clear_error(tmp_path: Path, content: object, message: str) -> None:
    _write_cifar(tmp_path)
    _dump(content, tmp_path / "cifar-10-batches-py" / "test_batch")
    with pytest.raises(ValueError, match=message) as info:
        load_pool("cifar10", root=tmp_path, cache_dir=tmp_path)
    assert "test_batch" in str(info.value)


def test_truncated_pickle_is_a_clear_error(tmp_path: Path) -> None:
    _write_cifar(tmp_path)
    path = tmp_path / "cifar-10-batches-py" / "data_batch_1"
    path.write_bytes(path.read_bytes()[:100])
    with pytest.raises(ValueError, match="data_batch_1"):
        load_pool("cifar10", root=tmp_path, cache_dir=tmp_path)


def test_meta_must_list_ten_classes(tmp_path: Path) -> None:
    _write_cifar(tmp_path)
    _dump({b"label_names": LABEL_NAMES[:3]}, tmp_path / "cifar-10-batches-py" / "batches.meta")
    with pytest.raises(ValueError, match=r"batches\.meta"):
        load_pool("cifar10", root=tmp_path, cache_dir=tmp_path)
