"""Which params file the running stage read: what its messages ask to edit.

Apart from `dear.config.params` so that the data layer (`dear.data`), which names
the file in its messages, never imports the params schema (and through it
the methods' registry): the schema validates with the data layer's checks,
never the reverse.
"""

from __future__ import annotations

from pathlib import Path

DEFAULT_PATH = "params.yaml"
_in_use = [DEFAULT_PATH]  # the params file of this process's stage


def in_use() -> str:
    """The params file the running stage read (`dear.cli` sets it: --params); params.yaml elsewhere."""
    return _in_use[0]


def use(path: str | Path) -> None:
    _in_use[0] = str(path)
