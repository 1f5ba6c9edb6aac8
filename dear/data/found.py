"""What a format's reader returns: the images it found, as parallel columns (`dear.data.formats`)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass
class Found:
    """What a reader found, as parallel columns (no image is opened)."""

    paths: list[str]            # [N] image paths
    keys: list[str]             # [N] class key of each image: folder name, CSV class name, label as text, wnid
    splits: list[str]           # [N] train | val | test
    source: Path                # the folder or file that defines the dataset (recorded in provenance)
    order: list[str] | None = None  # class keys in label order where the format numbers classes; None: sorted keys
    names: dict[str, str] | None = None  # numbered classes: key -> the format's name (may be empty);
    #                                      None: the keys are the names
    rows: list[str] | None = None  # [N] where each image is declared ("file:line"); None: its path says it
    listed: bool = False        # paths come from a file (so one may be listed twice); folders cannot repeat one
    split_dirs: dict[str, str] | None = None  # folder formats: split -> the folder holding its class folders
    imagenet: dict[str, int] | None = None  # ImageNet family: class key -> its label among ImageNet's classes

    def where(self, row: int) -> str:
        """Where image `row` is declared, for a message: its row of the file, else its path."""
        return self.rows[row] if self.rows is not None else self.paths[row]
