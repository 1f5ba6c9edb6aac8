"""`format: imagefolder`: torchvision's ImageFolder layout, one folder per split.

`<path>/train/<class>/**/<image>`, optional `val/` (or Hugging Face's
`validation/`, `valid/`) and `test/` beside it (`splits` renames them). As torchvision's `ImageFolder`: a class is a
sub-folder, classes are sorted by folder name, images are the files with an
image extension, found recursively in sorted order; hidden entries (".name")
are skipped. Files of other extensions are skipped with a warning (torchvision
skips them silently). An empty class folder, a class of val/ or test/ that
train/ lacks, and a missing test/ are errors: a study never scores training
images (a class of train/ without a test/ folder is refused by
`dear.data.listing`, which every format shares).
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

from dear.data.found import Found
from dear.errors import DearError

log = logging.getLogger("dear.prepare")

# torchvision.datasets.folder.IMG_EXTENSIONS
EXTENSIONS = (".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp")
DEFAULT_SPLITS = {"train": "train", "val": "val", "test": "test"}
VAL_NAMES = ("val", "validation", "valid")  # without `splits.val`, the first of these that exists is the val split


def read(declaration) -> Found:
    root = os.path.normpath(declaration.path)
    key = declaration.key
    if not os.path.isdir(root):
        raise DearError(f"{root}: {key}.path: folder not found; point it to the folder holding train/ and test/ "
                        "(docs/your-data.md)")
    folders = {**DEFAULT_SPLITS, **_validation_folder(root), **(declaration.splits or {})}
    for split in ("train", "test"):
        if not os.path.isdir(os.path.join(root, folders[split])):
            raise DearError(_missing(root, split, folders[split], key))
    skipped: list[str] = []
    found = Found(paths=[], keys=[], splits=[], source=Path(root),
                  split_dirs={split: os.path.join(root, folder) for split, folder in folders.items()})
    classes: list[str] = []
    for split in ("train", "val", "test"):
        split_dir = os.path.join(root, folders[split])
        if split == "val" and not os.path.isdir(split_dir):
            continue  # carved from train (dear.data.custom)
        here = _class_folders(split_dir, skipped)
        if split == "train":
            classes = here
            if not classes:
                raise DearError(f"{split_dir}: no class folders; put each class's images in {split_dir}/<class>/")
        else:
            extra = sorted(set(here) - set(classes))
            if extra:
                raise DearError(f"{os.path.join(split_dir, extra[0])}: class {extra[0]!r} is in {folders[split]}/ "
                                f"but not in {folders['train']}/ ({len(extra)} such); add its training images to "
                                f"{os.path.join(root, folders['train'], extra[0])}/ or remove the folder")
        for class_name in here:
            images = _images(os.path.join(split_dir, class_name), skipped)
            if not images:
                raise DearError(f"{os.path.join(split_dir, class_name)}: empty class folder (no file ending in "
                                f"{', '.join(EXTENSIONS)}); add its images or remove the folder")
            found.paths.extend(images)
            found.keys.extend([class_name] * len(images))
            found.splits.extend([split] * len(images))
    if skipped:
        log.warning("%s: skipped %d file(s) that are hidden or not images (torchvision's ImageFolder skips them too), "
                    "e.g. %s", declaration.name, len(skipped), skipped[0])
    return found


def _validation_folder(root: str) -> dict[str, str]:
    """Hugging Face's imagefolder also names the validation split `validation/` or `valid/`: take the first there."""
    found = next((name for name in VAL_NAMES if os.path.isdir(os.path.join(root, name))), None)
    return {"val": found} if found else {}


def _missing(root: str, split: str, folder: str, key: str) -> str:
    if split == "train":
        return (f"{os.path.join(root, folder)}: no training folder; lay the images out as {root}/{folder}/<class>/... "
                f"(or name the folder in {key}.splits.train)")
    return (f"{os.path.join(root, folder)}: no test folder; move some images of each class to {root}/{folder}/<class>/ "
            f"(or name the folder in {key}.splits.test): a study never scores its training images")


def _class_folders(folder: str, skipped: list[str]) -> list[str]:
    """Sorted non-hidden sub-folders; files beside them are skipped (noted)."""
    names = []
    for item in os.scandir(folder):
        if item.name.startswith("."):
            skipped.append(item.path)
        elif item.is_dir():
            names.append(item.name)
        else:
            skipped.append(item.path)
    return sorted(names)


def _images(folder: str, skipped: list[str]) -> list[str]:
    """Image files under `folder`, recursively, in torchvision's order: folders sorted by path, files by name."""
    found = []
    for where, names in sorted(_walk(folder, skipped)):
        found.extend(os.path.join(where, name) for name in sorted(names))
    return found


def _walk(folder: str, skipped: list[str]):
    """(folder, its image file names) of `folder` and every non-hidden folder below it."""
    names = []
    for item in os.scandir(folder):
        if item.name.startswith("."):
            skipped.append(item.path)
        elif item.is_dir():
            yield from _walk(item.path, skipped)
        elif item.name.lower().endswith(EXTENSIONS):
            names.append(item.name)
        else:
            skipped.append(item.path)
    yield folder, names
