"""`compute.reproducible`'s promise, checked on the machine that runs the suite: dear.fingerprint's battery.

The battery (matrix products in the models' layouts, a patch convolution, ATen's and MKL's elementwise math,
optimizer steps, pretraining and training steps of the tiny backbone, the linear probe's fit) runs in a fresh
process under the setting, as a `dear` job runs, and must hash as tests/fingerprint.json says: values written on
the machine docs/compute.md names. On a CPU of the other maker this test is the cross-maker check; on one of the
same maker MKL is made to take its other maker's code (tests/mkl_vendor.py) where that can be done.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from dear import fingerprint
from dear.compute import reproducible
from tests.mkl_vendor import intel_shim

ROOT = Path(__file__).resolve().parents[1]
CAPS = (*reproducible.CAPS, "MKL_VERBOSE", "LD_PRELOAD")


def _fingerprint(*args: str, preload: Path | None = None) -> subprocess.CompletedProcess:
    env = {key: value for key, value in os.environ.items() if key not in CAPS}
    env.update(PYTHONPATH=str(ROOT), HF_HUB_OFFLINE="1", **({"LD_PRELOAD": str(preload)} if preload else {}))
    return subprocess.run([sys.executable, "-m", "dear.fingerprint", *args], cwd=ROOT, capture_output=True, text=True,
                          env=env)


def _json(*args: str, preload: Path | None = None) -> dict:
    result = _fingerprint("--json", *args, preload=preload)
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout)


# Measured 2026-12-07 on a real Intel CPU (Intel Xeon with AMX, under KVM), against the values written on an AMD
# EPYC: these items, and only these, differ. MKL's vector math (ATen's exp, log, erf, sqrt on CPU) gives other
# bytes on Intel under every MKL_CBWR branch tried (COMPATIBLE, SSE2, SSE4_2, AVX2, with and without STRICT), so
# the setting's cross-maker promise does not hold for it (docs/compute.md); everything else held.
INTEL_DIFFERS = {"sqrt, exp, log, erf (MKL's vector math)", "AdamW (fused), AdamW, SGD steps", "DeAR: 2 training steps"}


def test_this_machine_computes_the_stored_fingerprint():
    """The promise itself: every item's bytes as stored; else the CPU, the caps and the first item that moved.

    On an Intel CPU against values written on an AMD one, the items of MKL's vector math are known to move
    (INTEL_DIFFERS): the test then checks that nothing else moved, and is marked as an expected failure."""
    stored = json.loads(fingerprint.STORED.read_text())
    if reproducible.cpu_vendor() == "GenuineIntel" and stored["machine"]["vendor"] == "AuthenticAMD":
        items = _json()["items"]
        moved = {name for name, value in items.items() if stored["items"].get(name) != value}
        assert moved <= INTEL_DIFFERS, f"items that moved beyond MKL's vector math on Intel: {moved - INTEL_DIFFERS}"
        pytest.xfail(f"on Intel, MKL's vector math gives other bytes than on AMD ({len(moved)} items: "
                     f"{sorted(moved)}); docs/compute.md")
    result = _fingerprint()
    assert result.returncode == 0, (result.stdout + result.stderr)[-3000:]
    assert "the same bytes as fingerprint.json" in result.stdout


def test_a_moved_item_is_named_with_the_cpu_the_caps_and_the_builds():
    stored = json.loads(fingerprint.STORED.read_text())
    found = dict(stored["items"])
    second, third = list(found)[1:3]
    found[second] = found[third] = "0" * 64
    report = fingerprint.compare(found, stored)
    assert f"2 of {len(found)} items differ" in report and f"first item that moved: {second}\n" in report
    assert f"this CPU: {fingerprint.cpu_model()} ({reproducible.cpu_vendor()}" in report
    assert "caps in force: " in report and "MKL's branch: " in report and f"stored on: {stored['machine']['cpu']}" in report
    assert "python -m dear.fingerprint --write" in report
    assert fingerprint.compare(dict(stored["items"]), stored) is None


def test_the_stored_values_were_made_under_the_setting():
    """What wrote tests/fingerprint.json: the setting's caps, MKL on its COMPATIBLE branch, ATen at AVX2."""
    stored = json.loads(fingerprint.STORED.read_text())
    force = stored["machine"]["in_force"]
    assert force["reproducible"] is True and force["aten_capability"] == "AVX2" and force["mkldnn_enabled"] is False
    assert force["mkl_branch"] == "COMPATIBLE,STRICT" and force["caps"]["MKL_CBWR"] == reproducible.CAPS["MKL_CBWR"]
    assert force["products"] == "OpenBLAS (numpy)" and all(found.startswith("Haswell") for found in force["openblas"])
    assert list(stored["items"]) == list(fingerprint.ITEMS)


@pytest.mark.skipif(reproducible.cpu_vendor() == "GenuineIntel",
                    reason="emulates an Intel CPU for MKL on another maker's: here the stored values, written on "
                           "an AMD CPU, are the cross-maker check")
def test_mkl_computes_the_same_bytes_when_it_takes_this_cpu_for_an_intel_one(tmp_path):
    """The other maker, emulated: MKL run as on an Intel CPU gives the setting's bytes (what the setting leaves to
    MKL runs its COMPATIBLE branch, one code for both); the old cap (every product on MKL, MKL_CBWR=AVX2,STRICT)
    did not, so the emulation can tell makers apart."""
    shim = intel_shim(tmp_path)
    if shim is None:
        pytest.skip("needs a C compiler (cc) to build the preloaded library")
    as_intel = _json(preload=shim)
    assert as_intel["machine"]["in_force"]["mkl_branch"] == "COMPATIBLE,STRICT"
    assert as_intel["items"] == json.loads(fingerprint.STORED.read_text())["items"]
    old = ("--kernels", "--mkl-products", "--cbwr", "AVX2,STRICT")  # the setting before 2026-12-05
    old_here, old_as_intel = _json(*old), _json(*old, preload=shim)
    assert old_as_intel["machine"]["in_force"]["mkl_branch"] == "AVX2,STRICT"  # MKL took its Intel branch
    assert old_here["machine"]["in_force"]["mkl_branch"] == "AUTO,STRICT"  # ... which it refuses a non-Intel CPU
    moved = [name for name in fingerprint.KERNELS if old_here["items"][name] != old_as_intel["items"][name]]
    assert "ViT-B/16 in-projection [B*T, D] @ [D, 3D]" in moved and "sqrt, exp, log, erf (MKL's vector math)" in moved
