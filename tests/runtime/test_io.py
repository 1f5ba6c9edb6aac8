"""Atomic writes: a killed writer leaves the previous file or none, never a partial one."""

import json
import os
import signal
import subprocess
import sys
import time

from pathlib import Path

import pyarrow as pa
import pytest

from dear.runtime import io

WRITER = r"""
import sys, numpy as np, pyarrow as pa
from dear.runtime import io
path, kind = sys.argv[1], sys.argv[2]
schema = pa.schema([("x", pa.float64()), ("i", pa.int64())])
n = 0
while True:
    n += 1
    if kind == "parquet":
        rows = 200_000
        table = pa.table({"x": np.full(rows, float(n)), "i": np.arange(rows)})
        io.write_parquet(path, table, schema, provenance={"n": n})
    else:
        io.write_json(path, {"n": n, "payload": "y" * 3_000_000})
    print(n, flush=True)
"""


def _check_parquet(path):
    table = io.read_parquet(path)
    column = table.column("x").to_pylist()
    assert len(column) == 200_000 and len(set(column)) == 1
    assert io.read_provenance(path)["n"] == column[0]


def _check_json(path):
    data = json.loads(path.read_text())
    assert len(data["payload"]) == 3_000_000


@pytest.mark.parametrize("kind, check", [("parquet", _check_parquet), ("json", _check_json)])
def test_killed_writer_never_leaves_a_partial_file(tmp_path, kind, check):
    """Kill the writer at several moments after a completed write, i.e. mid-way through the next one."""
    target = tmp_path / f"out.{kind}"
    for delay in (0.0, 0.02, 0.08, 0.2):
        proc = subprocess.Popen([sys.executable, "-c", WRITER, str(target), kind], stdout=subprocess.PIPE)
        assert proc.stdout.readline(), "the writer died before completing a file"
        time.sleep(delay)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        check(target)
    # leftovers are only hidden temporaries, which never look like the target
    for leftover in tmp_path.iterdir():
        assert leftover == target or (leftover.name.startswith(f".{target.name}.") and leftover.suffix == ".tmp")


def test_exception_inside_atomic_path_keeps_previous_file(tmp_path):
    target = tmp_path / "a.txt"
    io.write_text(target, "old")
    with pytest.raises(RuntimeError):
        with io.atomic_path(target) as tmp:
            tmp.write_text("half")
            raise RuntimeError("boom")
    assert target.read_text() == "old"
    assert list(tmp_path.iterdir()) == [target]


def test_parquet_is_cast_to_its_explicit_schema(tmp_path):
    schema = pa.schema([("label", pa.int32()), ("name", pa.string())])
    table = pa.table({"name": ["a", "b"], "label": [1, 2], "extra": [0, 0]})
    io.write_parquet(tmp_path / "t.parquet", table, schema, provenance={"seed": 1})
    read = io.read_parquet(tmp_path / "t.parquet", schema)
    assert read.schema.names == ["label", "name"]
    assert read.schema.field("label").type == pa.int32()


def test_provenance_records_params_inputs_versions_and_seed(tmp_path):
    source = tmp_path / "in.bin"
    source.write_bytes(b"abc")
    record = io.provenance({"lr": 1.0e-3}, inputs={"weights": source}, seed=3)
    assert record["inputs_sha256"]["weights"] == io.sha256_file(source)
    assert record["seed"] == 3 and record["params_sha256"] == io.sha256_json({"lr": 1.0e-3})
    assert {"torch", "open_clip_torch", "dear", "cuda", "nvidia_driver", "python"} <= set(record["versions"])
    assert record["devices"]["cpu"] and record["code"]["commit"]


def test_provenance_says_which_commit_ran_and_whether_its_code_was_committed():
    import subprocess

    root = Path(io.__file__).resolve().parents[2]
    head = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True)
    code = io.code_version()
    if head.returncode != 0:
        assert code == {"commit": "unknown: not run from a git checkout", "clean": None}
        return
    status = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--", *io.CODE_PATHS],
                            capture_output=True, text=True).stdout
    assert code == {"commit": head.stdout.strip(), "clean": status.strip() == ""}


def test_devices_name_each_cuda_device_torch_started_with_its_peak_memory(monkeypatch):
    import sys
    import types

    cuda = types.SimpleNamespace(is_initialized=lambda: True, device_count=lambda: 2,
                                 get_device_name=lambda i: f"GPU {i}", max_memory_allocated=lambda i: (i + 1) * 2**30)
    monkeypatch.setitem(sys.modules, "torch", types.SimpleNamespace(cuda=cuda))
    assert io.devices()["cuda"] == [{"name": "GPU 0", "peak_memory_mb": 1024.0},
                                    {"name": "GPU 1", "peak_memory_mb": 2048.0}]
    cuda.is_initialized = lambda: False  # torch imported, CUDA never used: no device to name
    assert "cuda" not in io.devices()


def test_same_inputs_give_byte_identical_parquet(tmp_path):
    schema = pa.schema([("v", pa.int64())])
    for name in ("a", "b"):
        io.write_parquet(tmp_path / f"{name}.parquet", pa.table({"v": [1, 2, 3]}), schema, provenance={"k": 1})
    assert (tmp_path / "a.parquet").read_bytes() == (tmp_path / "b.parquet").read_bytes()


def test_outputs_get_the_usual_permissions(tmp_path):
    io.write_text(tmp_path / "x.txt", "x")
    umask = os.umask(0)
    os.umask(umask)
    assert (tmp_path / "x.txt").stat().st_mode & 0o777 == 0o666 & ~umask
