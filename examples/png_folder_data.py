"""A ``data.source`` factory: each client's PNG images, read from a folder one at a time.

The folder holds ``client-<k>/<split>/<label>/<name>.png`` (split: train or test; write a
demo one with examples/write_png_folder.py), at $PNG_FOLDER or runs/png_folder. Nothing is
loaded whole: collabfl reads each image when a batch needs it.
"""

import os
from pathlib import Path

import numpy as np
from PIL import Image
from torch.utils.data import Dataset

ROOT = Path(os.environ.get("PNG_FOLDER", "runs/png_folder"))


class PngFolder(Dataset):
    """The images under ``folder``, labelled by the name of the folder each lies in."""

    def __init__(self, folder: Path) -> None:
        self.files = sorted(folder.glob("*/*.png"))

    def __len__(self) -> int:
        return len(self.files)

    def __getitem__(self, i: int) -> tuple[np.ndarray, int]:
        rgb = np.asarray(Image.open(self.files[i]).convert("RGB"), dtype=np.float32) / 255
        return rgb.transpose(2, 0, 1), int(self.files[i].parent.name)  # channels first


def factory(client_id: int) -> dict:
    folder = ROOT / f"client-{client_id}"
    train, test = PngFolder(folder / "train"), PngFolder(folder / "test")
    return {"train": train, "test": test, "num_classes": 4}
