"""The only values two runs of the same job may write differently: wall-clock time (tests/e2e/test_faults.py,
tests/e2e/test_pipeline.py)."""

from __future__ import annotations

from pathlib import Path

import pyarrow.parquet as pq

WALL_CLOCK = {"train_log.parquet": ["seconds"]}  # wall time since the training run began


def digests_wall_clock(path: Path) -> bool:
    """A digest (dear/pipeline/digest.py) of a folder that holds a file with a wall-clock column: it differs between
    any two runs."""
    return path.parent.name == ".digest" and any(next(path.parent.parent.rglob(name), None) for name in WALL_CLOCK)


def comparable(file: Path, raw: bytes | None = None):
    """The file's bytes; for a file with wall-clock columns, its rows without them and its metadata."""
    raw = file.read_bytes() if raw is None else raw
    if file.name in WALL_CLOCK and raw.startswith(b"PAR1"):
        table = pq.read_table(file)
        return table.drop_columns(WALL_CLOCK[file.name]).to_pydict(), table.schema.metadata
    return raw
