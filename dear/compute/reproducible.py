"""The same floats on every x86-64 CPU: `compute.reproducible` caps what torch's CPU kernels may use.

torch picks its CPU kernels per machine: ATen's vectorised loops (sums,
softmax, norms, elementwise math) per instruction set (AVX2, AVX-512), MKL's
BLAS and vector math (VML: ATen's sqrt, exp, log, erf) per processor and per
maker, oneDNN's convolutions per instruction set (AVX-512, AMX). Each sums floats
in its own order, so the same config trains other weights on another CPU (30 fp32
pretraining steps here: a different model.pt under each cap alone,
docs/compute.md). With the setting on, a stage pins all of them:

- ATEN_CPU_CAPABILITY=avx2: ATen's kernels compiled for AVX2, the newest set
  every x86-64 CPU of the last ten years has (ATen picks them by instruction set only);
- the matrix products (aten mm, addmm, bmm, baddbmm) on numpy's OpenBLAS at its
  Haswell kernels (dear.compute.blas, installed by `configure_torch`): one AVX2 code on every
  maker, at about MKL's speed;
- MKL_CBWR=COMPATIBLE,STRICT, for what the products leave to MKL (convolutions' im2col
  products, the fused attention kernel's, ATen's sqrt/exp/log/erf): MKL's conditional numerical reproducibility on its
  COMPATIBLE branch, one SSE2 code path without the approximation instructions
  (rcpps, rsqrtps) whose results differ between Intel and AMD: the branch Intel
  documents for the same results on Intel and compatible processors. Its AVX2
  branch (the setting's before) is taken on Intel CPUs only: on an AMD CPU MKL
  runs its own pick, and the bytes differ (docs/compute.md); every product on this
  branch (SSE2) cost 2.0-2.9x. STRICT only applies to the AVX2 and AVX-512 branches,
  so the thread counts stay fixed per job (dear.compute.cpus);
- MKL_ENABLE_INSTRUCTIONS=AVX2: MKL's dispatcher, for what CBWR does not cover;
- ONEDNN_MAX_CPU_ISA=AVX2, and oneDNN (torch.backends.mkldnn) off: its kernels
  may choose their blocking by the cache sizes of the CPU (no promise across CPUs), so convolutions go to
  ATen's own (im2col + MKL);
- deterministic algorithms (`torch.use_deterministic_algorithms(warn_only)`;
  on CUDA cuDNN's deterministic kernels and cuBLAS's fixed workspace);
- OPENBLAS_CORETYPE=Haswell: numpy's and scipy's BLAS (sklearn's HDBSCAN in the
  profile, the linear probe), set by `early` before numpy loads.

Environment variables are read by the libraries when torch first loads or
first computes, so `apply` runs in the `dear` command before any import of
torch (`dear.cli`), and the stage's worker processes inherit them. What was in
force goes into every output's provenance (`in_force`, `dear.runtime.io.provenance`),
with the branch MKL reports it runs (`mkl_branch`: it replaces a branch the CPU
cannot take by AUTO, its own pick, without a word). `python -m dear.fingerprint`
checks the promise on a machine in seconds (tests/test_fingerprint.py).
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
from pathlib import Path
from typing import Any

from dear.compute.imports import loaded  # torch imported by this command (the warm server loaded it for all)

log = logging.getLogger("dear.reproducible")

# variable -> the value the setting puts (what it caps)
CAPS = {
    "ATEN_CPU_CAPABILITY": "avx2",        # ATen's vectorised kernels
    "ONEDNN_MAX_CPU_ISA": "AVX2",         # oneDNN (off as well: configure_torch)
    "MKL_CBWR": "COMPATIBLE,STRICT",     # MKL: one SSE2 code path on Intel and AMD alike, fixed reductions
    "MKL_ENABLE_INSTRUCTIONS": "AVX2",    # MKL's dispatcher, for what CBWR does not cover
    "CUBLAS_WORKSPACE_CONFIG": ":4096:8",  # cuBLAS: deterministic with use_deterministic_algorithms
    "OPENBLAS_CORETYPE": "Haswell",      # numpy's and scipy's OpenBLAS (sklearn: HDBSCAN, the linear probe)
}
NEEDS_AVX2 = ("OPENBLAS_CORETYPE",)  # forced on a CPU without AVX2, OpenBLAS would run instructions it lacks
# other variables that decide CPU floats, recorded when a user set them
WATCHED = ("DNNL_MAX_CPU_ISA", "MKL_DYNAMIC", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "NPY_DISABLE_CPU_FEATURES")
# CPU flags that decide which kernels the libraries may pick (in /proc/cpuinfo's words)
FLAGS = ("avx2", "fma", "avx512f", "avx512_bf16", "avx512_fp16", "avx512_vnni", "amx_bf16", "amx_tile", "avx_vnni")

_state: dict[str, Any] = {"setting": None, "overridden": {}, "late": False, "before": {}, "torch_before": None}


def apply(on: bool, environ: dict | None = None) -> dict[str, str]:
    """Set (on) the caps in this process's environment, before torch loads; returns the values changed.

    A value the user had set otherwise is replaced (and named in the log): the
    setting's promise is the same floats as everyone else's. Off, nothing is
    touched: the libraries pick the machine's fastest kernels (or the user's caps).
    """
    environ = os.environ if environ is None else environ
    _state["setting"] = bool(on)
    _state["late"] = on and loaded("torch") is not None and not _capped_at_load()
    _state["overridden"] = {}
    changed = {}
    if on:
        for name, value in CAPS.items():
            if name in NEEDS_AVX2 and "avx2" not in cpu_flags():
                continue
            if environ.get(name) != value:
                if environ.get(name):
                    _state["overridden"][name] = environ[name]
                _state["before"].setdefault(name, environ.get(name))
                changed[name] = value
                environ[name] = value
    return changed


def early(args: list[str]) -> None:
    """At the start of the `dear` command, before numpy loads: OpenBLAS's cap when the command's params have the setting.

    OpenBLAS (numpy's and scipy's BLAS) picks its kernels when it loads, and
    `dear.cli`'s own imports load numpy, long before the params are read
    (`apply`). So the command line is read here as the stage will read it:
    `--params` (default params.yaml) and a `--set compute.reproducible=...`.
    Anything unreadable leaves it to the stage (its error, its provenance).
    """
    if "numpy" in sys.modules or "avx2" not in cpu_flags() or not _asks_for_it(args):
        return
    os.environ["OPENBLAS_CORETYPE"] = CAPS["OPENBLAS_CORETYPE"]


def _asks_for_it(args: list[str]) -> bool:
    path, sets = "params.yaml", []
    for index, arg in enumerate(args):
        value = args[index + 1] if index + 1 < len(args) else ""
        if arg == "--params":
            path = value
        elif arg.startswith("--params="):
            path = arg.split("=", 1)[1]
        elif arg == "--set":
            sets.append(value)
        elif arg.startswith("--set="):
            sets.append(arg.split("=", 1)[1])
    for change in sets:
        if change.replace(" ", "").startswith("compute.reproducible="):
            return change.split("=", 1)[1].strip().lower() == "true"
    try:
        import yaml

        loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml: the `dear` command reads this before each job
        return (yaml.load(Path(path).read_text(), Loader=loader) or {}).get("compute", {}).get("reproducible") is True
    except Exception:  # noqa: BLE001 (any unreadable file: the stage says what is wrong with it)
        return False


def release() -> None:
    """Undo `apply` and `configure_torch` (the end of a command: a later one in the same process, tests, starts clean)."""
    for name, value in _state["before"].items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value
    if _state["torch_before"] is not None:
        import torch

        mkldnn, deterministic, warn_only, cudnn_deterministic, benchmark = _state["torch_before"]
        torch.backends.mkldnn.enabled = mkldnn
        torch.use_deterministic_algorithms(deterministic, warn_only=warn_only)
        torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark = cudnn_deterministic, benchmark
        from dear.compute import blas

        blas.remove()
    _state.update(setting=None, overridden={}, late=False, before={}, torch_before=None)


def _capped_at_load() -> bool:
    """Whether the torch already loaded in this process runs ATen's AVX2 kernels (as the cap would make it)."""
    with contextlib.suppress(Exception):
        return sys.modules["torch"].backends.cpu.get_cpu_capability() == "AVX2"
    return False


