"""The evaluation table contract: what `evaluate` writes and `report` reads.

One row per (method, source, seed, protocol, target, split, stream, class)
holding counts, never percentages: `correct` and `total` test images of that
class, and `hits`, whether each of those images (in the order of the
prepared image list, the same for every method and seed) was predicted
right: the report pairs two methods image by image with it (paired
bootstrap, dear.report.stats). Stream `output` is what the method reports
(the fused logits on seen classes, the CLS stream on unseen ones with
`fusion.novel: cls`); `fused` is the fused logits everywhere, so the report
can show unseen classes under both inferences from one evaluation; the
other streams (`cls`, each attribute concept, MMRL's `rep`) are each
stream's own predictions, for the report's per-stream table. Tables of
accuracies read the `output` rows (`read_evals`).
Every accuracy in the project is computed here, from summed counts
(100 * sum(correct) / sum(total)), so a rounded percentage never feeds
another number (an HM from two rounded accuracies can differ from the HM of
the exact ones in the second decimal).

Conventions the table must keep (checked by `check_eval`):
- protocol `base_to_novel`: splits `base` and `novel`, and `target == source`
  (the model trained on the base classes of a dataset, tested on that dataset);
  `label` indexes the dataset's full class list.
- protocols `cross_dataset` and `domain_generalization`: split `all`; a row
  with `target == source` is the source dataset itself, averages leave it out.
- protocol `few_shot_<K>` (`few_shot_protocol(K)`, K >= 1): a model trained on K
  shots of every class of a dataset, tested on all its classes: split `all`,
  `target == source`; one protocol per K, so the runs of every K stay apart.
- `0 <= correct <= total`, `total >= 1`, no class counted twice;
  `hits` holds `total` entries of which `correct` are true.
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Iterable, Mapping

import numpy as np
import pandas as pd
import pyarrow as pa

from dear.errors import DearError
from dear.runtime.io import read_parquet, write_parquet

EVAL_SCHEMA = pa.schema([
    pa.field("method", pa.string()),      # one of dear.model.methods.METHODS
    pa.field("source", pa.string()),      # dataset the model was trained on
    pa.field("seed", pa.int64()),         # few-shot seed of the run
    pa.field("protocol", pa.string()),    # one of PROTOCOLS, or few_shot_<K> (few_shot_protocol)
    pa.field("target", pa.string()),      # dataset evaluated
    pa.field("split", pa.string()),       # base | novel | all
    pa.field("stream", pa.string()),      # output | cls | <concept> | rep
    pa.field("label", pa.int32()),        # class index within the evaluated class list
    pa.field("classname", pa.string()),
    pa.field("correct", pa.int64()),      # test images of this class predicted right
    pa.field("total", pa.int64()),        # test images of this class
    pa.field("hits", pa.list_(pa.bool_())),  # [total]: each test image of this class predicted right, in list order
])

PROTOCOLS = ("base_to_novel", "cross_dataset", "domain_generalization")
FEW_SHOT = "few_shot"  # a few-shot run's rows: protocol few_shot_<K> (K training shots per class), split all
OUTPUT = "output"  # the stream a method reports
FUSED = "fused"    # the fused logits on every class, seen or not (the other inference on unseen classes)
SPLITS_OF = {"base_to_novel": ("base", "novel"), "cross_dataset": ("all",), "domain_generalization": ("all",)}
RUN_KEY = ["method", "source", "seed"]
CELL_KEY = RUN_KEY + ["protocol", "target"]           # one model on one evaluated dataset
SPLIT_KEY = CELL_KEY + ["split"]


# --- checking ------------------------------------------------------------------

def check_eval(frame: pd.DataFrame, where: str | os.PathLike) -> None:
    """Raise a one-line `DearError` naming `where` if `frame` breaks the contract above."""
    nulls = [name for name in EVAL_SCHEMA.names if frame[name].isna().any()]
    if nulls:
        _fail(where, f"empty values in columns {nulls}")
    if frame.empty:
        _fail(where, "no rows")
    bad_protocol = sorted(p for p in set(frame["protocol"]) if p not in PROTOCOLS and shots_of(p) is None)
    if bad_protocol:
        _fail(where, f"unknown protocol {bad_protocol[0]!r} (expected one of {', '.join(PROTOCOLS)} or "
                     f"{FEW_SHOT}_<K>)")
    for protocol, rows in frame.groupby("protocol", sort=True):
        splits = SPLITS_OF.get(protocol, ("all",))
        bad_split = sorted(set(rows["split"]) - set(splits))
        if bad_split:
            _fail(where, f"split {bad_split[0]!r} in protocol {protocol} (expected {' | '.join(splits)})")
    own = frame[(frame["protocol"] == "base_to_novel") | frame["protocol"].map(lambda p: shots_of(p) is not None)]
    if (own["source"] != own["target"]).any():
        row = own[own["source"] != own["target"]].iloc[0]
        _fail(where, f"{row['protocol']} row with source {row['source']!r} != target {row['target']!r}")
    if (frame["total"] < 1).any() or (frame["correct"] < 0).any() or (frame["correct"] > frame["total"]).any():
        _fail(where, "counts out of range (need 0 <= correct <= total and total >= 1)")
    lengths = frame["hits"].map(len)
    if (lengths != frame["total"]).any() or (frame["hits"].map(np.sum) != frame["correct"]).any():
        _fail(where, "per-image hits disagree with the counts (need len(hits) == total and sum(hits) == correct)")
    if not (frame["stream"] == OUTPUT).any():
        _fail(where, f"no rows of stream {OUTPUT!r}")
    duplicated = frame.duplicated(SPLIT_KEY + ["stream", "label"])
    if duplicated.any():
        row = frame[duplicated].iloc[0]
        _fail(where, f"class {row['label']} counted twice in {row['method']}/{row['source']}/seed{row['seed']} "
                     f"{row['protocol']} {row['target']} {row['split']}")


def _fail(where: str | os.PathLike, problem: str) -> None:
    raise DearError(f"{where}: {problem}; rerun `dear evaluate` for this run")


def few_shot_protocol(shots: int) -> str:
    """The protocol of a few-shot run's rows: few_shot_<K>, so runs of different K stay apart (CELL_KEY)."""
    return f"{FEW_SHOT}_{shots}"


