"""`format: coop-json`: a CoOp split file, `split_zhou_<Name>.json` or one of one's own at any path.

`{"train"|"val"|"test": [[impath, label, classname], ...]}` as CoOp's
`OxfordPets.read_split` reads it: labels and names as the file gives them,
image paths relative to `images` (one's own: default the JSON's folder; the
built-in datasets: their image folder under `data.root`). `val` may be
absent (one's own: carved from train). Ten built-in datasets and the
embedded world are declarations of this format (`dear.data.coop`).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from dear.data.found import Found
from dear.errors import DearError

SPLITS = ("train", "val", "test")
SHAPE = '{"train": [[impath, label, classname], ...], "val": [...], "test": [...]}'


def read(declaration) -> Found:
    key = declaration.key
    path = Path(os.path.normpath(declaration.path))
    if not path.is_file():
        raise DearError(f"{path}: {key}.path: split file not found; point it to the split JSON")
    images = os.path.normpath(declaration.images) if declaration.images is not None else str(path.parent)
    if not os.path.isdir(images):
        raise DearError(f"{images}: {key}.images: folder not found; set it to the folder the JSON's paths start from")
    try:
        split = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise DearError(f"{path}: not valid JSON ({err}); a split file is {SHAPE}; {declaration.howto}") from None
    if not isinstance(split, dict) or not isinstance(split.get("train"), list) or \
            not isinstance(split.get("test"), list) or not isinstance(split.get("val", []), list):
        raise DearError(f"{path}: expected an object with lists 'train', 'test' (and 'val'), as CoOp's split files; "
                        f"{declaration.howto}")
    found = Found(paths=[], keys=[], splits=[], source=path, names={}, rows=[], listed=True)
    names: dict[int, str] = {}
    for split_name in SPLITS:
        for position, item in enumerate(split.get(split_name) or []):
            impath, label, classname = json_item(item, path, split_name, position, declaration.howto)
            same_name(names, label, classname, path)
            found.paths.append(os.path.normpath(os.path.join(images, impath)))
            found.keys.append(str(label))
            found.splits.append(split_name)
            found.rows.append(f"{path}: '{split_name}' entry {position}")
    found.order = [str(label) for label in range(max(names) + 1)] if names else []
    found.names = {str(label): classname for label, classname in names.items()}
    return found


def json_item(item: object, split_file: Path, split_name: str, position: int, howto: str) -> tuple[str, int, str]:
    """(impath, label, classname) of one entry; anything else is one line naming the entry."""
    ok = (isinstance(item, list) and len(item) == 3 and isinstance(item[0], str)
          and isinstance(item[1], int) and not isinstance(item[1], bool) and item[1] >= 0
          and isinstance(item[2], str))
    if not ok:
        raise DearError(f"{split_file}: entry {position} of '{split_name}' is {str(item)[:80]}, "
                        f"expected [impath, integer label >= 0, classname]; {howto}")
    return item[0], item[1], item[2]


def same_name(names: dict[int, str], label: int, classname: str, source: Path) -> None:
    """Each label has one class name throughout the file."""
    known = names.setdefault(label, classname)
    if known != classname:
        raise DearError(f"{source}: label {label} is named both {known!r} and {classname!r}; "
                        "each label needs one class name")