def configure_torch(on: bool) -> None:
    """After torch loads: oneDNN off and deterministic algorithms (on); nothing changed (off)."""
    if not on or loaded("torch") is None:  # world, prepare: no torch, nothing to set
        return
    import torch

    if _state.get("late"):  # in-process callers (tests); every `dear` job sets the caps first
        log.debug("compute.reproducible: torch was loaded before the caps were set (ATen runs %s kernels): "
                    "this process's results may differ from other CPUs'; run the stage as a `dear` command",
                    torch.backends.cpu.get_cpu_capability())
    for name, was in _state["overridden"].items():
        log.warning("compute.reproducible: %s=%s replaced by %s (set compute.reproducible: false to keep yours)",
                    name, was, CAPS[name])
    _state["torch_before"] = (torch.backends.mkldnn.enabled, torch.are_deterministic_algorithms_enabled(),
                              torch.is_deterministic_algorithms_warn_only_enabled(),
                              torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark)
    if not _state.get("late") and torch.backends.cpu.get_cpu_capability() != "AVX2":
        log.warning("compute.reproducible: this CPU runs ATen's %s kernels, not AVX2 (it lacks AVX2?): its numbers "
                    "will differ from other CPUs'", torch.backends.cpu.get_cpu_capability())
    torch.backends.mkldnn.enabled = False
    from dear.compute import blas

    blas.install()  # the matrix products on numpy's OpenBLAS at its Haswell kernels, one code on every maker
    torch.use_deterministic_algorithms(True, warn_only=True)
    torch.backends.cudnn.deterministic = True
    torch.backends.cudnn.benchmark = False


