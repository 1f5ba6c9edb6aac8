"""Backbone pretraining step: as `dear backbone` runs it vs the plain recipe, on the same batches.

The plain recipe is torch's defaults: AdamW's per-tensor loop and the attention
kernel torch picks (flash attention on CPU). `dear` runs the fused AdamW and the
math attention kernel on CPU, torch's own kernels on CUDA (dear/model/pretrain.py).
Both start from the same random dear-world model and see the same corpus batches,
stepped in turn.

    python benchmarks/pretrain_step.py --repeats 10
    python benchmarks/pretrain_step.py --device cuda --repeats 20   # benchmarks/gpu.sh
"""

from __future__ import annotations

import argparse
import copy
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks")]

from timing import interleave  # noqa: E402


def steppers(batches: int = 4, device: str = "cpu"):
    """{name: zero-argument step function} for the plain recipe and dear's, each on its own model copy."""
    import open_clip
    import torch
    from torch.nn.attention import SDPBackend

    from dear.data import world
    from dear.model import clip, pretrain
    from dear.config.params import load_params

    params = load_params(ROOT / "params.yaml")
    arch = clip.resolve_arch(params.model.arch)
    tokenizer = clip.tokenizer(arch)
    torch.manual_seed(0)
    template = open_clip.create_model(arch, pretrained=None)
    mean, std = clip.normalizer(template)
    data = []
    for step in range(batches):
        images, captions = world.corpus_batch(params.world, params.backbone, step, set())
        pixels = (torch.from_numpy(images).permute(0, 3, 1, 2).float() / 255.0 - mean) / std
        data.append((pixels.to(device), tokenizer(captions).to(device)))
    # as `dear backbone` runs: bf16 autocast on CPU per backbone.precision, on CUDA per compute.precision
    precision = params.backbone.precision if device == "cpu" else params.compute.precision

    def stepper(fast: bool):
        model = copy.deepcopy(template).to(device).train()
        if fast:
            attention = pretrain.ATTENTION if device == "cpu" else pretrain.ANY_ATTENTION
            optimizer = pretrain._optimizer(model, params.backbone)
        else:
            optimizer = torch.optim.AdamW(model.parameters(), lr=params.backbone.lr, foreach=False)
            attention = [SDPBackend.FLASH_ATTENTION, SDPBackend.MATH]  # torch's own pick on CPU: flash
            if device != "cpu":
                attention = pretrain.ANY_ATTENTION
        count = [0]

        def step() -> None:
            pixels, tokens = data[count[0] % len(data)]
            count[0] += 1
            pretrain.contrastive_step(model, optimizer, pixels, tokens, precision, attention)
            if device != "cpu":
                torch.cuda.synchronize()

        return step

    return {"plain": stepper(False), "dear": stepper(True)}


def measure(repeats: int, device: str = "cpu") -> dict:
    """Median seconds per step of each recipe, interleaved after one warm-up step each."""
    import torch

    torch.set_num_threads(2)
    median = interleave(steppers(device=device), repeats)
    return {**median, "ratio": median["dear"] / median["plain"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    args = parser.parse_args()
    result = measure(args.repeats, args.device)
    where = "2 threads" if args.device == "cpu" else "cuda"
    print(f"pretraining step, batch 64, {where}: dear {result['dear'] * 1000:.0f} ms, "
          f"plain {result['plain'] * 1000:.0f} ms, ratio {result['ratio']:.2f}x")


if __name__ == "__main__":
    main()
