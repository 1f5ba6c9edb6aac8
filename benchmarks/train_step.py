"""Training-step cost of each method against CoOp's, of DeAR (role masks) against all-Mixed DeAR, and its growth with classes.

Also any other registered method (`--methods`) against CoOp: step time and trainable parameters
(Tip-Adapter-F with a cache of 16 shots of every class, made from the batch's views).

Also DeAR while its tokens fade in (`train.fade_in_epochs`: the first epoch, weight 0.5
here) against DeAR after it. Every method steps the same batch (CoCoOp's recipe trains
at batch 1: at an equal batch the ratio is its cost per image).

Every configuration runs the trainer's own step (`dear.train.trainer.loss_of_batch` + `update`) on
the same random-weight model and the same random batch, in a fresh process so that its peak
memory (max RSS on CPU, max allocated on CUDA) is its own. Printed: median seconds per step,
steps/s, the ratio to the baseline measured in the same run, trainable parameter counts, peak
memory and the memory the step adds on top of the loaded model.

    python benchmarks/train_step.py                       # ViT-B-16, batch 4, CPU
    python benchmarks/train_step.py --arch dear-world --batch 8 --classes 10,100,1000
    python benchmarks/train_step.py --arch dear-world --methods dear,coop,maple --set maple.prompt_depth=3
    python benchmarks/train_step.py --methods mmrl,mmrlpp,tac --classes 100 --set tac.vision_depth=12 \
        --set tac.text_depth=12                           # the 2026 methods at their authors' layers, ViT-B-16
    python benchmarks/train_step.py --methods tip_adapter_f,clip_lora,mmrlpp --classes 100 --shots 16
                                                          # few-shot recipes (CoOp's: 16 context tokens)
    python benchmarks/train_step.py --methods tac --views 4 --classes 100 --coop-classes 100
                                                          # TAC's 4 views + img0 against its one view
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


class Bench:
    """One method's adapted model, optimizer and fixed batch on a shared frozen CLIP; `step()` runs one training step."""

    def __init__(self, model, tokenizer, method_name: str, classes: int, batch: int, device: str,
                 changes: dict | None = None, shots: int | None = None):
        import torch

        from types import SimpleNamespace

        from dear.compute import device as devices
        from dear.methods import create
        from dear.methods.recipe import resolve
        from dear.model import internals
        from dear.config.params import load_params
        from dear.train.data import Schedule
        from dear.train.trainer import make_loop

        params = load_params(ROOT / "params.yaml")
        tower = internals.vision_tower(model)
        recipes = {**params.train.recipes, **{name: {**(params.train.recipes.get(name) or {}), **keys}
                                              for name, keys in (changes or {}).items()}}
        recipe = resolve(recipes, method_name, "world_objects", "few_shot" if shots else "base_to_novel", shots)
        roles = bench_roles(tower.layers, tower.heads) if method_name == "dear" else None
        backbone = SimpleNamespace(model=model, tokenizer=tokenizer)
        self.model = create(method_name, backbone, recipe, roles, seed=1).to(device).train()
        size = internals.image_size(model)
        generator = torch.Generator().manual_seed(0)
        self.images = torch.randn(batch, 3, size, size, generator=generator).to(device)
        self.labels = (torch.arange(batch) % classes).to(device)
        k, img0 = recipe.get("k_transforms", 1), recipe.get("return_img0", False)
        if k > 1 or img0:  # TAC's loader: k views of each image (k B rows), the frozen feature of the unaugmented one
            from dear.train.data import Views

            views = torch.randn(k * batch, 3, size, size, generator=generator).to(device)
            self.images = Views(views, self.images if img0 else None, k)
            self.labels = self.labels.repeat(k)
        if self.model.init_passes():  # Tip-Adapter-F: a 16-shot cache of `classes` classes (the batch's views, repeated)
            with torch.no_grad():
                prefix = self.model.image_prefix(self.images)
            rows = torch.arange(CACHE_SHOTS * classes, device=device)
            self.model.init_from_passes(iter([(0, prefix[rows % batch], rows % classes)]))
        self.trainable = sum(p.numel() for p in self.model.parameters() if p.requires_grad)
        self.names = [f"{WORDS[i % len(WORDS)]} {WORDS[(i // len(WORDS)) % len(WORDS)]} {i}" for i in range(classes)]
        schedule = Schedule(n=batch * 1000, batch_size=batch, epochs=1, seed=1)
        self.precision = devices.Precision(recipe.precision, torch.device(device))
        self.loop = make_loop(self.model, recipe, schedule, self.precision)
        self.device = device

    def step(self) -> float:
        """Seconds of one full training step (forward, loss, backward, optimizer)."""
        from dear.train.trainer import step_of_batch, update

        _sync(self.device)
        start = time.perf_counter()
        result = step_of_batch(self.model, self.images, self.labels, self.names, self.precision)
        if self.trainable:
            update(self.loop, result.total)
        _sync(self.device)
        return time.perf_counter() - start