def shots_of(protocol: str) -> int | None:
    """K of a few_shot_<K> protocol, else None."""
    head, _, count = str(protocol).rpartition("_")
    ok = head == FEW_SHOT and count.isdigit() and count == str(int(count)) and int(count) >= 1
    return int(count) if ok else None


# --- writing (evaluate) and reading (report) -----------------------------------

def eval_frame(rows: pa.Table | pd.DataFrame | Iterable[Mapping]) -> pd.DataFrame:
    """Rows (a table, a frame or dicts) as a frame with exactly EVAL_SCHEMA's columns and types."""
    if isinstance(rows, pa.Table):
        table = rows
    elif isinstance(rows, pd.DataFrame):
        table = pa.Table.from_pandas(rows, preserve_index=False)
    else:
        table = pa.Table.from_pylist(list(rows), schema=EVAL_SCHEMA)
    missing = [name for name in EVAL_SCHEMA.names if name not in table.schema.names]
    if missing:
        raise ValueError(f"eval rows miss columns {missing}")
    return table.select(EVAL_SCHEMA.names).cast(EVAL_SCHEMA).to_pandas()


def write_eval(path: str | os.PathLike, rows: pa.Table | pd.DataFrame | Iterable[Mapping],
               provenance: dict | None) -> None:
    """Check `rows` against the contract and write them atomically as `eval.parquet`."""
    frame = _sorted(eval_frame(rows))
    check_eval(frame, path)
    table = pa.Table.from_pandas(frame, schema=EVAL_SCHEMA, preserve_index=False)
    write_parquet(path, table, EVAL_SCHEMA, provenance)


def read_eval(path: str | os.PathLike) -> pd.DataFrame:
    """One eval.parquet, checked; a bad file is a one-line `DearError` naming it."""
    frame = read_parquet(path, EVAL_SCHEMA).to_pandas()
    check_eval(frame, path)
    return frame


