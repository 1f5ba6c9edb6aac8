"""A format's rows (`Found`) made into the `Listing` that `prepare` indexes: done once, for every dataset.

What every dataset shares, whatever its format and whether built in or one's own:
- labels: the format's numbering (coop-json, CSV labels, classnames.txt,
  variants.txt) or the class keys sorted (ImageFolder's `find_classes`), every
  label 0..n-1 with an image;
- names: `classnames` (a mapping or a file of "<key> <name>" lines) verbatim,
  else the format's name or the key, with "_" read as a space for a dataset of
  one's own in every format (CoOp's files keep their names: `spaced_names`);
- order: one's own datasets are sorted (the canonical order below), so no
  listing order decides the carve or the picks; CoOp's keep their files'
  order, which is what Dassl draws from (`order: listed`);
- a validation split, where there is none and the declaration carves one, as
  Dassl's `split_trainval` does (CoOp's datasets/oxford_pets.py): per label in
  order of first appearance, shuffle its rows and take round(20%) as
  validation, on `random.Random(split_seed)`;
- base classes: `base_classes` (keys or names), else CoOp's first half;
- refused, one line naming the file or row: the same image listed twice, a
  class with no training image (a CSV or JSON row's typo names a class of its
  own), a class with no test image; warned: a class missing from a given val split.

The canonical order: rows by split (train, val, test), then label, then the
image's folder path, then its file name (code-point order): torchvision's
ImageFolder order, so a folder, a CSV and a split JSON of the same files list
them alike.

Few-shot picks and seeds are then those of `dear.data.fewshot` for every dataset.
"""

from __future__ import annotations

import difflib
import logging
import os
import random
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from dear.data.found import Found
from dear.data.manifest import SPLITS
from dear.errors import DearError

log = logging.getLogger("dear.prepare")

P_VAL = 0.2  # Dassl's split_trainval default
TRAIN, VAL, TEST = (SPLITS.index(split) for split in ("train", "val", "test"))
SPLIT_CODE = {name: code for code, name in enumerate(SPLITS)}


@dataclass
class Listing:
    """Every image of a dataset, as parallel columns (no image is opened)."""

    paths: list[str]              # [N] image paths
    labels: np.ndarray            # [N] int32, the dataset's labels 0..n-1
    splits: np.ndarray            # [N] int8, index into SPLITS
    classnames: list[str]         # [n] label -> class name
    imagenet_labels: np.ndarray | None  # [N] int32 for the ImageNet family, else None
    source: Path                  # the file that defines labels and splits (hashed into provenance)
    base: np.ndarray | None = None  # [n] bool, True for a base class (data.custom's base_classes); None: CoOp's half
    declared: np.ndarray | None = None  # [N] int8, the split each row was declared in (carved val: train); None: splits
    rows: list[str] | None = None  # [N] where each image is declared (file:line) for formats that list rows

    def declared_splits(self) -> np.ndarray:
        return self.splits if self.declared is None else self.declared

    def where(self, row: int) -> str:
        """Image `row` for a message: its path, and its row of the file where one declares it."""
        return self.paths[row] if self.rows is None else f"{self.paths[row]} ({self.rows[row]})"


def assemble(declaration, found: Found) -> Listing:
    """The `Listing` of `found` under `declaration`'s facts; every problem one line naming the file or row."""
    if not found.paths:
        raise DearError(f"{found.source}: {declaration.key} lists no images; {declaration.howto}")
    order = found.order if found.order is not None else sorted(set(found.keys))
    label_of = {class_key: label for label, class_key in enumerate(order)}
    labels = np.asarray(list(map(label_of.__getitem__, found.keys)), dtype=np.int64)     # [N]
    splits = np.asarray(list(map(SPLIT_CODE.__getitem__, found.splits)), dtype=np.int8)  # [N]
    _every_label_present(labels, len(order), found.source, declaration)
    names = class_names(found, order, declaration)
    if found.listed:
        _once_each(found)
    _classes_in_each_split(declaration, found, order, names, labels, splits)
    rows = _canonical(found, labels, splits) if declaration.order == "canonical" else np.arange(len(labels))
    declared = None
    if declaration.carve_val and not (splits == VAL).any() and (splits == TRAIN).any():
        rows, carved = _carve(rows, labels, splits, declaration.split_seed, names, found.source)
        declared, splits = splits[rows], carved
    else:
        splits = splits[rows]
    imagenet = None
    if found.imagenet is not None:
        by_label = np.asarray([found.imagenet[class_key] for class_key in order], dtype=np.int32)  # [n]
        imagenet = by_label[labels[rows]]
    same = declared is None and declaration.order != "canonical"  # rows in the format's own order: no copy
    listing = Listing(paths=found.paths if same else [found.paths[i] for i in rows],
                      labels=labels[rows].astype(np.int32), splits=splits, classnames=names, imagenet_labels=imagenet,
                      source=found.source, declared=declared,
                      rows=found.rows if same or found.rows is None else [found.rows[i] for i in rows])
    listing.base = base_mask(declaration.base_classes, order, names, declaration.key)
    return listing


