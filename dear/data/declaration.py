"""What a dataset is, as data: the one input of every reader and of the checks they share.

A built-in dataset (`dear.data.coop.SPECS`, resolved under `data.root`) and a
dataset of one's own (`data.custom.<name>`, `dear.data.custom`) both become a
`Declaration`; `dear.data.datasets.read` turns any declaration into the
`Listing` that `prepare` indexes, through the format's reader
(`dear.data.formats`) and the shared assembly (`dear.data.listing`). What
differs between the two kinds is here, as facts, never as a second code path:

- `order`: "canonical" (one's own: rows sorted, so no listing order decides
  the picks) or "listed" (CoOp's split files: their order is Dassl's, hence
  the parity of the picks);
- `spaced_names`: class names read with "_" as a space (one's own, every
  format alike) or as the file gives them (CoOp's);
- `carve_val`: a missing val split is carved from train (Dassl's
  `split_trainval`; one's own) or not (CoOp's ImageNet validates from train at
  sampling time: `val_from_train`);
- `check_content`: the same bytes in two splits refused and the end of each
  file read under `data.verify: exists` (one's own); CoOp's published splits
  are the reference every paper scores on, taken as they are.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal


@dataclass(frozen=True)
class Declaration:
    """One dataset: where its files are, which format reads them, and its per-dataset facts."""

    name: str                      # the --dataset name
    key: str                       # how messages name the declaration: data.custom.<name> or the dataset's name
    format: str                    # a key of dear.data.formats.FORMATS
    path: str                      # the file or folder that defines the dataset (split file, CSV, class folders)
    dataset_dir: Path              # the dataset's folder (recorded in provenance)
    howto: str                     # the way out that ends a message about its files
    images: str | None = None      # the folder listed image paths start from (coop-json, CoOp's layouts)
    splits: dict[str, str] | None = None  # per split, its folder (imagefolder) or its CSV file (csv)
    classnames: dict | str | None = None  # class key -> name, or a file of '<key> <name>' lines
    base_classes: list | str | None = None  # base classes of base-to-novel (keys or names), or a file of them
    split_seed: int = 1            # seed of the carved validation split
    test_only: bool = False        # domain-shift sets: every image is a test image
    val_from_train: bool = False   # no val split: validation shots are drawn from train (CoOp's ImageNet)
    coop_classes: int | None = None  # class count of CoOp's copy (a warning if it differs)
    order: Literal["canonical", "listed"] = "canonical"
    spaced_names: bool = True
    carve_val: bool = True
    check_content: bool = True
