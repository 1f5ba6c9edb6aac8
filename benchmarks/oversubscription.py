"""Two stages side by side: threads as each job is given them vs every job taking all the cores.

Before threads were declared, a stage run by hand (or by an engine that said
nothing) took torch's default: one thread per core. Two such stages on two
cores run four busy threads on two cores, and torch's OpenMP threads spin
while they wait for each other: each step is then many times slower, not
two. With `threads:` on every rule, Snakemake runs two one-thread jobs on two
cores, and `dear` gives a stage no more threads than its job's CPUs.

Each scenario runs `--steps` embedded-backbone pretraining steps (the demo's
shapes and recipe, `dear backbone`'s step) in one or two processes at once,
and reports the median seconds a step in each process; the ratios are against
one process alone on every core, measured in the same run, scenarios in
turn, `--rounds` times:

    python benchmarks/oversubscription.py [--steps 8 --rounds 2]

- alone, all cores                  one stage, nothing beside it (the baseline)
- two stages, all cores each        before: the default of torch in each (oversubscribed)
- two stages, cores split           after: the threads each job was given (1 each on 2 cores)
- two stages, all cores, passive    before, with OMP_WAIT_POLICY=passive (threads sleep instead of spin)
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks")]


def worker(steps: int) -> None:
    """Run `steps` pretraining steps after three warm-ups (the first bf16 steps on CPU take seconds); print their
    seconds as JSON."""
    import torch

    torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))
    import pretrain_step

    step = pretrain_step.steppers(batches=2)["dear"]
    for _ in range(3):
        step()
    times = []
    for _ in range(steps):
        start = time.perf_counter()
        step()
        times.append(time.perf_counter() - start)
    print(json.dumps(times))


def scenario(processes: int, threads: int, steps: int, passive: bool = False) -> list[float]:
    """Median seconds a step of each of `processes` workers run at once with `threads` threads each."""
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads), "HF_HUB_OFFLINE": "1"}
    env.pop("OMP_WAIT_POLICY", None)
    if passive:
        env["OMP_WAIT_POLICY"] = "passive"
    running = [subprocess.Popen([sys.executable, __file__, "--worker", "--steps", str(steps)], env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
               for _ in range(processes)]
    medians = []
    for process in running:
        out, _ = process.communicate()
        if process.returncode:
            sys.exit(f"a worker failed (exit {process.returncode})")
        medians.append(statistics.median(json.loads(out.strip().splitlines()[-1])))
    return medians


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        return worker(args.steps)
    cores = len(os.sched_getaffinity(0))
    split = max(1, cores // 2)
    scenarios = {
        "alone, all cores": (1, cores, False),
        "two stages, all cores each (before)": (2, cores, False),
        "two stages, cores split (after)": (2, split, False),
        "two stages, all cores each, OMP_WAIT_POLICY=passive": (2, cores, True),
    }
    seconds: dict[str, list[float]] = {name: [] for name in scenarios}
    for _ in range(args.rounds):
        for name, (processes, threads, passive) in scenarios.items():
            seconds[name] += scenario(processes, threads, args.steps, passive)
    base = statistics.median(seconds["alone, all cores"])
    print(f"Embedded backbone pretraining steps (batch 64), {cores} cores, {args.steps} steps x {args.rounds} rounds, "
          f"python {sys.version.split()[0]}\n")
    print("| scenario | threads a process | s a step (median) | / alone |")
    print("| --- | --- | --- | --- |")
    for name, (processes, threads, _) in scenarios.items():
        median = statistics.median(seconds[name])
        print(f"| {name} | {threads} | {median:.3f} | {median / base:.2f}x |")


if __name__ == "__main__":
    main()
