"""The benchmark suite: one Markdown table of ratios, every pair measured in this run on this machine.

    python benchmarks/run.py                 # dear-world (the embedded backbone's shape), CPU
    python benchmarks/run.py --arch ViT-B-16 --batch 4 --images 64

Rows (goal in brackets):
- backbone pretraining step / the same step on torch's default AdamW and attention kernel
- profile pass / plain encode_image on the same images and model            [<= 1.5]
- DeAR step with role masks / the same step with every head Mixed            [<= 1.25]
- DeAR, CoCoOp and KgCoOp step / CoOp step (the same batch), and their trainable parameters
- evaluation throughput (dear evaluate's image path) / plain encode_image    [>= 0.9]
- a later seed's evaluation (the first seed's frozen image blocks kept) / the first seed's [< 1]
- DeAR step time and memory at 10, 100 and 1000 classes
- no-op `dvc repro` and `snakemake` on the prepare fan-out (the demo's whole graph: benchmarks/dvc_noop.py) [<= 3 s]
- a job's overheads: a stage's imports, a later seed's backbone load, the masked attention kernel (benchmarks/job_overhead.py)
Each timing is the median of interleaved repeats, so machine load hits both sides alike.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import tempfile
import time

import yaml
from datetime import date
from pathlib import Path
from types import SimpleNamespace

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks")]
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("DVC_NO_ANALYTICS", "1")

import pretrain_step  # noqa: E402
import job_overhead  # noqa: E402
import profile_speed  # noqa: E402
import train_step  # noqa: E402
from timing import interleave  # noqa: E402


def profile_ratio(args) -> dict:
    model, size = profile_speed.make_model(args.arch)
    options = SimpleNamespace(images=args.images, batch=args.batch, layers=4)
    median = interleave({"plain": lambda: profile_speed.plain_pass(model, options, size),
                         "profile": lambda: profile_speed.profile_pass(model, options, size)}, args.repeats)
    return {"ratio": median["profile"] / median["plain"], "images_per_s": args.images / median["profile"]}


def evaluation_ratio(args) -> dict:
    """dear evaluate's path (PNG files -> test transform -> Adapted image features) vs encode_image on the same loader."""
    import numpy as np
    import torch
    from PIL import Image

    from types import SimpleNamespace

    from dear.compute import device as devices
    from dear.scoring import evaluation
    from dear.methods import create
    from dear.config.params import load_params

    params = load_params(ROOT / "params.yaml")
    model, size = profile_speed.make_model(args.arch)
    tokenizer = train_step.backbone(args.arch)[1]
    backbone = SimpleNamespace(model=model, tokenizer=tokenizer)

    def method(name):
        return create(name, backbone, params.train.recipe(name, "world_objects", "base_to_novel")).eval()

    adapted = method("zeroshot")
    folder = Path(tempfile.mkdtemp(prefix="dear-bench-"))
    rng = np.random.default_rng(0)
    paths = []
    for index in range(args.images):
        paths.append(str(folder / f"{index}.png"))
        Image.fromarray(rng.integers(0, 256, (size, size, 3), dtype=np.uint8)).save(paths[-1])
    images = evaluation.ImageSet(paths=paths, labels=[0] * len(paths), classnames=["x"])
    transform = evaluation.eval_transform(adapted)
    precision = devices.Precision("fp32", torch.device("cpu"))

    @torch.no_grad()
    def plain():
        loader = torch.utils.data.DataLoader(evaluation._Images(paths, transform), batch_size=args.batch)
        for pixels in loader:
            model.encode_image(pixels)

    median = interleave({"plain": plain, "evaluate": lambda: evaluation.encode_images(
        adapted, images, transform, args.batch, 0, precision, "bench")}, args.repeats)
    return {"ratio": median["plain"] / median["evaluate"], "images_per_s": args.images / median["evaluate"],
            "reuse": {name: reuse_ratio(method(name), params, images, transform, precision, args)
                      for name in ("zeroshot", "dear_nomask")}}


def reuse_ratio(adapted, params, images, transform, precision, args) -> float:
    """A later seed's evaluation (frozen blocks kept from the first seed) / the first seed's, same images."""
    from dear.scoring import evaluation

    reuse = evaluation.Reuse("bench", params.evaluate.reuse_mb)
    def encode(kept=None):
        return evaluation.encode_images(adapted, images, transform, args.batch, 0, precision, "bench", kept)

    encode(reuse)  # the first seed keeps its frozen blocks
    median = interleave({"first": encode, "later": lambda: encode(reuse)}, args.repeats)
    evaluation._kept.clear()
    return median["later"] / median["first"]


def step_ratios(args) -> dict:
    return train_step.interleaved(args.arch, 10, args.step_batch, args.repeats * 2, 1, "cpu")


def scaling(args) -> list[dict]:
    options = SimpleNamespace(arch=args.arch, batch=args.step_batch, steps=3, warmup=1, device="cpu")
    return [train_step.spawn(options, "dear", classes) for classes in (10, 100, 1000)]


