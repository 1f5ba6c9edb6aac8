"""A dataset of one's own at test size: tiny PNGs laid out as ImageFolder class folders, and a CSV of the same.

`imagefolder(root)` writes `root/train/<class>/*.png` and `root/test/<class>/*.png`
(no val/: `prepare` carves it as Dassl does); `csv_copy(root)` writes
`root/images.csv` listing the same files in ImageFolder's order, with a split
column, so both declarations describe the same images.
"""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np
from PIL import Image

# Background colours the embedded world's captions name: a class is a colour (the world's own vocabulary)
CLASSES = {"red": (220, 40, 40), "green": (40, 180, 60), "blue": (40, 70, 220), "yellow": (230, 210, 40),
           "dark_purple": (110, 40, 150), "orange": (240, 140, 30)}


def imagefolder(root: Path, train: int = 6, test: int = 3, size: int = 32, classes: dict = CLASSES) -> Path:
    """ImageFolder layout of `len(classes)` colour classes: `train` and `test` images each (seeded noise)."""
    rng = np.random.default_rng(0)
    for split, count in (("train", train), ("test", test)):
        for name, colour in classes.items():
            folder = root / split / name
            folder.mkdir(parents=True, exist_ok=True)
            for k in range(count):
                pixels = np.clip(np.asarray(colour) + rng.integers(-25, 26, (size, size, 3)), 0, 255)
                Image.fromarray(pixels.astype(np.uint8)).save(folder / f"{name}_{k:03d}.png")
    return root


def csv_copy(root: Path, name: str = "images.csv") -> Path:
    """`root/<name>`: path,classname,split of every image of `imagefolder(root)`, in ImageFolder's order."""
    path = root / name
    with open(path, "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["path", "classname", "split"])
        for split in ("train", "test"):
            for folder in sorted(p for p in (root / split).iterdir() if p.is_dir()):
                for image in sorted(folder.iterdir()):
                    writer.writerow([image.relative_to(root).as_posix(), folder.name, split])
    return path
