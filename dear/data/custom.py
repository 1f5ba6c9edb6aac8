"""Datasets of one's own (`data.custom`): a format's rows made into the `Listing` that `prepare` indexes.

What every format shares is done here, once:
- labels: the format's numbering (coop-json, CSV labels) or the class keys
  sorted (ImageFolder's `find_classes`);
- names shown to the text tower: `classnames` (a mapping or a file of
  "<key> <name>" lines), else the format's, else the key with "_" read as a
  space;
- a validation split, where there is none, carved from train as Dassl's
  `split_trainval` does (CoOp's datasets/oxford_pets.py): per label in order
  of first appearance, shuffle its rows and take round(20%) as validation, on
  `random.Random(split_seed)`;
- base classes: `base_classes` (keys or names), else CoOp's first half;
- the same image listed twice (in two splits or in one) is an error.
Few-shot picks and seeds are then exactly those of the built-in datasets
(`dear.data.fewshot`).
"""

from __future__ import annotations

import random
import re
from pathlib import Path

import numpy as np

from dear.data import coop
from dear.data.formats import READERS, Found
from dear.data.manifest import SPLITS
from dear.errors import DearError

P_VAL = 0.2  # Dassl's split_trainval default
DOCS = "docs/your-data.md"
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]*")
TRAIN, VAL, TEST = (SPLITS.index(split) for split in ("train", "val", "test"))


def name_problem(name: str) -> str | None:
    """Why `name` cannot name a dataset of one's own (None: it can).

    A built-in dataset's name would give it that dataset's recipe layers (EuroSAT's prompt and MMRL values),
    silently: such names are refused, as are names the engines cannot put in a path or a stage name.
    """
    if not NAME.fullmatch(name):
        return (f"{name!r} cannot name a dataset (it goes into paths and stage names); use letters, "
                "digits, '_' and '-'")
    if name in coop.SPECS or name in recipe_datasets():
        return (f"{name!r} is a built-in dataset's name, whose recipe values (prompt, per-dataset "
                f"settings) it would silently get; give your dataset another name, e.g. my_{name}")
    return None


def recipe_datasets() -> set[str]:
    """Every dataset name some recipe file has a layer for."""
    from dear.methods import REGISTRY
    from dear.methods.recipe import load

    return {dataset for entry in REGISTRY.values() for dataset in load(entry.recipe).datasets}


def problems(name: str, entry) -> list[str]:
    """What `dear check` can tell without listing images: the declared path and files exist (one line each)."""
    key = f"data.custom.{name}"
    found = []
    if entry.format == "imagefolder":
        folders = {"train": "train", "test": "test", **(entry.splits or {})}
        needed = [entry.path] + [str(Path(entry.path) / folders[split]) for split in ("train", "test")]
        missing = next((path for path in needed if not Path(path).is_dir()), None)
        if missing is not None:
            found.append(f"{key}: {missing}: folder not found; lay the images out as {entry.path}/train/<class>/ and "
                         f"{entry.path}/test/<class>/ ({DOCS}), or fix {key}.path")
    elif entry.format == "csv" and entry.splits:
        missing = next((str(Path(entry.path) / file) for file in entry.splits.values()
                        if not (Path(entry.path) / file).is_file()), None)
        if missing is not None:
            found.append(f"{key}.splits: {missing}: file not found; fix {key}.path or {key}.splits")
    elif not Path(entry.path).is_file():
        found.append(f"{key}.path: {entry.path}: file not found; point it to the dataset's "
                     f"{'CSV' if entry.format == 'csv' else 'split JSON'} file")
    for field in ("classnames", "base_classes"):
        value = getattr(entry, field)
        if isinstance(value, str) and not Path(value).is_file():
            found.append(f"{key}.{field}: {value}: file not found; fix the path, or give a "
                         f"{'mapping' if field == 'classnames' else 'list'} in place")
    return found


def spec(name: str, entry) -> coop.DatasetSpec:
    """A `DatasetSpec` for `prepare`: the declared path itself (not under data.root); never test-only."""
    return coop.DatasetSpec(entry.path, "", "", lambda _spec, _root: read(name, entry),
                            f"declare it under data.custom.{name} as {DOCS} shows", own=True)


def read(name: str, entry) -> coop.Listing:
    """Every image of the dataset `name` declares, labelled and split; every problem one line."""
    found = READERS[entry.format](name, entry)
    key = f"data.custom.{name}"
    if not found.paths:
        raise DearError(f"{found.source}: {key} lists no images; see {DOCS}")
    order = found.order if found.order is not None else sorted(set(found.keys))
    label_of = {class_key: label for label, class_key in enumerate(order)}
    labels = np.asarray([label_of[k] for k in found.keys], dtype=np.int64)       # [N]
    splits = np.asarray([SPLITS.index(s) for s in found.splits], dtype=np.int8)  # [N]
    if not (splits == TEST).any():
        raise DearError(f"{found.source}: {key} has no test images; give each class test images in a test split "
                        f"({DOCS}): a study never scores its training images")
    names = class_names(found, order, entry, key)
    _once_each(found)
    rows, splits = _ordered(labels, splits, entry.split_seed, names, found.source)
    listing = coop.Listing(paths=[found.paths[i] for i in rows], labels=labels[rows], splits=splits,
                           classnames=names, imagenet_labels=None, source=found.source)
    coop._check_labels(listing, found.source)
    listing.base = base_mask(entry.base_classes, order, names, key)
    return listing


# --- class names and base classes -----------------------------------------------------

def class_names(found: Found, order: list[str], entry, key: str) -> list[str]:
    """The name of each label: `classnames`, else the format's, else the key with '_' as a space."""
    given = read_classnames(entry.classnames, key)
    unknown = sorted(set(given) - set(order))
    if unknown:
        raise DearError(f"{key}.classnames: {unknown[0]!r} is not a class of {found.source} ({len(order)} classes, "
                        f"e.g. {order[0]!r}); fix the key or remove it")
    names = []
    for class_key in order:
        name = given.get(class_key, (found.names or {}).get(class_key))
        if name is None and found.names is not None:  # numbered classes: a label is no name
            where = found.rows[found.keys.index(class_key)] if found.rows and class_key in found.keys else found.source
            raise DearError(f"{where}: label {class_key} has no class name; add {class_key} to {key}.classnames")
        names.append(name if name is not None else class_key.replace("_", " "))
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


def _ordered(labels: np.ndarray, splits: np.ndarray, seed: int, names: list[str],
             source: Path) -> tuple[np.ndarray, np.ndarray]:
    """(rows of the listing in order: train, val, test, file order within; their split codes).

    With no val rows, validation is carved from train (`split_trainval`), train then in Dassl's order.
    """
    by_split = [np.flatnonzero(splits == code) for code in range(len(SPLITS))]
    if by_split[VAL].size:
        rows = np.concatenate(by_split)
        return rows, splits[rows]
    train, val = split_trainval(labels[by_split[TRAIN]], seed, names, source)
    rows = np.concatenate([by_split[TRAIN][train], by_split[TRAIN][val], by_split[TEST]])
    codes = np.repeat(np.asarray([TRAIN, VAL, TEST], dtype=np.int8), [len(train), len(val), len(by_split[TEST])])
    return rows, codes


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
