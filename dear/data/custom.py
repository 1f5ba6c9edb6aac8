"""Datasets of one's own (`data.custom`): a declaration of one of the formats, read as the built-in ones are.

`declaration(name, entry)` turns the `data.custom.<name>` entry (any object
with its keys as attributes: `dear.config.params.CustomDataset`) into the
`Declaration` every dataset becomes; `dear.data.datasets.read` lists it with
the readers and checks the built-in datasets use (`dear.data.listing`). What
is particular to one's own is a fact of the declaration: its rows are sorted
(the canonical order, so no listing order decides the picks), its class names
read "_" as a space in every format, a missing val split is carved from
train, and its content is checked (the same bytes in two splits, a
truncated file under `data.verify: exists`).

Also here, for `dear.config.params` and `dear check` (which call them; this module
never imports either): which names a dataset may take, and what can be told
without listing images.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Iterable

from dear.data import coop
from dear.data.declaration import Declaration

DOCS = "docs/your-data.md"
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]*")


def name_problem(name: str, reserved: Iterable[str] = ()) -> str | None:
    """Why `name` cannot name a dataset of one's own (None: it can).

    A built-in dataset's name would give it that dataset's recipe layers (EuroSAT's prompt and MMRL values),
    silently: such names are refused (the built-in datasets, and `reserved`: the datasets some recipe has a layer
    for, which `dear.config.params` passes), as are names the engines cannot put in a path or a stage name.
    """
    if not NAME.fullmatch(name):
        return (f"{name!r} cannot name a dataset (it goes into paths and stage names); use letters, "
                "digits, '_' and '-'")
    if name in coop.SPECS or name in set(reserved):
        return (f"{name!r} is a built-in dataset's name, whose recipe values (prompt, per-dataset "
                f"settings) it would silently get; give your dataset another name, e.g. my_{name}")
    return None


def declaration(name: str, entry) -> Declaration:
    """The `Declaration` of `data.custom.<name>`: its declared path itself (not under data.root)."""
    return Declaration(name=name, key=f"data.custom.{name}", format=entry.format, path=entry.path,
                       dataset_dir=Path(entry.path), howto=f"see {DOCS}", images=entry.images, splits=entry.splits, classnames=entry.classnames,
                       base_classes=entry.base_classes, split_seed=entry.split_seed)


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
