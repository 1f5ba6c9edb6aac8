"""The tables `prepare` writes, and small helpers the later stages read them with.

One folder per dataset holds:
- `manifest.parquet`: every image of the dataset, one row each (MANIFEST_SCHEMA);
- `fewshot-seed<S>.parquet`: the rows picked as training and validation shots
  for seed S (FEWSHOT_SCHEMA = the manifest's columns + where the pick came from);
- `excluded.parquet`: images dropped by `data.skip_bad` with the reason (empty
  when nothing was dropped, so the stage's outputs are always the same files).

Labels: `label` is the dataset's own 0..n-1 label (CoOp's); `subset` splits the
sorted labels into base (first ceil(n/2)) and novel, and `subset_label`
relabels each half from 0. `imagenet_label` is set for the ImageNet family
only: the class's index among ImageNet's 1000, so that a model trained on
ImageNet can be scored on ImageNet-A/-R's 200-class subsets.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

from dear.errors import DearError
from dear.runtime.io import read_parquet

SPLITS = ("train", "val", "test")
SUBSETS = ("base", "novel")
FEWSHOT_SPLITS = ("train", "val")

MANIFEST_SCHEMA = pa.schema([
    pa.field("path", pa.string(), nullable=False),
    pa.field("label", pa.int32(), nullable=False),
    pa.field("classname", pa.string(), nullable=False),
    pa.field("split", pa.string(), nullable=False),
    pa.field("subset", pa.string(), nullable=False),
    pa.field("subset_label", pa.int32(), nullable=False),
    pa.field("imagenet_label", pa.int32(), nullable=True),
    pa.field("width", pa.int32(), nullable=True),
    pa.field("height", pa.int32(), nullable=True),
    pa.field("sha256", pa.string(), nullable=True),
])

FEWSHOT_SCHEMA = pa.schema(list(MANIFEST_SCHEMA) + [
    pa.field("fewshot_split", pa.string(), nullable=False),   # train | val: what the shot is used for
    pa.field("manifest_row", pa.int64(), nullable=False),     # row of the same image in manifest.parquet
])

EXCLUDED_SCHEMA = pa.schema([
    pa.field("path", pa.string(), nullable=False),
    pa.field("label", pa.int32(), nullable=False),
    pa.field("split", pa.string(), nullable=False),
    pa.field("reason", pa.string(), nullable=False),
])


def manifest_path(folder: str | Path) -> Path:
    return Path(folder) / "manifest.parquet"


def fewshot_path(folder: str | Path, seed: int, shots: int | None = None) -> Path:
    """data.shots' table (fewshot-seed<S>), or with `shots` K a few-shot run's (fewshot-shots<K>-seed<S>)."""
    if shots is None:
        return Path(folder) / f"fewshot-seed{seed}.parquet"
    return Path(folder) / f"fewshot-shots{shots}-seed{seed}.parquet"


def excluded_path(folder: str | Path) -> Path:
    return Path(folder) / "excluded.parquet"


def read_manifest(path: str | Path) -> pa.Table:
    """A dataset's manifest (pass the file or its folder)."""
    path = Path(path)
    return read_parquet(manifest_path(path) if path.is_dir() else path, MANIFEST_SCHEMA)


def read_fewshot(path: str | Path) -> pa.Table:
    """One seed's few-shot table, rows in Dassl's pick order (train shots, then val shots)."""
    return read_parquet(path, FEWSHOT_SCHEMA)


def select(table: pa.Table, split: str | None = None, subset: str | None = None,
           fewshot_split: str | None = None) -> pa.Table:
    """Rows of one split / subset / few-shot use; None keeps all. Row order is kept."""
    mask = None
    for column, value, allowed in (("split", split, SPLITS), ("subset", subset, SUBSETS + ("all",)),
                                   ("fewshot_split", fewshot_split, FEWSHOT_SPLITS)):
        if value is None or (column == "subset" and value == "all"):
            continue
        if value not in allowed:
            raise ValueError(f"{column} must be one of {allowed}, got {value!r}")
        keep = pc.equal(table[column], value)
        mask = keep if mask is None else pc.and_(mask, keep)
    return table if mask is None else table.filter(mask)


def classnames(table: pa.Table, subset: str | None = None) -> list[str]:
    """Class names indexed by label (`subset` None or "all") or by `subset_label` within a subset.

    Use the full manifest, not a few-shot table (which may lack classes);
    `prepare` guarantees every class keeps at least one row.
    """
    label_column = "label" if subset in (None, "all") else "subset_label"
    rows = select(table, subset=subset)
    pairs = sorted(set(zip(rows[label_column].to_pylist(), rows["classname"].to_pylist())))
    names = [name for _, name in pairs]
    labels = [label for label, _ in pairs]
    if labels != list(range(len(labels))):
        raise DearError(f"manifest: labels of subset {subset or 'all'} are not 0..n-1 with one name each; "
                        "rerun `dear prepare`")
    return names


# --- the images a table lists ---------------------------------------------------------

def check_images_exist(paths: list[str], source: str | Path, what: str = "image", max_listed: int = 3) -> None:
    """Every listed image is a file, checked before any work: one line naming the first missing ones."""
    missing = [str(path) for path in paths if not Path(path).is_file()]
    if missing:
        raise DearError(f"{source}: {len(missing)} {what}(s) not found, e.g. {missing[:max_listed]}; "
                        "run from the folder the paths are relative to, or restore them and rerun `dear prepare`")


# What to do about an image that fails to decode after `dear prepare` passed it (data.verify: exists reads a built-in
# dataset's headers only, and a file of one's own that ends whole may still be damaged inside): skip_bad drops only
# what the check finds, so the check must decode.
UNREADABLE_HINT = ("restore it, or set data.verify: decode and data.skip_bad: true and rerun `dear prepare`, "
                   "which then drops every unreadable image")


def read_rgb(path: str | Path):
    """The image at `path` as an RGB PIL image; a missing or undecodable file is one line naming it."""
    from PIL import Image

    try:
        with Image.open(path) as image:
            return image.convert("RGB")
    except OSError as err:  # missing, truncated, not an image (PIL's UnidentifiedImageError is an OSError)
        raise DearError(f"{path}: not a readable image ({' '.join(str(err).split()) or type(err).__name__}); "
                        f"{UNREADABLE_HINT}") from None