def _every_label_present(labels: np.ndarray, n_classes: int, source: Path, declaration) -> None:
    """Labels must be exactly 0..n-1, every one with an image (a numbered format may skip one)."""
    images = np.bincount(labels, minlength=n_classes)  # [n]
    if not images.all():
        missing = np.flatnonzero(images == 0)
        raise DearError(f"{source}: labels must be 0..n-1 with every class present, but label {missing[0]} has no "
                        f"image ({n_classes - missing.size} distinct labels); {declaration.howto}")


# --- class names and base classes -----------------------------------------------------

def class_names(found: Found, order: list[str], declaration) -> list[str]:
    """The name of each label: `classnames` verbatim, else the format's name or the key ('_' a space: one's own)."""
    key = declaration.key
    given = read_classnames(declaration.classnames, key)
    unknown = sorted(set(given) - set(order))
    if unknown:
        raise DearError(f"{key}.classnames: {unknown[0]!r} is not a class of {found.source} ({len(order)} classes, "
                        f"e.g. {order[0]!r}); fix the key or remove it")
    names = []
    for class_key in order:
        if class_key in given:
            names.append(given[class_key])
            continue
        name = (found.names or {}).get(class_key)
        if name is None and found.names is not None:  # numbered classes: a label is no name
            where = found.where(found.keys.index(class_key)) if class_key in found.keys else found.source
            raise DearError(f"{where}: label {class_key} has no class name; add {class_key} to {key}.classnames")
        name = name if name is not None else class_key
        names.append(name.replace("_", " ") if declaration.spaced_names else name)
    return names


def read_classnames(value, key: str) -> dict[str, str]:
    """`classnames` as {class key: name}: the mapping itself, or a file of '<key> <name>' lines."""
    if value is None:
        return {}
    if isinstance(value, dict):
        return {str(k): v for k, v in value.items()}
    path = Path(value)
    if not path.is_file():
        raise DearError(f"{path}: {key}.classnames: file not found; give a mapping or a file of '<key> <name>' lines")
    names: dict[str, str] = {}
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        class_key, _, name = line.strip().partition(" ")
        if not name.strip() or class_key in names:
            why = "lacks a name after the key" if not name.strip() else f"repeats key {class_key!r}"
            raise DearError(f"{path}:{number}: the line {why}; write one '<key> <class name>' line per class")
        names[class_key] = name.strip()
    return names


