"""What `compute.reproducible` costs on CPU: the demo's steps with the setting on against off, in the same run.

The setting is process-wide (the caps are read when torch loads), so each side
runs in a fresh process, and the sides alternate round after round so that
machine load hits them alike. Measured, each the median of its steps:

- pretrain: a backbone pretraining step as `dear backbone` runs it (dear-world,
  batch 64): today's demo (off, bf16 autocast), off in fp32, on (fp32);
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
SIDES = {"today": (False, "bf16"), "off": (False, "fp32"), "on": (True, "fp32")}  # (reproducible, pretraining precision)


def child(side: str, steps: int) -> dict:
    """This process under one side: the caps first (before torch), then each measurement's median seconds."""
    sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks")]
    from dear import reproducible

    on, precision = SIDES[side]
    reproducible.apply(on)
    import torch

    reproducible.configure_torch(on)
    import train_step  # noqa: E402  (benchmarks/)
    from dear.data import world
    from dear.model import clip, pretrain
    from dear.params import load_params

    params = load_params(ROOT / "params.yaml")
    arch = clip.resolve_arch(params.model.arch)
    torch.set_num_threads(1)
    model, tokenizer = train_step.backbone(arch)
    mean, std = clip.normalizer(model)
    images, captions = world.corpus_batch(params.world, params.backbone, 0, set())
    pixels = (torch.from_numpy(images).permute(0, 3, 1, 2).float() / 255.0 - mean) / std
    tokens = tokenizer(captions)
    optimizer = pretrain._optimizer(model.train(), params.backbone)
    result = {"pretrain": _median(lambda: pretrain.contrastive_step(model, optimizer, pixels, tokens, precision,
                                                                     pretrain.ATTENTION), steps)}
    model, tokenizer = train_step.backbone(arch)
    for method in ("dear", "coop"):
        bench = train_step.Bench(model, tokenizer, method, 10, 8, "cpu")
        result[f"train_{method}"] = _median(bench.step, steps)
    model.eval()
    with torch.no_grad():
        result["encode"] = _median(lambda: model.encode_image(pixels), steps)
    result["aten"] = torch.backends.cpu.get_cpu_capability()
    return result


def _median(function, steps: int) -> float:
    times = []
    for _ in range(steps + 1):  # the first: warm-up
        start = time.process_time()
        function()
        times.append(time.process_time() - start)
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
    medians = {side: {key: statistics.median(run[key] for run in found) for key in found[0] if key != "aten"}
               for side, found in runs.items()}
    kernels = ", ".join(f"{side} {runs[side][0]['aten']}" for side in SIDES)
    print(f"ATen kernels: {kernels}")
    for key in medians["on"]:
        on, off, today = (medians[side][key] * 1000 for side in ("on", "off", "today"))
        print(f"{key}: on {on:.0f} ms, off {off:.0f} ms (on/off {on / off:.2f}x), today's demo {today:.0f} ms "
              f"(on/today {on / today:.2f}x)")


if __name__ == "__main__":
    main()
