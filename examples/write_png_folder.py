"""Write a demo folder of PNG images for examples/png_folder_data.py (no download).

Four classes of 32×32 RGB pictures (horizontal stripes, vertical stripes, a checkerboard,
a centred square) in random colours with noise; each client holds mostly two of them, so
clients differ as a lab's sites would.

    python examples/write_png_folder.py [--out runs/png_folder] [--clients 4]
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
from PIL import Image

SIZE, CLASSES = 32, 4


def picture(label: int, rng: np.random.Generator) -> np.ndarray:
    """One noisy 32×32 RGB picture of class ``label``, as uint8."""
    rows, cols = np.indices((SIZE, SIZE))
    period = rng.integers(3, 7)
    mask = [
        (rows // period) % 2,
        (cols // period) % 2,
        ((rows // period) + (cols // period)) % 2,
        (abs(rows - SIZE / 2) < SIZE / 4) & (abs(cols - SIZE / 2) < SIZE / 4),
    ][label].astype(np.float32)
    colour = rng.uniform(0.3, 1.0, size=3)
    image = mask[..., None] * colour + rng.normal(0, 0.15, size=(SIZE, SIZE, 3))
    return (np.clip(image, 0, 1) * 255).astype(np.uint8)


def write(out: Path, clients: int, train: int, test: int, seed: int) -> None:
    """``train`` and ``test`` images per client, most of a client's of two classes."""
    rng = np.random.default_rng(seed)
    for k in range(clients):
        favoured = [k % CLASSES, (k + 1) % CLASSES]
        for split, count in (("train", train), ("test", test)):
            for n in range(count):
                label = int(rng.choice(favoured) if rng.random() < 0.8 else rng.integers(CLASSES))
                folder = out / f"client-{k}" / split / str(label)
                folder.mkdir(parents=True, exist_ok=True)
                Image.fromarray(picture(label, rng)).save(folder / f"{n:05d}.png")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("runs/png_folder"))
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--train", type=int, default=200, help="images per client")
    parser.add_argument("--test", type=int, default=100, help="images per client")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    write(args.out, args.clients, args.train, args.test, args.seed)
    print(f"wrote {args.clients} clients' PNG images to {args.out}")


if __name__ == "__main__":
    main()
