"""The layouts of CoOp's datasets that have no split JSON (CoOp's DATASETS.md), as formats of the built-in declarations.

- `coop-imagenet`: `images/train/<wnid>/` is the train split, `images/val/<wnid>/`
  the test split (no val split), `classnames.txt` ("<wnid> <class name>" per
  line, wnids sorted) names the classes and numbers them;
- `coop-imagenet-v2`: folders named by ImageNet label 0..n-1 (CoOp: `range(1000)`), test only;
- `coop-imagenet-subset`: wnid folders, possibly a subset of ImageNet's classes
  (ImageNet-A/-R: 200), test only: as in CoOp, labels number the dataset's own
  sorted folders 0..k-1, and `imagenet` keeps each class's index among
  ImageNet's classes (its line of classnames.txt);
- `coop-fgvc`: labels are line numbers of `variants.txt`; `images_variant_<split>.txt`
  list `<image id> <variant>`.

File lists are sorted by name where CoOp uses `os.listdir` order, so the
listing is the same on every machine. A declaration's `path` is the file that
names the classes (classnames.txt, variants.txt), `images` the image folder.
"""

from __future__ import annotations

import os
from pathlib import Path

from dear.data.found import Found
from dear.errors import DearError

SPLITS = ("train", "val", "test")


def read_classnames(path: Path, howto: str) -> dict[str, str]:
    """`classnames.txt`: "<wnid> <class name>" per line, wnids sorted (ImageNet's label order)."""
    names: dict[str, str] = {}
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        if not line.strip():
            continue
        wnid, _, classname = line.strip().partition(" ")
        if not classname:
            raise DearError(f"{path}: line {number} is {line.strip()!r}, expected '<wnid> <class name>'; "
                            f"use CoOp's classnames.txt; {howto}")
        if wnid in names:
            raise DearError(f"{path}: wnid {wnid} is listed twice (line {number}); use CoOp's classnames.txt")
        names[wnid] = classname
    if list(names) != sorted(names):
        raise DearError(f"{path}: wnids are not in sorted order, so line numbers are not ImageNet's labels; "
                        "use CoOp's classnames.txt")
    return names


def class_folders(folder: Path) -> list[str]:
    """Sorted non-hidden sub-folders (CoOp: sorted folders; files such as README.txt are skipped)."""
    return sorted(entry.name for entry in os.scandir(folder) if entry.is_dir() and not entry.name.startswith("."))


def image_files(folder: Path) -> list[str]:
    """Sorted non-hidden files: CoOp uses `os.listdir` order, which differs between machines."""
    return sorted(entry.name for entry in os.scandir(folder) if entry.is_file() and not entry.name.startswith("."))


def _add_folder(found: Found, folder: Path, key: str, split: str) -> None:
    files = image_files(folder)
    prefix = os.path.join(str(folder), "")  # + name == os.path.join(folder, name), at a fraction of its cost
    found.paths.extend([prefix + name for name in files])
    found.keys.extend([key] * len(files))
    found.splits.extend([split] * len(files))


def read_imagenet(declaration) -> Found:
    """images/train/<wnid>/ is the train split, images/val/<wnid>/ the test split (no val split)."""
    classnames_file = Path(declaration.path)
    names = read_classnames(classnames_file, declaration.howto)
    image_root = Path(declaration.images)
    train_dir, test_dir = image_root / "train", image_root / "val"
    for needed in (train_dir, test_dir):
        if not needed.is_dir():
            raise DearError(f"{needed}: not found; {declaration.howto}")
    wnids = class_folders(train_dir)
    if wnids != list(names):
        raise DearError(f"{train_dir}: {len(wnids)} class folders but {classnames_file.name} lists {len(names)} "
                        f"wnids{_first_difference(wnids, list(names))}; they must match one to one")
    found = Found(paths=[], keys=[], splits=[], source=classnames_file, order=wnids, names=names,
                  split_dirs={"train": str(train_dir), "test": str(test_dir)},
                  imagenet={wnid: label for label, wnid in enumerate(wnids)})
    for split_name, split_dir in (("train", train_dir), ("test", test_dir)):
        for wnid in class_folders(split_dir):
            if wnid not in found.imagenet:
                raise DearError(f"{split_dir / wnid}: not a class of {train_dir}; remove it")
            _add_folder(found, split_dir / wnid, wnid, split_name)
    return found


