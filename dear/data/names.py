"""The class names of a dataset before it is prepared, where that is cheap: for `dear recipe`'s example prompts.

Read from what defines the classes, never by listing images: the world's
params, a CoOp split JSON, `classnames.txt`, `variants.txt`, or a dataset of
one's own (its reader: folder names, the CSV or JSON). None when the files are
not on this machine or cannot be read (`dear check` and `prepare` say why).
"""

from __future__ import annotations

import json
from pathlib import Path

from dear.data import coop
from dear.errors import DearError


def base_names(params, dataset: str) -> list[str] | None:
    """The names of `dataset`'s base classes in label order (None: not known without preparing it)."""
    found = _names(params, dataset)
    if found is None:
        return None
    names, base = found
    base = base if base is not None else _first_half(len(names))
    return [name for name, is_base in zip(names, base) if is_base]


def all_names(params, dataset: str) -> list[str] | None:
    """The names of every class of `dataset` in label order (None: not known without preparing it)."""
    found = _names(params, dataset)
    return found[0] if found is not None else None


def _names(params, dataset: str):
    """(class names in label order, base mask or None) of `dataset`, or None."""
    try:
        if dataset in params.data.custom:
            from dear.data import custom, datasets

            listing = datasets.read(custom.declaration(dataset, params.data.custom[dataset]))
            return listing.classnames, listing.base
        names = _world(params, dataset) if params.data.source == "embedded" else _coop(params, dataset)
    except (DearError, OSError, ValueError, KeyError, TypeError, IndexError):
        return None
    return (names, None) if names else None


def _first_half(n: int) -> list[bool]:
    return [label < (n + 1) // 2 for label in range(n)]


def _world(params, dataset: str) -> list[str] | None:
    from dear.data import world

    spec = next((spec for spec in world.dataset_specs(params.world) if spec.name == dataset), None)
    return list(spec.classnames) if spec is not None else None


def _coop(params, dataset: str) -> list[str] | None:
    spec = coop.SPECS.get(dataset)
    if spec is None:
        return None
    path = spec.dataset_dir(Path(params.data.root)) / spec.split_file
    if not path.is_file():
        return None
    if spec.format == "coop-json":
        split = json.loads(path.read_text())
        names = {item[1]: item[2] for key in ("train", "val", "test") for item in split.get(key, [])}
        return [names[label] for label in sorted(names)]
    if spec.split_file == "classnames.txt":
        from dear.data.formats.coop_layouts import read_classnames

        return list(read_classnames(path, spec.howto).values())
    return [line.strip() for line in path.read_text().splitlines() if line.strip()]  # variants.txt
