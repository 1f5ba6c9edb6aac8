"""Reading `train_log.parquet` files for the loss curves.

A train log has one row per optimizer step: `step` and `loss` (the total) are
required; `epoch`, loss terms (`loss_ce`, `loss_img`, `loss_txt`, `loss_fus`,
...), `fade`, `lr`, `alpha_<k>` and `seconds` are optional, and methods log different
terms (CoOp has no fusion term), so unknown or absent columns are fine. The
run (method, dataset, seed) comes from `method`/`dataset`/`seed` columns when
the log has them, else from its path `.../<method>/<dataset>/[train/]seed<S>/train_log.parquet`.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Iterable

import pandas as pd
import pyarrow.parquet as pq

from dear.errors import DearError

REQUIRED = ("step", "loss")
RUN_COLUMNS = ("method", "dataset", "seed")
SEED_DIR = re.compile(r"^seed(-?\d+)$")


def read_train_logs(paths: Iterable[str | os.PathLike]) -> pd.DataFrame:
    """All logs as one frame: method, dataset, seed, run, step, loss, then the loss_* terms present."""
    frames, seen = [], {}
    for path in sorted({str(Path(p)) for p in paths}):
        key, frame = read_train_log(path)
        if key in seen:
            raise DearError(f"{path}: run {key[0]}/{key[1]}/seed{key[2]} is also logged in {seen[key]}; "
                            "pass each train_log.parquet once")
        seen[key] = path
        frames.append(frame)
    if not frames:
        return pd.DataFrame(columns=list(RUN_COLUMNS) + ["run", *REQUIRED])
    logs = pd.concat(frames, ignore_index=True)
    terms = sorted(c for c in logs.columns if c.startswith("loss_"))
    logs = logs[list(RUN_COLUMNS) + ["run", *REQUIRED] + (["fade"] if "fade" in logs else []) + terms]
    return logs.sort_values(["method", "dataset", "seed", "step"], kind="stable").reset_index(drop=True)


def read_train_log(path: str | os.PathLike) -> tuple[tuple[str, str, int], pd.DataFrame]:
    """((method, dataset, seed), the log's rows with run columns added)."""
    path = Path(path)
    if not path.is_file():
        raise DearError(f"{path}: train log not found; run `dear train` for this run or leave it out of --train-logs")
    try:
        frame = pq.read_table(path).to_pandas()
    except (OSError, ValueError) as err:
        raise DearError(f"{path}: not a readable Parquet file ({err}); rerun `dear train` for this run")
    missing = [name for name in REQUIRED if name not in frame.columns]
    if missing:
        raise DearError(f"{path}: train log misses columns {missing}; rerun `dear train` for this run")
    method, dataset, seed = _run_of(path, frame)
    frame = frame.assign(method=method, dataset=dataset, seed=seed, run=f"{method}/{dataset}/seed{seed}")
    keep = list(RUN_COLUMNS) + ["run", *REQUIRED] + [c for c in frame.columns if c.startswith("loss_") or c == "fade"]
    return (method, dataset, seed), frame[keep].astype({"step": "int64", "loss": "float64", "seed": "int64"})


def _run_of(path: Path, frame: pd.DataFrame) -> tuple[str, str, int]:
    """(method, dataset, seed) from the log's own columns, else from its folder names."""
    if all(c in frame.columns for c in RUN_COLUMNS) and len(frame):
        unique = frame[list(RUN_COLUMNS)].drop_duplicates()
        if len(unique) != 1:
            raise DearError(f"{path}: holds {len(unique)} runs; a train log holds one (method, dataset, seed)")
        method, dataset, seed = unique.iloc[0]
        return str(method), str(dataset), int(seed)
    seed_match = SEED_DIR.match(path.parent.name)
    run = path.parent.parent.parent if path.parent.parent.name == "train" else path.parent.parent  # <method>/<dataset>
    if seed_match is None or len(run.parts) < 2:
        raise DearError(f"{path}: cannot tell the run; expected .../<method>/<dataset>/train/seed<S>/train_log.parquet "
                        "or method, dataset, seed columns")
    return run.parent.name, run.name, int(seed_match.group(1))