def read_imagenet_v2(declaration) -> Found:
    """Folders named by ImageNet label index 0..n-1 (CoOp: `range(1000)`); test only."""
    classnames_file = Path(declaration.path)
    names = list(read_classnames(classnames_file, declaration.howto).values())
    image_root = Path(declaration.images)
    keys = [str(label) for label in range(len(names))]
    found = Found(paths=[], keys=[], splits=[], source=classnames_file, order=keys, names=dict(zip(keys, names)),
                  imagenet={key: label for label, key in enumerate(keys)})
    for key in keys:
        class_dir = image_root / key
        if not class_dir.is_dir():
            raise DearError(f"{class_dir}: not found ({classnames_file.name} lists {len(names)} classes, "
                            f"so folders 0..{len(names) - 1} are expected); {declaration.howto}")
        _add_folder(found, class_dir, key, "test")
    extra = sorted(set(class_folders(image_root)) - set(keys))
    if extra:
        raise DearError(f"{image_root / extra[0]}: no such class in {classnames_file.name} "
                        f"({len(names)} classes); remove it or use CoOp's classnames.txt")
    return found


def read_imagenet_subset(declaration) -> Found:
    """wnid folders, possibly a subset of ImageNet's classes (ImageNet-A/-R: 200); test only."""
    classnames_file = Path(declaration.path)
    names = read_classnames(classnames_file, declaration.howto)
    imagenet_label = {wnid: label for label, wnid in enumerate(names)}
    image_root = Path(declaration.images)
    wnids = class_folders(image_root)
    unknown = [wnid for wnid in wnids if wnid not in imagenet_label]
    if unknown:
        raise DearError(f"{image_root / unknown[0]}: wnid not in {classnames_file} "
                        f"({len(unknown)} such folders); use ImageNet's classnames.txt")
    found = Found(paths=[], keys=[], splits=[], source=classnames_file, order=wnids,
                  names={wnid: names[wnid] for wnid in wnids}, imagenet={wnid: imagenet_label[wnid] for wnid in wnids})
    for wnid in wnids:
        _add_folder(found, image_root / wnid, wnid, "test")
    return found


def read_fgvc_aircraft(declaration) -> Found:
    """Labels are line numbers of `variants.txt`; split files list `<image id> <variant>`."""
    variants_file = Path(declaration.path)
    folder = variants_file.parent
    variants = [line.strip() for line in variants_file.read_text().splitlines() if line.strip()]
    if len(set(variants)) != len(variants):
        raise DearError(f"{variants_file}: a variant is listed twice; use the file from fgvc-aircraft-2013b")
    known = set(variants)
    prefix = str(declaration.images)
    found = Found(paths=[], keys=[], splits=[], source=variants_file, order=variants,
                  names={variant: variant for variant in variants}, rows=[], listed=True)
    for split_name in SPLITS:
        list_file = folder / f"images_variant_{split_name}.txt"
        if not list_file.is_file():
            raise DearError(f"{list_file}: not found; {declaration.howto}")
        for number, line in enumerate(list_file.read_text().splitlines(), start=1):
            if not line.strip():
                continue
            image_id, _, variant = line.strip().partition(" ")
            if variant not in known:
                raise DearError(f"{list_file}: line {number}: variant {variant!r} is not in {variants_file.name}")
            found.paths.append(os.path.join(prefix, image_id + ".jpg"))
            found.keys.append(variant)
            found.splits.append(split_name)
            found.rows.append(f"{list_file}:{number}")
    return found


def _first_difference(found: list[str], listed: list[str]) -> str:
    only_found = sorted(set(found) - set(listed))
    only_listed = sorted(set(listed) - set(found))
    if only_found:
        return f" ({only_found[0]} has a folder but no line)"
    if only_listed:
        return f" ({only_listed[0]} has a line but no folder)"
    return ""