def base_mask(value, order: list[str], names: list[str], key: str) -> np.ndarray | None:
    """[n] bool, True for a base class, from `base_classes` (keys or names); None: CoOp's first half."""
    if value is None:
        return None
    if isinstance(value, str):
        path = Path(value)
        if not path.is_file():
            raise DearError(f"{path}: {key}.base_classes: file not found; give a list or a file of one class per line")
        value = [line.strip() for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    label_of = {**{name: label for label, name in enumerate(names)}, **{k: label for label, k in enumerate(order)}}
    unknown = [item for item in value if item not in label_of]
    if unknown:
        raise DearError(f"{key}.base_classes: {unknown[0]!r} is not a class (a folder/key or a class name, e.g. "
                        f"{order[0]!r}); fix it")
    base = np.zeros(len(order), dtype=bool)
    base[[label_of[item] for item in value]] = True
    if base.all() or not base.any():
        raise DearError(f"{key}.base_classes: lists {'every' if base.any() else 'no'} class; base-to-novel needs "
                        "classes in both halves")
    return base


# --- rows ---------------------------------------------------------------------------

def _once_each(found: Found) -> None:
    """The same image in two splits (or twice in one) would leak or double-count: one line naming it."""
    first: dict[str, int] = {}
    for row, path in enumerate(found.paths):
        seen = first.setdefault(path, row)
        if seen != row:
            where = f" ({found.rows[seen]} and {found.rows[row]})" if found.rows else ""
            both = f"both {found.splits[seen]} and {found.splits[row]}" if found.splits[seen] != found.splits[row] \
                else f"{found.splits[row]} twice"
            raise DearError(f"{path}: listed in {both}{where}; keep each image in one split, once")


def _classes_in_each_split(declaration, found: Found, order: list[str], names: list[str], labels: np.ndarray,
                           splits: np.ndarray) -> None:
    """Every class has training images (unless test only) and test images; one missing from a given val is warned.

    A class named only by a test row is most often a typo of a class name in a CSV or JSON: the row is named,
    with the nearest class. A class without test images has no accuracy, so base or novel would be undefined.
    """
    if not (splits == TEST).any():
        raise DearError(f"{found.source}: {declaration.key} has no test images; give each class test images in a test "
                        f"split ({declaration.howto}): a study never scores its training images")
    counts = np.bincount(labels * len(SPLITS) + splits, minlength=len(order) * len(SPLITS)).reshape(-1, len(SPLITS))
    #        [n, 3] images per class and split
    if not declaration.test_only and found.rows is not None:
        _refuse_empty(found, order, names, labels, counts, TRAIN, "training")
    _refuse_empty(found, order, names, labels, counts, TEST, "test")
    if counts[:, VAL].any() and not counts[:, VAL].all():
        lacking = [names[label] for label in np.flatnonzero(counts[:, VAL] == 0)]
        log.warning("%s: %d class(es) have no image in the val split (e.g. %r): they get no validation shots, so "
                    "early choices (fusion weights, linear probe's C) do not see them; add val images or remove the "
                    "val split to carve one from train", declaration.name, len(lacking), lacking[0])


def _refuse_empty(found: Found, order: list[str], names: list[str], labels: np.ndarray, counts: np.ndarray,
                  split: int, what: str) -> None:
    empty = np.flatnonzero(counts[:, split] == 0)
    if not empty.size:
        return
    label = int(empty[0])
    had = ", ".join(f"{counts[label, code]} {SPLITS[code]}" for code in range(len(SPLITS)) if counts[label, code])
    more = f"; {empty.size} classes have none" if empty.size > 1 else ""
    typo = ""
    if found.rows is not None:  # a class named by rows of a file: most often a typo of another class's name
        where = found.where(int(np.flatnonzero(labels == label)[0]))
        close = difflib.get_close_matches(order[label], [order[k] for k in np.flatnonzero(counts[:, split])], n=1)
        typo = f", a typo of {close[0]!r}?" if close else ""
        fix = f"fix the class name in this row, or give the class {what} images"
    elif found.split_dirs is not None and SPLITS[split] in found.split_dirs:
        where = os.path.join(found.split_dirs[SPLITS[split]], order[label])
        fix = f"move some of its images to {where}{os.sep}, or remove the class"
    else:
        where, fix = str(found.source), f"give it {what} images, or remove the class"
    why = "" if what == "training" else ": a class without test images has no accuracy"
    raise DearError(f"{where}: class {names[label]!r} has no {what} image (its images: {had}){typo}{more}; {fix}{why}")


def _canonical(found: Found, labels: np.ndarray, splits: np.ndarray) -> np.ndarray:
    """Rows by split, label, folder path, file name: torchvision's ImageFolder order, whatever the listing's."""
    return np.asarray(sorted(range(len(labels)), key=lambda row: (splits[row], labels[row],
                                                                  *os.path.split(found.paths[row]))),
                      dtype=np.int64)


def _carve(rows: np.ndarray, labels: np.ndarray, splits: np.ndarray, seed: int, names: list[str],
           source: Path) -> tuple[np.ndarray, np.ndarray]:
    """(rows of the listing in order: train, val, test; their split codes), validation carved from `rows`' train
    rows by Dassl's `split_trainval`, train then in Dassl's order."""
    train_rows = rows[splits[rows] == TRAIN]
    test_rows = rows[splits[rows] == TEST]
    train, val = split_trainval(labels[train_rows], seed, names, source)
    ordered = np.concatenate([train_rows[train], train_rows[val], test_rows])
    codes = np.repeat(np.asarray([TRAIN, VAL, TEST], dtype=np.int8), [len(train), len(val), len(test_rows)])
    return ordered, codes


def split_trainval(labels: np.ndarray, seed: int, names: list[str], source: Path) -> tuple[np.ndarray, np.ndarray]:
    """Dassl's `split_trainval(trainval, p_val=0.2)` on `random.Random(seed)`: (train rows, val rows) of `labels`.

    Per label in order of first appearance: n_val = round(n * 0.2) (Python's round, as Dassl), the label's
    rows shuffled, the first n_val to val, the rest to train; both lists grouped by label in that order.
    """
    rng = random.Random(seed)
    tracker: dict[int, list[int]] = {}
    for row, label in enumerate(labels.tolist()):
        tracker.setdefault(label, []).append(row)
    train, val = [], []
    for label, rows in tracker.items():
        n_val = round(len(rows) * P_VAL)
        if n_val == 0:
            raise DearError(f"{source}: class {names[label]!r} has {len(rows)} training image(s), too few to carve a "
                            f"validation image from (Dassl takes round({P_VAL:.0%}) of each class); give it at least "
                            "3, or add a val/ split")
        rng.shuffle(rows)
        val += rows[:n_val]
        train += rows[n_val:]
    return np.asarray(train, dtype=np.int64), np.asarray(val, dtype=np.int64)
