"""Each method's training step with the text tower's shared positions run once (`towers.text_block`) against every
prompt running all of its positions, in the same process, the two stepped in turn.

Prompts of one class list share their first positions (start-of-text, the context, "a photo of a", inserted
tokens); under the causal mask those never read a class name, so each text block can run them once per class
list (CoCoOp: once per image). The numbers are the same up to float rounding (tests/model/test_internals.py).

    python benchmarks/text_prefix.py                                  # dear-world, 50 classes, batch 32
    python benchmarks/text_prefix.py --arch ViT-B-16 --classes 100 --batch 4 --methods coop,cocoop
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks")]

import train_step  # noqa: E402

METHODS = ("coop", "cocoop", "kgcoop", "maple", "promptsrc", "mmrl", "dear")
DEMO_DEPTHS = {"maple": {"prompt_depth": 3}, "promptsrc": {"vision_depth": 3, "text_depth": 3}}  # params.yaml's


@contextlib.contextmanager
def sharing(on: bool):
    """Shared positions as the code runs them (on), or never (off: no block has enough of them)."""
    from dear.methods import towers

    kept = towers.SHARED_MIN
    towers.SHARED_MIN = kept if on else sys.maxsize
    try:
        yield
    finally:
        towers.SHARED_MIN = kept


def compare(arch: str, classes: int, batch: int, rounds: int, methods=METHODS, changes=None) -> dict:
    """{method: {"shared_s", "plain_s", "ratio"}}: median step seconds of each way, one warm-up round first."""
    model, tokenizer = train_step.backbone(arch)
    benches = {name: train_step.Bench(model, tokenizer, name, classes, batch, "cpu", changes) for name in methods}
    times = {(name, on): [] for name in methods for on in (True, False)}
    for index in range(rounds + 1):
        for name, bench in benches.items():
            for on in (True, False):
                with sharing(on):
                    seconds = bench.step()
                if index:
                    times[(name, on)].append(seconds)
    result = {}
    for name in methods:
        shared, plain = statistics.median(times[(name, True)]), statistics.median(times[(name, False)])
        result[name] = {"shared_s": shared, "plain_s": plain, "ratio": shared / plain}
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--arch", default="dear-world")
    parser.add_argument("--classes", type=int, default=50, help="class names per step (the demo's base classes: 50)")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--methods", default=",".join(METHODS))
    args = parser.parse_args()
    import torch

    result = compare(args.arch, args.classes, args.batch, args.rounds, args.methods.split(","),
                     DEMO_DEPTHS if args.arch == "dear-world" else None)
    print(f"{args.arch}, {args.classes} classes, batch {args.batch}, {torch.get_num_threads()} threads, "
          f"median of {args.rounds} steps each\n")
    print("| method | step, shared positions once | step, every position | ratio |\n| --- | --- | --- | --- |")
    for name, row in result.items():
        print(f"| {name} | {row['shared_s'] * 1e3:.1f} ms | {row['plain_s'] * 1e3:.1f} ms | {row['ratio']:.2f}x |")


if __name__ == "__main__":
    main()
