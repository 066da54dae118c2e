"""CINIC-10 from a tiny image-folder tree written with real PNGs."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from collabfl.client.data import load_pool
from collabfl.client.data.cinic10 import CLASSES
from collabfl.client.data.images import CINIC10_MEAN, CINIC10_STD

# Per split, how many images each class folder gets.
COUNTS = {"train": 2, "valid": 1, "test": 1}


def _red(label: int) -> int:
    """Each class gets a distinct solid red level, so pixels reveal the label."""
    return 10 + 20 * label


def _write_png(path: Path, red: int, size: tuple[int, int] = (32, 32), mode: str = "RGB") -> None:
    color = (red, 7, 200) if mode == "RGB" else red
    Image.new(mode, size, color).save(path)


def _write_cinic(root: Path) -> None:
    for split, count in COUNTS.items():
        for label, name in enumerate(CLASSES):
            folder = root / split / name
            folder.mkdir(parents=True)
            for i in range(count):
                _write_png(folder / f"img{i}.png", _red(label))


def _normalized(value: int, channel: int) -> float:
    return (value / 255.0 - CINIC10_MEAN[channel]) / CINIC10_STD[channel]


def test_loads_train_plus_valid_and_test(tmp_path: Path) -> None:
    _write_cinic(tmp_path)
    pool = load_pool("cinic10", root=tmp_path, cache_dir=tmp_path / "cache")
    assert pool.name == "cinic10" and pool.num_classes == 10
    assert pool.input_shape == (3, 32, 32)
    assert pool.train.x.shape == (30, 3, 32, 32) and pool.test.x.shape == (10, 3, 32, 32)
    assert pool.train.x.dtype == np.float32 and pool.test.y.dtype == np.int64
    assert np.bincount(pool.train.y).tolist() == [3] * 10
    assert np.bincount(pool.test.y).tolist() == [1] * 10


def test_labels_follow_sorted_folder_names_and_pixels_are_normalized(tmp_path: Path) -> None:
    _write_cinic(tmp_path)
    pool = load_pool("cinic10", root=tmp_path, cache_dir=tmp_path)
    assert list(CLASSES) == sorted(CLASSES)
    for data in (pool.train, pool.test):
        for x, y in zip(data.x, data.y, strict=True):
            assert x[0, 3, 4] == pytest.approx(_normalized(_red(int(y)), 0), abs=1e-5)
            assert x[1, 0, 0] == pytest.approx(_normalized(7, 1), abs=1e-5)
            assert x[2, 31, 31] == pytest.approx(_normalized(200, 2), abs=1e-5)


def test_grayscale_images_get_three_channels(tmp_path: Path) -> None:
    _write_cinic(tmp_path)
    _write_png(tmp_path / "test" / "cat" / "img0.png", 90, mode="L")
    pool = load_pool("cinic10", root=tmp_path, cache_dir=tmp_path)
    (cat,) = np.flatnonzero(pool.test.y == CLASSES.index("cat"))
    for channel in range(3):
        assert pool.test.x[cat, channel, 0, 0] == pytest.approx(_normalized(90, channel), abs=1e-5)


def test_wrong_image_size_names_the_file(tmp_path: Path) -> None:
    _write_cinic(tmp_path)
    _write_png(tmp_path / "valid" / "dog" / "img0.png", 50, size=(16, 32))
    with pytest.raises(ValueError, match=r"dog/img0\.png.*16x32.*32x32"):
        load_pool("cinic10", root=tmp_path, cache_dir=tmp_path)


def test_non_image_file_names_the_file(tmp_path: Path) -> None:
    _write_cinic(tmp_path)
    (tmp_path / "train" / "ship" / "broken.png").write_text("not a png")
    with pytest.raises(ValueError, match=r"broken\.png"):
        load_pool("cinic10", root=tmp_path, cache_dir=tmp_path)


def test_missing_split_folder(tmp_path: Path) -> None:
    _write_cinic(tmp_path)
    for path in sorted((tmp_path / "valid").rglob("*"), reverse=True):
        path.unlink() if path.is_file() else path.rmdir()
    (tmp_path / "valid").rmdir()
    with pytest.raises(FileNotFoundError, match="valid"):
        load_pool("cinic10", root=tmp_path, cache_dir=tmp_path)


def test_missing_class_folder(tmp_path: Path) -> None:
    _write_cinic(tmp_path)
    folder = tmp_path / "test" / "frog"
    (folder / "img0.png").unlink()
    folder.rmdir()
    with pytest.raises(ValueError, match="one folder per class"):
        load_pool("cinic10", root=tmp_path, cache_dir=tmp_path)


def test_empty_class_folder(tmp_path: Path) -> None:
    _write_cinic(tmp_path)
    (tmp_path / "test" / "horse" / "img0.png").unlink()
    with pytest.raises(ValueError, match=r"horse: no \.png images"):
        load_pool("cinic10", root=tmp_path, cache_dir=tmp_path)
