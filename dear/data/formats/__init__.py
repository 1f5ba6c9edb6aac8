"""Readers of datasets of one's own (`data.custom`): one module per format, behind one registry.

A reader turns a declaration (`dear.params.CustomDataset`) into `Found`: one
path, class key and split per image, in a fixed order, without opening an
image. Everything the formats share (class names, label order, the validation
split carved from train, base classes, a file listed twice) is done once, by
`dear.data.custom`, so a reader only walks its layout and names what is wrong
with it. The next format is one module with a `read(name, entry) -> Found`,
listed in `READERS`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable


@dataclass
class Found:
    """What a reader found, as parallel columns (no image is opened)."""

    paths: list[str]            # [N] image paths, normalized (os.path.normpath)
    keys: list[str]             # [N] class key of each image: folder name, CSV class name or label as text
    splits: list[str]           # [N] train | val | test
    source: Path                # the folder or file that defines the dataset (recorded in provenance)
    order: list[str] | None = None  # class keys in label order where the format numbers classes; None: sorted keys
    names: dict[str, str] | None = None  # numbered classes: label -> the format's name (may be empty);
    #                                      None: the keys are the names
    rows: list[str] | None = None  # [N] where each image is declared ("file:line"); None: its path says it


def _readers() -> dict[str, Callable]:
    from dear.data.formats import coop_json, csvfile, imagefolder

    return {"imagefolder": imagefolder.read, "csv": csvfile.read, "coop-json": coop_json.read}


READERS: dict[str, Callable] = _readers()
