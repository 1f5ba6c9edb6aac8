"""`compute.reproducible`: the same bytes on every x86-64 CPU, checked on one CPU by emulating others.

A CPU of another kind is emulated by the variables that cap what torch's
libraries may use: an AVX2 machine (ATen, oneDNN and MKL held at AVX2) and an
AVX-512 machine with AMX (this test's default when the CPU has them). A short
study (pretraining, CoOp's training, fusion, evaluation: tests/emulated_cpu.py)
runs once per CPU in a process of its own. With the setting on, the weights and
the evaluation table are byte-identical whichever CPU; with it off they differ,
so the identity is the setting's doing (a forgotten library shows as a difference).
"""

from __future__ import annotations

import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import torch
import yaml

from dear import reproducible
from tests import tiny_study

ROOT = Path(__file__).resolve().parents[1]
CAPS = ("ATEN_CPU_CAPABILITY", "ONEDNN_MAX_CPU_ISA", "MKL_CBWR", "MKL_ENABLE_INSTRUCTIONS")
CPUS = {  # an emulated CPU: the caps its kernels run under
    "avx512-amx": {"ATEN_CPU_CAPABILITY": "avx512", "ONEDNN_MAX_CPU_ISA": "AVX512_CORE_AMX"},
    "avx2": {"ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2", "MKL_ENABLE_INSTRUCTIONS": "AVX2"},
}
needs_avx512 = pytest.mark.skipif("avx512f" not in reproducible.cpu_flags(),
                                  reason="emulates CPUs by capping an AVX-512 one: this CPU has no AVX-512")


def _params(folder: Path, on: bool) -> Path:
    raw = tiny_study.params()
    raw["backbone"].update(steps=30, precision="fp32")
    raw["compute"]["reproducible"] = on
    raw["data"]["datasets"] = ["world_objects"]
    raw["study"] = {"methods": ["zeroshot", "coop"], "base_to_novel": ["world_objects"], "transfer": None}
    raw["profile"]["dataset"] = "world_objects"
    raw["report"].update(methods=["zeroshot", "coop"], compare="coop")
    path = folder / "params.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return path


def _dear(folder: Path, *args: str, env: dict | None = None) -> None:
    subprocess.run([sys.executable, "-m", "dear.cli", *args], cwd=folder, check=True, capture_output=True,
                   env=env or _env({}))


def _env(caps: dict) -> dict:
    clean = {key: value for key, value in os.environ.items() if key not in CAPS}
    return {**clean, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1", **caps}


@pytest.fixture(scope="module")
def studies(tmp_path_factory) -> dict:
    """{(setting, cpu): folder} of the short study run on each emulated CPU, setting on and off."""
    base = tmp_path_factory.mktemp("reproducible")
    _params(base, True)
    _dear(base, "world", "--out", "world")
    _dear(base, "prepare", "--dataset", "world_objects", "--out", "data/world_objects")
    runs = {}
    for on in (True, False):
        for cpu in CPUS:
            folder = base / f"{'on' if on else 'off'}-{cpu}"
            folder.mkdir()
            (folder / "world").symlink_to(base / "world")
            (folder / "data").symlink_to(base / "data")
            _params(folder, on)
            runs[on, cpu] = folder

    def study(key):
        result = subprocess.run([sys.executable, "-m", "tests.emulated_cpu", str(runs[key])], cwd=ROOT,
                                capture_output=True, text=True, env=_env(CPUS[key[1]]))
        assert result.returncode == 0, result.stderr[-3000:]

    with ThreadPoolExecutor(2) as pool:  # two processes of one thread each
        list(pool.map(study, runs))
    return runs


def _weights(path: Path) -> dict[str, bytes]:
    state = torch.load(path, map_location="cpu", weights_only=False)
    state = state.get("state_dict", state) if isinstance(state, dict) else state
    return {name: value.numpy().tobytes() for name, value in _tensors(state)}


def _tensors(node, prefix=""):
    if isinstance(node, torch.Tensor):
        yield prefix, node.detach().contiguous()
    elif isinstance(node, dict):
        for key, value in node.items():
            yield from _tensors(value, f"{prefix}.{key}")


def _outputs(folder: Path) -> dict:
    """What the study computed, without its provenance (paths, caps): weights, the eval table, fusion's alpha."""
    return {"backbone": _weights(folder / "backbone/model.pt"), "trained": _weights(folder / "run/model.pt"),
            "eval": pq.read_table(folder / "eval/eval.parquet").replace_schema_metadata(None).to_pylist()}


@needs_avx512
def test_the_same_bytes_on_every_emulated_cpu_with_the_setting_on(studies):
    first, second = (_outputs(studies[True, cpu]) for cpu in CPUS)
    assert first["backbone"] == second["backbone"]
    assert first["trained"] == second["trained"]
    assert first["eval"] == second["eval"] and first["eval"]


@needs_avx512
def test_the_weights_move_with_the_cpu_when_the_setting_is_off(studies):
    """Not vacuous: the same study with the machine's own kernels gives other weights on each emulated CPU."""
    first, second = (_outputs(studies[False, cpu]) for cpu in CPUS)
    assert first["backbone"] != second["backbone"]
    assert first["trained"] != second["trained"]


@needs_avx512
def test_the_provenance_says_which_kernels_made_the_outputs(studies):
    import json

    on = json.loads((studies[True, "avx512-amx"] / "backbone/card.json").read_text())["provenance"]["compute"]
    assert on["reproducible"] is True and on["aten_capability"] == "AVX2" and on["mkldnn_enabled"] is False
    assert on["caps"]["MKL_CBWR"] == "AVX2,STRICT" and on["caps"]["ONEDNN_MAX_CPU_ISA"] == "AVX2"
    assert "avx512f" in on["cpu_flags"] and on["deterministic"] is True
    off = json.loads((studies[False, "avx512-amx"] / "backbone/card.json").read_text())["provenance"]["compute"]
    assert off["reproducible"] is False and off["aten_capability"] == "AVX512"
    assert off["caps"]["ONEDNN_MAX_CPU_ISA"] == "AVX512_CORE_AMX" and "MKL_CBWR" not in off["caps"]