def backbone(arch: str):
    import open_clip
    import torch

    import dear.model.clip  # noqa: F401  (registers the embedded architectures)

    torch.manual_seed(0)
    return open_clip.create_model(arch, pretrained=None), open_clip.get_tokenizer(arch)


# CoOp: the baseline (TAC's first step also clusters the classes: the warm-up step, untimed)
METHODS = ("dear", "dear_nomask", "coop", "cocoop", "kgcoop", "maple", "promptsrc", "mmrl", "mmrlpp", "tac",
           "tip_adapter_f", "clip_lora")
CACHE_SHOTS = 16  # Tip-Adapter-F's cache in the benchmark: 16 shots of every class


def interleaved(arch: str, classes: int, batch: int, rounds: int, warmup: int, device: str,
                methods=METHODS, changes: dict | None = None, shots: int | None = None, views: int | None = None) -> dict:
    """`methods` (and dear while fading in, with dear) on one frozen model, stepped in turn so machine load hits all
    alike; `changes`: {recipe: {key: value}} on top of params.yaml's recipes; `shots`: each method's few-shot
    recipe at K shots instead of its base-to-novel one; `views`: also each method with a `k_transforms` key at
    that many views of each image and the unaugmented image's frozen feature (TAC's 4 and img0), as `name@K`."""
    import torch

    from dear.methods import entry
    from dear.methods.recipe import load

    load_recipe = lambda name: load(entry(name).recipe)  # noqa: E731

    model, tokenizer = backbone(arch)
    benches = {name: Bench(model, tokenizer, name, classes, batch, device, changes, shots)
               for name in dict.fromkeys([*methods, "coop"])}  # CoOp: the baseline of every ratio
    for name in [name for name in methods if views and "k_transforms" in load_recipe(name).keys]:
        more = {**(changes or {}), name: {**(changes or {}).get(name, {}), "k_transforms": views, "return_img0": True}}
        benches[f"{name}@{views}"] = Bench(model, tokenizer, name, classes, batch, device, more, shots)
    if "dear" in methods:
        benches["dear_fading"] = Bench(model, tokenizer, "dear", classes, batch, device, changes, shots)
        benches["dear_fading"].model.fade = 0.5
    times = {name: [] for name in benches}
    for index in range(warmup + rounds):
        for name, bench in benches.items():
            seconds = bench.step()
            if index >= warmup:
                times[name].append(seconds)
    return {name: {"median_s": statistics.median(t), "min_s": min(t), "trainable": benches[name].trainable}
            for name, t in times.items()} | {"threads": torch.get_num_threads()}


def one(arch: str, method_name: str, classes: int, batch: int, steps: int, warmup: int, device: str) -> dict:
    """One configuration alone in this process: median step time and memory."""
    import torch

    model, tokenizer = backbone(arch)
    bench = Bench(model, tokenizer, method_name, classes, batch, device)
    if device == "cuda":
        torch.cuda.reset_peak_memory_stats()
    before = _memory_mb(device)
    times = [bench.step() for _ in range(warmup + steps)][warmup:]
    peak = _memory_mb(device, peak=True)
    step = statistics.median(times)
    return {"method": method_name, "classes": classes, "step_s": step, "steps_per_s": 1.0 / step,
            "trainable": bench.trainable, "peak_mb": peak, "step_mb": peak - before}


WORDS = ["red", "fox", "maple", "harbor", "violin", "granite", "comet", "lantern", "orchid", "falcon", "tundra", "quartz"]


def bench_roles(layers: int, heads: int) -> list:
    """Roles for the last four layers: per layer a mix of the five core attributes, generalization and mixed heads."""
    from dear.model.masks import HeadRole

    kinds = [("attribute", c) for c in ("color", "shape", "texture", "object", "position")]
    kinds += [("generalization", "other")] * 4 + [("mixed", None)] * 3
    return [HeadRole(layer, head, *kinds[(head + layer) % len(kinds)])
            for layer in range(max(1, layers - 3), layers + 1) for head in range(heads)]


def _sync(device: str) -> None:
    if device == "cuda":
        import torch

        torch.cuda.synchronize()


