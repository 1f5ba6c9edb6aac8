"""`format: coop-json`: a CoOp-style split file at any path.

`{"train"|"val"|"test": [[impath, label, classname], ...]}` as CoOp's
`split_zhou_*.json` (`OxfordPets.read_split`): labels and names as the file
gives them, image paths relative to `images` (default: the JSON's folder).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from dear.data.formats import Found
from dear.errors import DearError

SPLITS = ("train", "val", "test")


def read(name: str, entry) -> Found:
    from dear.data.coop import _json_item, _same_name

    key = f"data.custom.{name}"
    path = Path(os.path.normpath(entry.path))
    if not path.is_file():
        raise DearError(f"{path}: {key}.path: split file not found; point it to the split JSON")
    images = os.path.normpath(entry.images) if entry.images is not None else str(path.parent)
    if not os.path.isdir(images):
        raise DearError(f"{images}: {key}.images: folder not found; set it to the folder the JSON's paths start from")
    try:
        split = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise DearError(f"{path}: not valid JSON ({err}); write {{\"train\": [[impath, label, classname], ...], "
                        "\"val\": [...], \"test\": [...]}") from None
    if not isinstance(split, dict) or not isinstance(split.get("train"), list) or \
            not isinstance(split.get("test"), list):
        raise DearError(f"{path}: expected an object with lists 'train', 'test' (and 'val'), as CoOp's split files")
    found = Found(paths=[], keys=[], splits=[], source=path, names={})
    labels: dict[int, str] = {}
    for split_name in SPLITS:
        for position, item in enumerate(split.get(split_name) or []):
            impath, label, classname = _json_item(item, path, split_name, position)
            _same_name(labels, label, classname, path)
            found.paths.append(os.path.normpath(os.path.join(images, impath)))
            found.keys.append(str(label))
            found.splits.append(split_name)
    found.order = [str(label) for label in range(max(labels) + 1)] if labels else []
    found.names = {str(label): classname for label, classname in labels.items()}
    return found
