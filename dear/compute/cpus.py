"""How many CPUs a stage uses: what its config asks for, never more than its job was given.

A stage's need comes from the config (`wanted`): `data.workers` image checkers
for prepare, `backbone.threads` for the embedded backbone's pretraining, one
torch thread plus `compute.workers` image-loading processes for profile,
train, fuse and evaluate, one thread for world and report. The Snakefile
declares that number as each rule's `threads:`, so Snakemake never starts
more work than `--cores` (or a Slurm job's CPUs), and hands it to the job as
OMP_NUM_THREADS; DVC and a person running a stage by hand get the same
number by default (at most the CPUs the process may run on). A job given fewer CPUs (Snakemake's `--cores` below a
rule's threads, OMP_NUM_THREADS, `dear --threads N`) uses fewer: its torch
threads plus its worker processes never exceed them, so two stages on two
cores no longer run four spinning threads (docs/performance.md).

One exception: the embedded backbone's weights depend on the number of
threads that trained them, so its pretraining keeps `backbone.threads` and
says so when the job was given fewer.
"""

from __future__ import annotations

import logging
import os
import sys
from dataclasses import dataclass

log = logging.getLogger("dear.cpus")

MODEL_STAGES = ("profile", "train", "fuse", "evaluate", "predict")
ENV = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")  # read by each math library at its start


@dataclass(frozen=True)
class Budget:
    cpus: int  # CPUs the job may use
    threads: int  # torch and BLAS threads of the stage's own process
    processes: int  # worker processes it may start besides (image loading or checking)
    source: str  # where `cpus` came from
    asked: int = 0  # worker processes the config asks for


_budget: Budget | None = None  # this process's, once `apply` ran (None: a stage called directly, e.g. by a test)
_saved_env: dict[str, str | None] = {}  # the variables `apply` replaced, for `release`
_saved_threads: list[int] = []  # torch's thread count before `apply`


def wanted(config: dict, stage: str) -> int:
    """The CPUs a stage asks for under a config (a params file as read: the Snakefile's `threads:` of its rule)."""
    if stage == "prepare":
        return config["data"]["workers"]
    if stage == "backbone":
        return config["backbone"]["threads"]
    if stage in MODEL_STAGES:
        return 1 + config["compute"]["workers"]
    return 1


def available() -> int:
    """CPUs this process may run on (its affinity: a Slurm job's or a container's, not the machine's)."""
    return len(os.sched_getaffinity(0))


def given(option: int | None) -> tuple[int | None, str]:
    """The CPUs this job was given: `dear --threads`, else OMP_NUM_THREADS (Snakemake and Slurm set it), else none."""
    if option is not None:
        return option, "dear --threads"
    value = os.environ.get("OMP_NUM_THREADS", "")
    if value.isdigit() and int(value) >= 1:
        return int(value), "OMP_NUM_THREADS"
    return None, ""


def budget(params, stage: str, option: int | None = None) -> Budget:
    """How a job splits its CPUs between its own threads and its worker processes."""
    cpus, source = given(option)
    if cpus is None:
        asked = wanted(params.model_dump(include={"data", "backbone", "compute"}), stage)
        cpus, source = min(asked, available()), "the config (default)"
    if stage == "prepare":  # the main process waits while the checkers work
        return Budget(cpus, 1, min(params.data.workers, cpus), source, params.data.workers)
    if stage == "backbone":
        return Budget(cpus, params.backbone.threads, 0, source)
    if stage in MODEL_STAGES:
        processes = min(params.compute.workers, cpus - 1)
        return Budget(cpus, cpus - processes, processes, source, params.compute.workers)
    return Budget(cpus, cpus, 0, source)


def apply(found: Budget, stage: str) -> None:
    """Hold this process to `found`: torch's and every loaded math library's threads, and its children's."""
    global _budget
    _budget = found
    for name in ENV:
        _saved_env.setdefault(name, os.environ.get(name))
        os.environ[name] = str(found.threads)  # worker processes and libraries loaded from now on
    if "torch" in sys.modules:
        _saved_threads[:] = [sys.modules["torch"].get_num_threads()]
        sys.modules["torch"].set_num_threads(found.threads)
    from threadpoolctl import threadpool_limits

    threadpool_limits(limits=found.threads)  # numpy's OpenBLAS and any OpenMP already loaded
    from dear.compute import blas

    if blas.installed():  # compute.reproducible's matrix products: OpenBLAS on one thread (dear.compute.blas)
        blas.one_thread()
    extra = f" + {found.processes} worker process(es)" if found.processes else ""
    log.debug("%s: %d thread(s)%s, of %d CPU(s) from %s", stage, found.threads, extra, found.cpus, found.source)
    if found.processes < found.asked:
        log.warning("%s: %d worker process(es) instead of the config's %d: this job has %d CPU(s) (from %s)", stage,
                    found.processes, found.asked, found.cpus, found.source)
    if stage == "backbone" and found.threads > found.cpus:
        log.warning("backbone.threads is %d but this job was given %d CPU(s): pretraining runs %d threads anyway, "
                    "since the weights depend on the thread count (set backbone.threads to change them)",
                    found.threads, found.cpus, found.threads)


def release() -> None:
    """The stage is over: no budget, the environment as before (a later command in this process, a test's)."""
    global _budget
    _budget = None
    for name, value in _saved_env.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value
    _saved_env.clear()
    if _saved_threads:
        sys.modules["torch"].set_num_threads(_saved_threads.pop())


def processes(configured: int) -> int:
    """Worker processes a stage may start where its config asks for `configured` (all of them outside a job)."""
    return configured if _budget is None else min(configured, _budget.processes)
