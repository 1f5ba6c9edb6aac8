"""`format: csv`: a table of images, one row each, paths relative to the CSV file.

Columns (a header row names them; others are ignored): `path`, and `label`
(an integer 0..n-1, named by `classnames`) or `classname` (the class key:
classes then sorted by it, as ImageFolder sorts folders), and `split` (train,
val or test) unless `splits` names one file per split (relative to `path`).
The rows' order does not matter: `dear.data.listing` sorts them (the
canonical order). A row whose image is missing, whose split or label is not
one of the above, whose label has no class name, or whose class has no
training or no test image (a typo of a class name) is one error naming
`file:line`.
"""

from __future__ import annotations

import csv
import os
from pathlib import Path

from dear.data.found import Found
from dear.errors import DearError

SPLITS = ("train", "val", "test")


def read(declaration) -> Found:
    key = declaration.key
    path = os.path.normpath(declaration.path)
    if declaration.splits:
        if not os.path.isdir(path):
            raise DearError(f"{path}: {key}.path: folder not found; with {key}.splits it is the folder the split "
                            "files are in")
        files = [(os.path.join(path, file), split) for split, file in sorted(declaration.splits.items(),
                                                                             key=lambda item: SPLITS.index(item[0]))]
        source = Path(path)
    else:
        files, source = [(path, None)], Path(path)
    found = Found(paths=[], keys=[], splits=[], source=source, rows=[], listed=True)
    labelled = set()
    for file, split in files:
        labelled.add(_read_file(file, split, found, key))
    if len(labelled) > 1:
        raise DearError(f"{files[0][0]}: some files name classes by `label` and others by `classname`; use one")
    if labelled == {"label"}:
        _numbered(found)
    return found


def _read_file(file: str, split: str | None, found: Found, key: str) -> str:
    """Append the rows of one CSV file to `found`; returns the class column it uses (label | classname)."""
    if not os.path.isfile(file):
        raise DearError(f"{file}: {key}: CSV file not found; fix {key}.path (or {key}.splits)")
    folder = os.path.dirname(file)
    with open(file, newline="", encoding="utf-8-sig") as handle:
        reader = csv.DictReader(handle)
        columns = reader.fieldnames or []
        class_column = next((c for c in ("classname", "label") if c in columns), None)
        wanted = ["path", class_column or "label or classname"] + ([] if split else ["split"])
        absent = [column for column in wanted if column not in columns]
        if absent:
            header = "path, label or classname" + ("" if split else ", split")
            raise DearError(f"{file}: no column {absent[0]!r} in the header ({', '.join(columns) or 'empty'}); "
                            f"the first row names the columns: {header}")
        for line, row in enumerate(reader, start=2):
            where = f"{file}:{line}"
            image, value = (row.get("path") or "").strip(), (row.get(class_column) or "").strip()
            if not image or not value:
                raise DearError(f"{where}: empty {'path' if not image else class_column}; fill it in or remove the row")
            row_split = split or (row.get("split") or "").strip()
            if row_split not in SPLITS:
                raise DearError(f"{where}: split {row_split!r} is not one of train, val, test; fix the row")
            if class_column == "label" and not value.isdigit():
                raise DearError(f"{where}: label {value!r} is not a whole number >= 0; use 0..n-1, or a "
                                "classname column")
            image_path = os.path.normpath(os.path.join(folder, image))
            if not os.path.isfile(image_path):
                raise DearError(f"{where}: image {image_path} not found (paths are relative to the CSV file's "
                                "folder); fix the path or remove the row")
            found.paths.append(image_path)
            found.keys.append(str(int(value)) if class_column == "label" else value)
            found.splits.append(row_split)
            found.rows.append(where)
    return class_column


def _numbered(found: Found) -> None:
    """Integer labels are the class order 0..n-1; `dear.data.custom` checks each has a name in `classnames`."""
    labels = sorted({int(k) for k in found.keys})
    found.order = [str(label) for label in range(labels[-1] + 1)] if labels else []
    found.names = {}
