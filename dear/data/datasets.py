"""Every dataset, built in or one's own, read through one path: declaration -> format reader -> shared assembly.

`read_dataset(name, root, custom)` finds `name` among the datasets of one's
own (`data.custom`, `dear.data.custom`) or the built-in ones (`dear.data.coop`,
under `data.root`), makes its `Declaration`, lets the format's reader
(`dear.data.formats.FORMATS`) list its files and `dear.data.listing` label,
name, order, split and check them. No image is opened here; `prepare` checks
the files (`dear.data.verify`, `dear.data.content`).
"""

from __future__ import annotations

from pathlib import Path

from dear.data import coop, custom
from dear.data.declaration import Declaration
from dear.data.formats import FORMATS
from dear.data.listing import Listing, assemble


def declare(name: str, root: str | Path, declared: dict | None = None) -> Declaration:
    """The declaration of `name`: `declared` (data.custom) first, else the built-in registry under `root`."""
    if declared and name in declared:
        return custom.declaration(name, declared[name])
    return coop.declaration(name, root)


def read(declaration: Declaration) -> Listing:
    """Every image of the declared dataset, labelled and split; every problem one line."""
    return assemble(declaration, FORMATS[declaration.format](declaration))


def read_dataset(name: str, root: str | Path, declared: dict | None = None) -> tuple[Declaration, Listing]:
    """(declaration, listing) of `name`; every problem is one line (`DearError`)."""
    declaration = declare(name, root, declared)
    return declaration, read(declaration)