def read_evals(paths: Iterable[str | os.PathLike], streams: bool = False) -> pd.DataFrame:
    """Several eval.parquet files as one frame, in a canonical row order: the `output` rows, or every stream's.

    Each (method, source, seed, protocol, target) must come from exactly one
    file: two files claiming the same run would otherwise be averaged as if
    they were two seeds.
    """
    frames, owner = [], {}
    for path in sorted({str(Path(p)) for p in paths}):
        frame = read_eval(path)
        if not streams:
            frame = frame[frame["stream"] == OUTPUT]
        for key in frame[CELL_KEY].drop_duplicates().itertuples(index=False, name=None):
            if key in owner:
                method, source, seed, protocol, target = key
                raise DearError(f"{path}: {method}/{source}/seed{seed} {protocol} {target} is also in {owner[key]}; "
                                "pass each run's eval.parquet once")
            owner[key] = path
        frames.append(frame)
    if not frames:
        raise DearError("--evals: no eval.parquet given; pass the files written by `dear evaluate`")
    return _sorted(pd.concat(frames, ignore_index=True))


def _sorted(frame: pd.DataFrame) -> pd.DataFrame:
    """Canonical row order, so sums (and every output) do not depend on file order."""
    return frame.sort_values(SPLIT_KEY + ["stream", "label"], kind="stable").reset_index(drop=True)


# --- accuracy from counts ----------------------------------------------------------

def split_accuracy(table: pa.Table | pd.DataFrame) -> pd.DataFrame:
    """Accuracy (percent) per (method, source, seed, protocol, target, split[, stream]), from summed counts."""
    frame = table.to_pandas() if isinstance(table, pa.Table) else table
    sums = frame.groupby(SPLIT_KEY + _stream_key(frame), sort=True)[["correct", "total"]].sum().reset_index()
    sums["accuracy"] = 100.0 * sums["correct"] / sums["total"]
    return sums


def harmonic_mean(base, novel):
    """HM = 2BN / (B + N), element-wise; 0 where both are 0, NaN where either is missing."""
    base, novel = np.asarray(base, dtype=float), np.asarray(novel, dtype=float)
    total = base + novel
    with np.errstate(invalid="ignore", divide="ignore"):
        hm = np.where(total > 0, 2.0 * base * novel / np.where(total > 0, total, 1.0), 0.0)
    hm = np.where(np.isnan(total), np.nan, hm)
    return hm if hm.ndim else float(hm)


def seed_accuracy(table: pa.Table | pd.DataFrame) -> pd.DataFrame:
    """One row per (method, source, seed, protocol, target): columns base, novel, hm, all.

    Columns that do not apply (or whose split is absent) are NaN, never 0;
    hm is this seed's 2BN/(B+N) from its counts-based accuracies.
    """
    accuracy = split_accuracy(table)
    index = CELL_KEY + _stream_key(accuracy)
    wide = accuracy.pivot(index=index, columns="split", values="accuracy")
    wide = wide.reindex(columns=["base", "novel", "all"]).reset_index()
    wide.columns.name = None
    wide["hm"] = harmonic_mean(wide["base"], wide["novel"])
    return wide[index + ["base", "novel", "hm", "all"]]


def _stream_key(frame: pd.DataFrame) -> list[str]:
    """["stream"] when the frame holds it (per-stream accuracies stay apart), else []."""
    return ["stream"] if "stream" in frame.columns else []


def run_metrics(table: pa.Table | pd.DataFrame, digits: int = 4) -> dict:
    """A run's metrics.json (one method, source and seed), nested for `dvc metrics show`.

    {"base_to_novel": {target: {"base", "novel", "hm"}},
     "cross_dataset" | "domain_generalization": {target: {"accuracy"}}}
    Values are percentages rounded to `digits` for display only; missing is null.
    """
    frame = table.to_pandas() if isinstance(table, pa.Table) else table
    frame = frame[frame["stream"] == OUTPUT]
    runs = frame[RUN_KEY].drop_duplicates()
    if len(runs) != 1:
        raise ValueError(f"run_metrics needs the rows of one run, got {len(runs)} (method, source, seed)")
    metrics: dict = {}
    for row in seed_accuracy(frame).itertuples(index=False):
        if row.protocol == "base_to_novel":
            values = {"base": row.base, "novel": row.novel, "hm": row.hm}
        else:
            values = {"accuracy": row.all}
        metrics.setdefault(row.protocol, {})[row.target] = {key: _rounded(v, digits) for key, v in values.items()}
    return metrics


def _rounded(value: float, digits: int) -> float | None:
    return None if value is None or math.isnan(value) else round(float(value), digits)
