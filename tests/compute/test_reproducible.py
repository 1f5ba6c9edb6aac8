"""`compute.reproducible`: the same bytes on every x86-64 CPU, checked on one CPU by emulating others.

A CPU of another kind is emulated by the variables that cap what torch's
libraries may use: an AVX2 machine (ATen, oneDNN and MKL held at AVX2) and an
AVX-512 machine with AMX (this test's default when the CPU has them). A short
study (pretraining, CoOp's training, fusion, evaluation: tests/emulated_cpu.py)
runs once per CPU in a process of its own. With the setting on, the weights and
the evaluation table are byte-identical whichever CPU; with it off they differ,
so the identity is the setting's doing (a forgotten library shows as a difference).
The other CPU maker is emulated for MKL, the one library that picks its code by maker
(tests/mkl_vendor.py): the same study, as MKL runs on this CPU and as it runs on an Intel one.
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

from dear.compute import reproducible
from tests import tiny_study

ROOT = Path(__file__).resolve().parents[2]
CAPS = ("ATEN_CPU_CAPABILITY", "ONEDNN_MAX_CPU_ISA", "MKL_CBWR", "MKL_ENABLE_INSTRUCTIONS", "OPENBLAS_CORETYPE")
CPUS = {  # an emulated CPU: the caps its kernels run under
    "avx512-amx": {"ATEN_CPU_CAPABILITY": "avx512", "ONEDNN_MAX_CPU_ISA": "AVX512_CORE_AMX",
                   "OPENBLAS_CORETYPE": "SkylakeX"},
    "avx2": {"ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2", "MKL_ENABLE_INSTRUCTIONS": "AVX2",
             "OPENBLAS_CORETYPE": "Haswell"},
}
needs_avx512 = pytest.mark.skipif("avx512f" not in reproducible.cpu_flags(),
                                  reason="emulates CPUs by capping an AVX-512 one: this CPU has no AVX-512")


def _params(folder: Path, on: bool, device: str = "cpu") -> Path:
    raw = tiny_study.params()
    raw["backbone"].update(steps=30, precision="fp32")
    raw["compute"].update(reproducible=on, device=device)
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


def _world(base: Path) -> Path:
    """The tiny world and its prepared world_objects, made once for every study under `base`."""
    _params(base, True)
    _dear(base, "world", "--out", "world")
    _dear(base, "prepare", "--dataset", "world_objects", "--out", "data/world_objects")
    return base


def _folder(base: Path, name: str, on: bool, device: str = "cpu") -> Path:
    folder = base / name
    folder.mkdir()
    (folder / "world").symlink_to(base / "world")
    (folder / "data").symlink_to(base / "data")
    _params(folder, on, device)
    return folder


def _study(folder: Path, caps: dict) -> Path:
    result = subprocess.run([sys.executable, "-m", "tests.emulated_cpu", str(folder)], cwd=ROOT,
                            capture_output=True, text=True, env=_env(caps))
    assert result.returncode == 0, result.stderr[-3000:]
    return folder


@pytest.fixture(scope="module")
def studies(tmp_path_factory) -> dict:
    """{(setting, cpu): folder} of the short study run on each emulated CPU, setting on and off."""
    base = _world(tmp_path_factory.mktemp("reproducible"))
    runs = {(on, cpu): _folder(base, f"{'on' if on else 'off'}-{cpu}", on) for on in (True, False) for cpu in CPUS}
    with ThreadPoolExecutor(2) as pool:  # two processes of one thread each
        list(pool.map(lambda key: _study(runs[key], CPUS[key[1]]), runs))
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
            "probe": _weights(folder / "probe/model.pt"),
            "eval": pq.read_table(folder / "eval/eval.parquet").replace_schema_metadata(None).to_pylist()}


@needs_avx512
def test_the_same_bytes_on_every_emulated_cpu_with_the_setting_on(studies):
    first, second = (_outputs(studies[True, cpu]) for cpu in CPUS)
    assert first["backbone"] == second["backbone"]
    assert first["trained"] == second["trained"]
    assert first["probe"] == second["probe"] and first["probe"]  # sklearn's fit on OpenBLAS, capped as well
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
    assert on["caps"]["MKL_CBWR"] == "COMPATIBLE,STRICT" and on["caps"]["ONEDNN_MAX_CPU_ISA"] == "AVX2"
    assert on["mkl_branch"] == "COMPATIBLE,STRICT"  # what MKL says it runs
    assert "avx512f" in on["cpu_flags"] and on["deterministic"] is True
    probe = torch.load(studies[True, "avx512-amx"] / "probe/model.pt", map_location="cpu", weights_only=False)
    assert "Haswell" in json.dumps(probe, default=str)  # its provenance: the OpenBLAS kernels of its fit
    off = json.loads((studies[False, "avx512-amx"] / "backbone/card.json").read_text())["provenance"]["compute"]
    assert off["reproducible"] is False and off["aten_capability"] == "AVX512"
    assert off["caps"]["ONEDNN_MAX_CPU_ISA"] == "AVX512_CORE_AMX" and "MKL_CBWR" not in off["caps"]


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_a_gpu_repeats_itself_and_says_how_far_it_is_from_the_cpu(tmp_path):
    """On CUDA the setting's deterministic algorithms give the same bytes twice; the CPU's bytes are another
    matter (other kernels): the distance is printed for docs/compute.md, not held to a bound."""
    base = _world(tmp_path)
    first, second = (_study(_folder(base, f"gpu{i}", True, "cuda"), {}) for i in (1, 2))
    cpu = _outputs(_study(_folder(base, "cpu", True), {}))
    first, second = _outputs(first), _outputs(second)
    assert first["backbone"] == second["backbone"] and first["trained"] == second["trained"]
    assert first["eval"] == second["eval"]
    gpu_state = torch.load(base / "gpu1/backbone/model.pt", map_location="cpu")
    cpu_state = torch.load(base / "cpu/backbone/model.pt", map_location="cpu")
    largest = max((gpu_state[k].float() - cpu_state[k].float()).abs().max().item() for k in cpu_state)
    correct = lambda rows: sum(r["correct"] for r in rows) / sum(r["total"] for r in rows)  # noqa: E731
    print(f"GPU vs CPU: largest backbone weight difference {largest:.3g}; accuracy {100 * correct(first['eval']):.2f} "
          f"vs {100 * correct(cpu['eval']):.2f} %")


def _record(flags: list[str], aten: str, on: bool, caps: dict | None = None) -> dict:
    job = {"reproducible": on, "cpu_vendor": "GenuineIntel", "cpu_flags": flags, "aten_capability": aten, "mkldnn_enabled": not on,
           "caps": caps if caps is not None else (dict(reproducible.CAPS) if on else {}), "threads": 1,
           "builds": {"torch": "2.14.1", "blas": "MKL 2024.2", "onednn": "oneDNN v3.12.0"}}
    return {"compute": [job, {**job, "threads": 2}]}


def test_compare_names_cpus_of_other_instruction_sets_before_the_numbers():
    from dear.pipeline.compare import machines

    amx, avx2 = ["avx2", "fma", "avx512f", "amx_bf16"], ["avx2", "fma"]
    capped = machines(_record(amx, "AVX2", True), _record(avx2, "AVX2", True))
    assert capped == ["- **the runs were made on CPUs with different instruction sets** (avx2 fma avx512f amx_bf16 → "
                      "avx2 fma): both capped their kernels at the same set (compute.reproducible), so this alone "
                      "moves no number"]
    fastest = machines(_record(amx, "AVX512", False), _record(avx2, "AVX2", False))
    assert fastest[0].endswith("their kernels differ, so float rounding moves the numbers")
    assert fastest[1] == "- **kernels**: ATen AVX512, oneDNN on → ATen AVX2, oneDNN on"
    switched = machines(_record(amx, "AVX2", True), _record(amx, "AVX512", False))
    assert switched[0] == "- **compute.reproducible**: true → false" and switched[1].startswith("- **kernels**: ATen AVX2")
    assert machines(_record(amx, "AVX2", True), _record(amx, "AVX2", True)) == [
        "- the same: CPU maker, instruction sets, kernels, caps and torch builds"]
    assert machines({}, _record(amx, "AVX2", True))[0].startswith("- a run's record does not say")


def _on_amd(record: dict, mkl_branch: str | None = None) -> dict:
    for job in record["compute"]:
        job["cpu_vendor"] = "AuthenticAMD"
        if mkl_branch:
            job["mkl_branch"] = mkl_branch
    return record


def test_compare_names_cpu_makers_as_a_cause_with_what_mkl_computes_differently_on_each():
    from dear.pipeline.compare import machines

    amx, avx2 = ["avx2", "fma", "avx512f", "amx_bf16"], ["avx2", "fma"]
    intel, amd = _record(amx, "AVX2", True), _on_amd(_record(avx2, "AVX2", True))  # the setting's caps: COMPATIBLE
    # the products are one code on both makers; the vector math is not (the fingerprint's three Intel items)
    assert machines(intel, amd)[0] == ("- **CPU makers**: GenuineIntel → AuthenticAMD: both ran MKL's COMPATIBLE "
                                       "branch (compute.reproducible), one code on every maker for the matrix "
                                       "products and convolutions; MKL's vector math (sqrt, exp, log, erf) still "
                                       "differs between Intel and AMD CPUs, so the numbers of the methods that train "
                                       "through it (AdamW, GELU, softmax) may move by float rounding "
                                       "(docs/compute.md)")
    assert machines(intel, _on_amd(_record(avx2, "AVX2", True), "COMPATIBLE,STRICT"))[0].endswith("(docs/compute.md)")
    old = {**reproducible.CAPS, "MKL_CBWR": "AVX2,STRICT"}  # the setting before 2026-12-05: a snapshot's record
    old_intel, old_amd = _record(amx, "AVX2", True, old), _on_amd(_record(avx2, "AVX2", True, old), "AUTO,STRICT")
    assert machines(old_intel, old_amd)[0] == (
        "- **CPU makers**: GenuineIntel → AuthenticAMD (MKL's branch AVX2,STRICT → AUTO,STRICT: outside its "
        "COMPATIBLE branch MKL picks its code by the CPU's maker, so the numbers may move)")
    moved = machines(old_intel, amd)  # the snapshot made under the old cap against a run under the setting
    assert moved[0].startswith("- **CPU makers**: GenuineIntel → AuthenticAMD (MKL's branch AVX2,STRICT → COMPATIBLE:")
    assert any(line.startswith("- **kernels**") and "MKL_CBWR=COMPATIBLE,STRICT" in line for line in moved)
    off = _on_amd(_record(avx2, "AVX2", False))
    assert machines(_record(amx, "AVX512", False), off)[0].endswith("(MKL's branch OFF → OFF: outside its COMPATIBLE "
                                                                    "branch MKL picks its code by the CPU's maker, so "
                                                                    "the numbers may move)")


def test_compare_tells_a_snapshot_that_predates_the_record_from_a_folder_without_a_run(tmp_path):
    from dear.pipeline.compare import _report_folder
    from dear.errors import DearError

    (tmp_path / "run.json").write_text("{}")
    with pytest.raises(DearError, match="a snapshot without the run's record.json.*python -m dear.docs --snapshot"):
        _report_folder(tmp_path)


@pytest.fixture(scope="module")
def makers(tmp_path_factory) -> dict:
    """{(setting, maker): folder} of the short study run as this CPU runs MKL and with MKL told it is an Intel CPU."""
    from tests.mkl_vendor import intel_shim

    base = tmp_path_factory.mktemp("makers")
    shim = intel_shim(base)
    if shim is None:
        pytest.skip("needs a C compiler (cc) to build the preloaded library")
    _world(base)
    runs = {(on, maker): _folder(base, f"{'on' if on else 'off'}-{maker}", on) for on in (True, False)
            for maker in ("here", "intel")}
    with ThreadPoolExecutor(2) as pool:
        list(pool.map(lambda key: _study(runs[key], {"LD_PRELOAD": str(shim)} if key[1] == "intel" else {}), runs))
    return runs


@pytest.mark.slow
@pytest.mark.skipif(reproducible.cpu_vendor() == "GenuineIntel",
                    reason="emulates an Intel CPU for MKL on another maker's (tests/mkl_vendor.py)")
def test_the_same_bytes_when_mkl_takes_this_cpu_for_an_intel_one(makers):
    """The other CPU maker, emulated for MKL (the one library that picks its code by maker): with the setting on,
    the weights, the probe and the evaluation are byte-identical; with it off the models differ (not vacuous)."""
    import json

    on = [_outputs(makers[True, maker]) for maker in ("here", "intel")]
    off = [_outputs(makers[False, maker]) for maker in ("here", "intel")]
    for key in ("backbone", "trained", "probe", "eval"):
        assert on[0][key] == on[1][key], key
    assert off[0]["backbone"] != off[1]["backbone"] and off[0]["trained"] != off[1]["trained"]
    record = json.loads((makers[True, "intel"] / "backbone/card.json").read_text())["provenance"]["compute"]
    assert record["mkl_branch"] == "COMPATIBLE,STRICT" and record["products"] == "OpenBLAS (numpy)"


@pytest.mark.parametrize("cbwr", ["", "COMPATIBLE,STRICT", "AVX2,STRICT", "AUTO"])
def test_mkl_s_own_answer_names_the_branch_its_verbose_line_names(cbwr):
    """The recorded branch (`mkl_branch`) is asked of MKL (mkl_cbwr_get) rather than read from its verbose line
    (0.2-0.5 s a job): both in one process, with each setting a job may have."""
    code = ("import sys, torch\nfrom dear.compute import reproducible\n"
            "print(reproducible._asked_mkl_branch(torch), file=sys.stderr)\n"
            "print(reproducible._read_mkl_branch(torch), file=sys.stderr)\n")
    env = {**os.environ, "MKL_CBWR": cbwr} if cbwr else {k: v for k, v in os.environ.items() if k != "MKL_CBWR"}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    asked, read = [line for line in done.stderr.splitlines() if not line.startswith("MKL_VERBOSE")][-2:]
    assert asked == read and read not in ("unknown", "None"), done.stderr
