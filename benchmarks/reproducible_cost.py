"""What `compute.reproducible` costs on CPU: the demo's steps with the setting on against off, in the same run.

The setting is process-wide (the caps are read when torch loads), so each side
runs in a fresh process, and the sides alternate round after round so that
machine load hits them alike. Sides: `off` (the machine's fastest kernels,
fp32 pretraining as the demo's params say), `on` (the setting: ATen at AVX2,
the matrix products on numpy's OpenBLAS at its Haswell kernels (dear.compute.blas), the
rest of MKL on its COMPATIBLE branch, oneDNN off), `compatible` (the setting with
every product on MKL's COMPATIBLE branch: the other route that gives the same
bytes on Intel and AMD) and `avx2` (the setting before 2026-12-05:
MKL_CBWR=AVX2,STRICT, the same bytes on Intel CPUs only; on another maker MKL
runs AUTO, as the printed branch says). Measured, each the median of its steps:

- pretrain: a backbone pretraining step as `dear backbone` runs it (dear-world, batch 64, fp32), on one
  thread and on backbone.threads (2: the demo's);
- train: a training step of DeAR and of CoOp on the dear-world model (batch 8, 10 classes);
- encode: image features of a batch of 64 (no grad), as fuse and evaluate compute them.

Each on one thread, timed in CPU seconds of the process (`time.process_time`):
on a machine that other jobs share, wall time also counts their load (and two
OpenMP threads that wait for a busy core spin), CPU time counts the step's own work.

    python benchmarks/reproducible_cost.py --rounds 3
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
SIDES = {"off": (False, None), "on": (True, None), "compatible": (True, None), "avx2": (True, "AVX2,STRICT")}
# (reproducible, MKL_CBWR instead of the setting's); `compatible`: the setting without dear.compute.blas


def child(side: str, steps: int) -> dict:
    """This process under one side: the caps first (before torch), then each measurement's median seconds."""
    sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks")]
    from dear.compute import reproducible

    on, cbwr = SIDES[side]
    reproducible.apply(on)
    if cbwr:
        os.environ["MKL_CBWR"] = cbwr
    import torch

    reproducible.configure_torch(on)
    if side in ("compatible", "avx2"):
        from dear.compute import blas

        blas.remove()  # every product on MKL
    from threadpoolctl import threadpool_limits

    import train_step  # noqa: E402  (benchmarks/)
    from dear.data import world
    from dear.model import clip, pretrain
    from dear.config.params import load_params

    params = load_params(ROOT / "params.yaml")
    arch = clip.resolve_arch(params.model.arch)
    torch.set_num_threads(1)
    threadpool_limits(1)  # numpy's OpenBLAS: one thread, as a job of one thread sets it (dear.compute.cpus)
    model, tokenizer = train_step.backbone(arch)
    mean, std = clip.normalizer(model)
    images, captions = world.corpus_batch(params.world, params.backbone, 0, set())
    pixels = (torch.from_numpy(images).permute(0, 3, 1, 2).float() / 255.0 - mean) / std
    tokens = tokenizer(captions)
    optimizer = pretrain._optimizer(model.train(), params.backbone)
    step = lambda: pretrain.contrastive_step(model, optimizer, pixels, tokens, "fp32", pretrain.ATTENTION)  # noqa: E731
    result = {"pretrain": _median(step, steps)}
    torch.set_num_threads(params.backbone.threads)  # numpy's OpenBLAS stays on one (dear.compute.blas), as in a job
    result[f"pretrain_{params.backbone.threads}_threads"] = _median(step, steps, time.perf_counter)
    torch.set_num_threads(1)
    model, tokenizer = train_step.backbone(arch)
    for method in ("dear", "coop"):
        bench = train_step.Bench(model, tokenizer, method, 10, 8, "cpu")
        result[f"train_{method}"] = _median(bench.step, steps)
    model.eval()
    with torch.no_grad():
        result["encode"] = _median(lambda: model.encode_image(pixels), steps)
    result["aten"] = torch.backends.cpu.get_cpu_capability()
    result["mkl"] = reproducible.mkl_branch(torch)
    return result


def _median(function, steps: int, clock=time.process_time) -> float:
    """Median seconds of `steps` calls after a warm-up one: CPU time, or wall time for the threaded step (CPU time
    would add up both threads)."""
    times = []
    for _ in range(steps + 1):  # the first: warm-up
        start = clock()
        function()
        times.append(clock() - start)
    return statistics.median(times[1:])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3, help="processes per side, alternated")
    parser.add_argument("--steps", type=int, default=8, help="timed steps of each measurement per process")
    parser.add_argument("--side", choices=list(SIDES), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.side:
        print(json.dumps(child(args.side, args.steps)))
        return
    runs = {side: [] for side in SIDES}
    env = {key: value for key, value in os.environ.items() if key not in ("ATEN_CPU_CAPABILITY", "ONEDNN_MAX_CPU_ISA",
                                                                           "MKL_CBWR", "MKL_ENABLE_INSTRUCTIONS")}
    for _ in range(args.rounds):
        for side in SIDES:
            out = subprocess.run([sys.executable, __file__, "--side", side, "--steps", str(args.steps)],
                                 capture_output=True, text=True, env={**env, "HF_HUB_OFFLINE": "1"}, check=True)
            runs[side].append(json.loads(out.stdout.strip().splitlines()[-1]))
    medians = {side: {key: statistics.median(run[key] for run in found) for key in found[0] if key not in ("aten", "mkl")}
               for side, found in runs.items()}
    kernels = ", ".join(f"{side} ATen {runs[side][0]['aten']} MKL {runs[side][0]['mkl']}" for side in SIDES)
    print(f"kernels: {kernels}")
    for key in medians["on"]:
        times = {side: medians[side][key] * 1000 for side in SIDES}
        print(f"{key}: " + ", ".join(f"{side} {ms:.0f} ms" + (f" ({ms / times['off']:.2f}x)" if side != "off" else "")
                                     for side, ms in times.items()))


if __name__ == "__main__":
    main()
