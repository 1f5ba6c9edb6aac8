"""Which of MKL's branches change the demo's bytes on this CPU, and which give the same bytes on both CPU makers.

Runs dear.fingerprint's battery in a fresh process per row, as this CPU runs MKL and, on a
non-Intel CPU with a C compiler, with MKL made to take its Intel code (tests/mkl_vendor.py: the
other maker, emulated for MKL alone): first under the setting itself (matrix products on numpy's
OpenBLAS, dear.compute.blas; the rest of MKL on its COMPATIBLE branch), then with every product on MKL
(`--mkl-products`) under each MKL_CBWR. Prints, per run, MKL's branch as MKL reports it and one
mark per battery item: `.` the same bytes as the setting's own run on this CPU (the first row),
`X` other bytes.

    python benchmarks/mkl_branches.py
    python benchmarks/mkl_branches.py --branches COMPATIBLE,STRICT AVX2,STRICT none
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BRANCHES = ["COMPATIBLE,STRICT", "COMPATIBLE", "AVX2,STRICT", "AVX512,STRICT", "SSE4_2,STRICT", "AUTO,STRICT", "none"]


def battery(cbwr: str | None, preload: Path | None) -> dict:
    """The battery's hashes and what was in force, in a fresh process: the setting (cbwr None), or every product
    on MKL with MKL_CBWR=cbwr ('none': unset)."""
    env = {key: value for key, value in os.environ.items() if key not in ("MKL_CBWR", "LD_PRELOAD")}
    env.update(PYTHONPATH=str(ROOT), HF_HUB_OFFLINE="1", **({"LD_PRELOAD": str(preload)} if preload else {}))
    extra = [] if cbwr is None else ["--mkl-products", "--cbwr", cbwr]
    result = subprocess.run([sys.executable, "-m", "dear.fingerprint", "--json", *extra], cwd=ROOT,
                            capture_output=True, text=True, env=env, check=True)
    return json.loads(result.stdout)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--branches", nargs="+", default=BRANCHES, help="MKL_CBWR values ('none': unset)")
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT))
    from dear.fingerprint import ITEMS, cpu_model
    from dear.compute.reproducible import cpu_vendor
    from tests.mkl_vendor import intel_shim

    with tempfile.TemporaryDirectory() as folder:
        shim = intel_shim(Path(folder)) if cpu_vendor() != "GenuineIntel" else None
        makers = [("this CPU", None)] + ([("MKL told Intel", shim)] if shim else [])
        reference = battery(None, None)["items"]
        print(f"{cpu_model()} ({cpu_vendor()}); items: " + "; ".join(f"{i} {name}" for i, name in enumerate(ITEMS)))
        print(f"{'products, MKL_CBWR':<28} {'MKL as':<16} {'MKL reports':<20} items 0..{len(ITEMS) - 1}")
        for cbwr in [None, *args.branches]:
            for maker, preload in makers:
                found = battery(cbwr, preload)
                marks = "".join("." if found["items"][name] == reference[name] else "X" for name in ITEMS)
                row = "the setting" if cbwr is None else f"MKL, {cbwr}"
                print(f"{row:<28} {maker:<16} {found['machine']['in_force']['mkl_branch']:<20} {marks}")


if __name__ == "__main__":
    main()