def cpu_flags() -> list[str]:
    """The CPU's instruction sets among FLAGS (what its fastest kernels would use)."""
    present = set(_cpuinfo("flags").split())
    return [flag for flag in FLAGS if flag in present]


def cpu_vendor() -> str:
    """GenuineIntel, AuthenticAMD, ... ('' where /proc/cpuinfo does not say): MKL's CNR promise is Intel's only."""
    return _cpuinfo("vendor_id")


def _cpuinfo(field: str) -> str:
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.split(":", 1)[0].strip() == field:
                return line.split(":", 1)[1].strip()
    return ""


def in_force() -> dict[str, Any]:
    """What decided this process's floats: the setting, the caps, the kernels torch runs, its builds, threads, GPU."""
    record: dict[str, Any] = {
        "reproducible": _state["setting"],
        "cpu_vendor": cpu_vendor(),
        "cpu_flags": cpu_flags(),
        "caps": {name: os.environ[name] for name in (*CAPS, *WATCHED) if name in os.environ},
    }
    torch = loaded("torch")
    if torch is None:  # a stage that computes nothing in torch (world, prepare)
        return record
    record["aten_capability"] = torch.backends.cpu.get_cpu_capability()
    record["threads"] = torch.get_num_threads()
    record["mkldnn_enabled"] = bool(torch.backends.mkldnn.enabled)
    record["deterministic"] = bool(torch.are_deterministic_algorithms_enabled())
    record["builds"] = builds(torch)
    record["mkl_branch"] = mkl_branch(torch)
    record["products"] = _products()
    record["openblas"] = openblas()
    if torch.cuda.is_initialized():
        from dear.compute.probe import nvidia_driver

        record["cuda"] = {"devices": [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())],
                          "capability": ".".join(map(str, torch.cuda.get_device_capability(0))),
                          "driver": nvidia_driver() or "unknown", "cudnn": torch.backends.cudnn.version(),
                          "cudnn_deterministic": bool(torch.backends.cudnn.deterministic),
                          "tf32_matmul": bool(torch.backends.cuda.matmul.allow_tf32)}
    return record


def _products() -> str:
    """Which library computes torch's CPU matrix products (mm, addmm, bmm, baddbmm): dear.compute.blas while installed."""
    from dear.compute import blas

    return blas.NAME if blas.installed() else "torch (its BLAS)"


_mkl: dict[str, str] = {}  # this process's MKL branch, read once (MKL fixes it when it starts)


