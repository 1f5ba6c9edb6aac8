"""MKL told that a non-Intel CPU is an Intel one: the other CPU maker, emulated for MKL alone.

MKL picks its code by the CPU's maker: on an Intel CPU its Intel branches (the
AVX2 branch of `MKL_CBWR=AVX2,STRICT`, its Intel vector math), elsewhere its own
pick. It asks through `mkl_serv_intel_cpu_true`, a function torch's MKL exports
(libtorch_cpu.so's dynamic symbols, MKL 2024.2), so a library preloaded with one
that answers 1 makes MKL on an AMD CPU run the code it runs on an Intel one. Its
verbose line then says so (`CNR:AVX2,STRICT` where it said `AUTO,STRICT`), which
`dear.compute.reproducible.mkl_branch` reads: a test checks that before trusting it.

Only MKL's choice is emulated: the instructions run on this CPU. Where MKL's
Intel code uses approximation instructions (rcpps, rsqrtps), an AMD CPU answers
them otherwise than an Intel one, so an emulated run's bytes are not an Intel
CPU's in general; under MKL's COMPATIBLE branch, which never uses them, they are.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

SOURCE = """/* MKL asks whether the CPU is an Intel one: yes (tests/mkl_vendor.py) */
int mkl_serv_intel_cpu_true(void) { return 1; }
int mkl_serv_intel_cpu(void) { return 1; }
"""


def intel_shim(folder: Path) -> Path | None:
    """The preloadable library, compiled into `folder` (None where no C compiler is installed)."""
    compiler = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if compiler is None:
        return None
    source, library = folder / "mkl_intel.c", folder / "mkl_intel.so"
    source.write_text(SOURCE)
    subprocess.run([compiler, "-shared", "-fPIC", "-O2", "-o", str(library), str(source)], check=True,
                   capture_output=True)
    return library