def _memory_mb(device: str, peak: bool = False) -> float:
    import torch

    if device == "cuda":
        return (torch.cuda.max_memory_allocated() if peak else torch.cuda.memory_allocated()) / 2**20
    if peak:
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    with open("/proc/self/statm") as handle:
        return int(handle.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def spawn(args, method_name: str, classes: int) -> dict:
    command = [sys.executable, __file__, "--one", f"{method_name}:{classes}", "--arch", args.arch, "--batch", str(args.batch),
               "--steps", str(args.steps), "--warmup", str(args.warmup), "--device", args.device]
    result = subprocess.run(command, capture_output=True, text=True, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    if result.returncode != 0:
        sys.exit(f"{method_name} at {classes} classes failed:\n{result.stderr[-3000:]}")
    return json.loads(result.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--arch", default="ViT-B-16", help="open_clip architecture (random weights)")
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds of the methods (ratio part)")
    parser.add_argument("--steps", type=int, default=2, help="measured steps per scaling configuration")
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--classes", default="10,100,1000", help="class counts of the scaling rows (first = ratio part)")
    parser.add_argument("--coop-classes", default="10,100", help="class counts of CoOp's scaling rows")
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--methods", default=",".join(METHODS), help="methods of the ratio part (CoOp: the baseline)")
    parser.add_argument("--set", action="append", default=[], metavar="RECIPE.KEY=VALUE",
                        help="change a recipe of params.yaml for this run (a YAML value), e.g. maple.prompt_depth=3")
    parser.add_argument("--shots", type=int, help="the ratio part with each method's few-shot recipe at K shots "
                        "(Tip-Adapter-F and CLIP-LoRA train in that protocol only)")
    parser.add_argument("--views", type=int, help="also each method with a k_transforms key at K views of each image "
                        "and img0's frozen feature (TAC's 4), against its one view")
    parser.add_argument("--one", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        name, classes = args.one.split(":")
        print(json.dumps(one(args.arch, name, int(classes), args.batch, args.steps, args.warmup, args.device)))
        return
    counts = [int(c) for c in args.classes.split(",")]
    methods = args.methods.split(",")
    ratios = interleaved(args.arch, counts[0], args.batch, args.rounds, args.warmup, args.device, methods,
                         recipe_changes(args.set), args.shots, args.views)
    scaling = [spawn(args, "dear", c) for c in counts] + [spawn(args, "coop", int(c)) for c in args.coop_classes.split(",")]
    report(args, counts[0], ratios, scaling)


def recipe_changes(settings: list[str]) -> dict:
    """["maple.prompt_depth=3", ...] -> {"maple": {"prompt_depth": 3}}."""
    import yaml

    changes: dict = {}
    for setting in settings:
        key, _, value = setting.partition("=")
        recipe, _, name = key.partition(".")
        changes.setdefault(recipe, {})[name] = yaml.safe_load(value)
    return changes


def report(args, base: int, ratios: dict, scaling: list[dict]) -> None:
    print(f"{args.arch}, batch {args.batch}, {args.device}, {ratios['threads']} threads")
    recipes = f"few-shot recipes at {args.shots} shots" if args.shots else "base-to-novel recipes"
    print(f"-- same model, same batch, {base} classes, {recipes}, {args.rounds} interleaved rounds after {args.warmup} warm-up")
    methods = [name for name in ratios if name not in ("threads", "dear_fading")]
    coop = ratios["coop"]
    print(f"{'method':<12} {'median s':>9} {'min s':>8} {'steps/s':>8} {'trainable':>11} {'step / CoOp':>12} "
          f"{'params / CoOp':>14}")
    for name in methods:
        r = ratios[name]
        print(f"{name:<12} {r['median_s']:>9.3f} {r['min_s']:>8.3f} {1 / r['median_s']:>8.2f} {r['trainable']:>11,} "
              f"{r['median_s'] / coop['median_s']:>11.2f}x {r['trainable'] / coop['trainable']:>13.2f}x")
    if "dear" in ratios and "dear_nomask" in ratios:
        masked, mixed, fading = ratios["dear"], ratios["dear_nomask"], ratios["dear_fading"]
        print(f"DeAR masked / all-Mixed: {masked['median_s'] / mixed['median_s']:.2f}x median, "
              f"{masked['min_s'] / mixed['min_s']:.2f}x min (target <= 1.25x)")
        print(f"DeAR masked / CoOp:      {masked['median_s'] / coop['median_s']:.2f}x median, "
              f"{masked['min_s'] / coop['min_s']:.2f}x min")
        print(f"DeAR fading in / after:  {fading['median_s'] / masked['median_s']:.2f}x median, "
              f"{fading['min_s'] / masked['min_s']:.2f}x min (the first epoch only)")
    for name in [name for name in methods if "@" in name]:
        one_view = ratios[name.split("@")[0]]
        print(f"{name.split('@')[0]} at {name.split('@')[1]} views + img0 / one view: "
              f"{ratios[name]['median_s'] / one_view['median_s']:.2f}x median, "
              f"{ratios[name]['min_s'] / one_view['min_s']:.2f}x min")
    print(f"-- one process per row: median of {args.steps} steps after {args.warmup} warm-up; memory = peak, and above the loaded model")
    print(f"{'method':<12} {'classes':>7} {'s/step':>8} {'steps/s':>8} {'peak MB':>8} {'step MB':>8}")
    for r in scaling:
        print(f"{r['method']:<12} {r['classes']:>7} {r['step_s']:>8.3f} {r['steps_per_s']:>8.2f} {r['peak_mb']:>8.0f} {r['step_mb']:>8.0f}")


if __name__ == "__main__":
    main()