def noop_engines() -> dict:
    """Wall time of a second `dvc repro` / `snakemake` with nothing changed, on the prepare fan-out."""
    from dear.pipeline.digest import write_digests
    from tests.engines import make_project, run
    from tests.fake_coop import make_fake_dataset, write_params

    folder = Path(tempfile.mkdtemp(prefix="dear-bench-engines-"))
    for name in ("world_objects", "world_colors"):
        make_fake_dataset(folder / "raw", name, n_classes=4, per_class=3)
    params = write_params(folder / "p.yaml", root=folder / "raw", datasets=["world_objects", "world_colors"],
                          source="coop")  # fake datasets in CoOp's layout, not a world the pipeline draws
    raw = yaml.safe_load(params.read_text())
    raw["profile"].update(svd_rank=8, texts_per_head=5)  # `dear check` (Snakemake's onstart) wants rank < 12 images
    params.write_text(yaml.safe_dump(raw, sort_keys=False))
    project = make_project(folder / "project", params.read_text())
    (project / "world").mkdir()
    (project / "world/card.json").write_text("{}")  # stands in for the world stage's output
    write_digests(project / "world", "world")  # and its digest, which dvc.yaml's prepare reads
    targets = ["data/world_objects/manifest.parquet", "data/world_colors/manifest.parquet"]
    snakemake = [str(Path(sys.executable).parent / "snakemake"), "--cores", "2", *targets]
    dvc = [str(Path(sys.executable).parent / "dvc"), "repro", "--single-item", "prepare"]
    timings = {}
    for name, command in (("snakemake", snakemake), ("dvc", dvc)):
        run(command, project)
        start = time.perf_counter()
        output = run(command, project)
        timings[name] = time.perf_counter() - start
        timings[f"{name}_quiet"] = "Nothing to be done" in output.stdout + output.stderr or "up to date" in output.stdout
    return timings


def table(rows: list[tuple[str, str, str]]) -> str:
    lines = ["| measurement | value | goal |", "| --- | --- | --- |"]
    lines += [f"| {a} | {b} | {c} |" for a, b, c in rows]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--arch", default="dear-world", help="open_clip architecture (random weights)")
    parser.add_argument("--images", type=int, default=512, help="images per throughput measurement")
    parser.add_argument("--batch", type=int, default=64, help="images per forward pass (throughput rows)")
    parser.add_argument("--step-batch", type=int, default=32, help="images per training step")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    import torch

    torch.set_num_threads(min(2, os.cpu_count() or 1))
    pretraining = pretrain_step.measure(args.repeats * 3)
    profile = profile_ratio(args)
    evaluate = evaluation_ratio(args)
    steps = step_ratios(args)
    grow = scaling(args)
    engines = noop_engines()
    overhead = job_overhead.measure(args.arch, args.repeats)
    masked, mixed, coop = (steps[name]["median_s"] for name in ("dear", "dear_nomask", "coop"))
    rows = [
        ("backbone pretraining step / default AdamW + attention kernel", f"{pretraining['ratio']:.2f}x "
         f"({pretraining['dear'] * 1000:.0f} vs {pretraining['plain'] * 1000:.0f} ms)", "-"),
        ("profile pass / plain encode_image", f"{profile['ratio']:.2f}x ({profile['images_per_s']:.0f} img/s)", "<= 1.5"),
        ("DeAR masked step / all-Mixed step", f"{masked / mixed:.2f}x ({1 / masked:.1f} steps/s)", "<= 1.25"),
        ("DeAR step / CoOp step", f"{masked / coop:.2f}x", "-"),
        *[(f"{title} step / CoOp step (same batch{note})", f"{steps[name]['median_s'] / coop:.2f}x", "-")
          for name, title, note in (("cocoop", "CoCoOp", ": its cost per image, its recipe trains at batch 1"),
                                    ("kgcoop", "KgCoOp", ""))],
        ("DeAR step while the tokens fade in / after", f"{steps['dear_fading']['median_s'] / masked:.2f}x", "-"),
        ("evaluation / plain encode_image throughput", f"{evaluate['ratio']:.2f}x ({evaluate['images_per_s']:.0f} img/s)", ">= 0.9"),
        *[(f"evaluation of a later seed / the first ({name}: frozen blocks kept)", f"{ratio:.2f}x", "< 1")
          for name, ratio in evaluate["reuse"].items()],
        *[(f"DeAR step at {row['classes']} classes", f"{row['step_s'] * 1000:.0f} ms, +{row['step_mb']:.0f} MB "
           f"(peak {row['peak_mb']:.0f} MB)", "grows with classes, not depth") for row in grow],
        ("trainable parameters: DeAR / CoCoOp / KgCoOp / CoOp",
         " / ".join(f"{steps[name]['trainable']:,}" for name in ("dear", "cocoop", "kgcoop", "coop")), "-"),
        *[(f"no-op `{name}` (prepare fan-out)", f"{engines[name]:.2f} s, nothing rerun: "
           f"{'yes' if engines[name + '_quiet'] else 'NO'}", "<= 3 s") for name in ("snakemake", "dvc")],
        *job_overhead.rows(overhead),
    ]
    print(f"Measured {date.today()} on {platform.machine()} {os.cpu_count()} cores, {args.arch}, "
          f"torch {torch.__version__}, {torch.get_num_threads()} threads, batch {args.step_batch} per step\n")
    print(table(rows))


if __name__ == "__main__":
    main()