def mkl_branch(torch) -> str:
    """The code branch MKL runs in this process, as MKL itself reports it (its verbose line's `CNR:` field).

    COMPATIBLE,STRICT under the setting; a branch the CPU cannot take is replaced by AUTO (MKL's own pick: on
    an AMD CPU `MKL_CBWR=AVX2,STRICT` runs AUTO,STRICT); OFF without MKL_CBWR; 'none' where torch has no MKL,
    'unknown' where MKL did not say. Read from one 2x2 product with MKL's verbose mode on (mm's out= form,
    which dear.compute.blas leaves to MKL), its line caught from this process's standard output.
    """
    if "branch" not in _mkl:
        _mkl["branch"] = (_asked_mkl_branch(torch) or _read_mkl_branch(torch)) if torch.backends.mkl.is_available() \
            else "none"
    return _mkl["branch"]


# MKL's codes for its CNR branches (mkl_cbwr_get(MKL_CBWR_ALL): the branch, | 0x10000 for STRICT), as its verbose
# line names them
_MKL_BRANCHES = {1: "OFF", 2: "AUTO", 3: "COMPATIBLE", 4: "SSE2", 6: "SSSE3", 7: "SSE4_1", 8: "SSE4_2", 9: "AVX",
                 10: "AVX2", 11: "AVX512_MIC", 12: "AVX512", 13: "AVX512_MIC_E1", 14: "AVX512_E1"}
_MKL_STRICT = 0x10000


def _asked_mkl_branch(torch) -> str | None:
    """The branch as MKL's own mkl_cbwr_get returns it after a first product, in its verbose line's words; None where
    torch's MKL does not export it or returns a code not in `_MKL_BRANCHES` (then the verbose line is read).

    Why: the verbose line costs 0.2-0.5 s (MKL measures the CPU's frequency for it), a job's largest fixed cost
    after its imports; this asks MKL the same in microseconds. tests/compute/test_reproducible.py checks that both agree.
    """
    import ctypes

    try:
        library = ctypes.CDLL(os.path.join(os.path.dirname(torch.__file__), "lib", "libtorch_cpu.so"))
        get = library.mkl_serv_cbwr_get
    except (OSError, AttributeError):
        return None
    get.restype, get.argtypes = ctypes.c_int, [ctypes.c_int]
    torch.ops.aten.mm.out(torch.ones(2, 2), torch.ones(2, 2), out=torch.empty(2, 2))  # MKL settles its branch on use
    code = get(-1) & 0xFFFFFFFF  # MKL_CBWR_ALL
    name = _MKL_BRANCHES.get(code & ~_MKL_STRICT)
    if name is None:
        return None
    return name + (",STRICT" if code & _MKL_STRICT and name != "OFF" else "")


def _read_mkl_branch(torch) -> str:
    import ctypes
    import re
    import tempfile

    line = ""
    with contextlib.suppress(Exception), tempfile.TemporaryFile() as caught:
        sys.stdout.flush()
        saved = os.dup(1)
        os.dup2(caught.fileno(), 1)
        try:
            with torch.backends.mkl.verbose(torch.backends.mkl.VERBOSE_ON):  # mm's out= form: torch's own BLAS
                torch.ops.aten.mm.out(torch.ones(2, 2), torch.ones(2, 2), out=torch.empty(2, 2))
        finally:
            ctypes.CDLL(None).fflush(None)  # MKL prints through C's buffered stdout
            os.dup2(saved, 1)
            os.close(saved)
        caught.seek(0)
        line = caught.read().decode(errors="replace")
    found = re.search(r"CNR:(\S+)", line)
    return found.group(1) if found else "unknown"


def openblas() -> list[str]:
    """The OpenBLAS libraries loaded (numpy's, scipy's): their kernels (Haswell, SkylakeX, ...) and version."""
    try:
        from threadpoolctl import threadpool_info
    except ImportError:
        return []
    return sorted({f"{info.get('architecture')} ({info.get('version')})" for info in threadpool_info()
                   if info.get("internal_api") == "openblas"})


def builds(torch) -> dict[str, str]:
    """torch's BLAS, oneDNN and parallel backend, as torch.__config__ names them (one line each)."""
    wanted = {"blas": ("Math Kernel Library", "OpenBLAS", "BLAS_INFO"), "onednn": ("MKL-DNN", "oneDNN"),
              "parallel": ("ATen parallel backend",)}
    lines = [line.strip(" -\t") for line in (torch.__config__.show() + torch.__config__.parallel_info()).splitlines()]
    found = {}
    for key, needles in wanted.items():
        for line in lines:
            if any(needle in line for needle in needles) and len(line) < 200:
                found[key] = line
                break
    found["torch"] = torch.__version__
    return found
