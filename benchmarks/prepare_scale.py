"""How `dear prepare` scales to an ImageNet-sized folder (1.28 M images) with `verify: exists`.

Builds a synthetic ImageNet layout (CoOp's: images/train/<wnid>/, images/val/<wnid>/,
classnames.txt) whose files are hard links to one tiny JPEG per class, so it
costs directory entries, not disk. Then times, in this one process:
- baseline: a plain single-process walk that `os.stat`s every file;
- listing: `dear.data.datasets.read_dataset` (scandir + sort, no file opened);
- verify: `dear.data.verify.check_images` with verify=exists (header read, width/height);
- the whole stage `dear.stages.prepare.run` (listing + verify + tables + Parquet writes);
- few-shot sampling of the written manifest for each seed.
Prints files/s, seconds, the ratio to the baseline, seconds extrapolated to
1,281,167 images, and peak memory (this process and its workers).

    .venv/bin/python benchmarks/prepare_scale.py            # 100k images (default)
    .venv/bin/python benchmarks/prepare_scale.py --full     # 1.28 M images (~1-2 min to build)
    .venv/bin/python benchmarks/prepare_scale.py --layouts  # ImageFolder vs CoOp's JSON, same 100k files

`--layouts` lays the same files out twice (hard links): as an ImageFolder
(`train/<class>/`, `test/<class>/`, declared under `data.custom`, validation
carved from train) and as a CoOp split JSON (`world_objects`' built-in reader:
train, val and test listed in the file), and times the whole stage on each
with `data.verify: none` (the listing, the carving, the tables; no image is
opened), printing the ratio ImageFolder / JSON.

The files are in the page cache after building, so these are CPU-bound figures;
a cold network file system adds its own latency per file.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import sys
import time
import types
from pathlib import Path

from PIL import Image

from dear.data import datasets, verify
from dear.data.manifest import read_manifest
from dear.config.params import Data
from dear.stages import prepare

IMAGENET_TRAIN, IMAGENET_VAL = 1_281_167, 50_000


def build_layout(root: Path, n_train: int, n_classes: int) -> float:
    """CoOp's ImageNet folders with n_train train images (+ ImageNet's val share); seconds taken."""
    start = time.perf_counter()
    folder = root / "imagenet"
    n_val = max(n_classes, round(n_train * IMAGENET_VAL / IMAGENET_TRAIN))
    lines = []
    for label in range(n_classes):
        wnid = f"n{label:08d}"
        lines.append(f"{wnid} class {label}")
        source = folder / "source" / f"{wnid}.JPEG"
        source.parent.mkdir(parents=True, exist_ok=True)
        Image.new("RGB", (32 + label % 7, 24 + label % 5), (label % 256, 80, 160)).save(source, format="JPEG")
        for split, total in (("train", n_train), ("val", n_val)):
            class_dir = folder / "images" / split / wnid
            class_dir.mkdir(parents=True, exist_ok=True)
            count = total // n_classes + (1 if label < total % n_classes else 0)
            for index in range(count):
                os.link(source, class_dir / f"{wnid}_{index:06d}.JPEG")
    (folder / "classnames.txt").write_text("\n".join(lines) + "\n")
    return time.perf_counter() - start


def baseline_stat_walk(image_root: Path) -> tuple[int, float]:
    start = time.perf_counter()
    count = 0
    for dirpath, _, files in os.walk(image_root):
        for name in files:
            os.stat(os.path.join(dirpath, name))
            count += 1
    return count, time.perf_counter() - start


def timed(function, *args):
    start = time.perf_counter()
    result = function(*args)
    return result, time.perf_counter() - start


def peak_mib() -> tuple[float, float]:
    own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    children = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    return own, children


def build_pair(root: Path, n_files: int, n_classes: int) -> tuple[dict, float]:
    """The same n_files as an ImageFolder (root/folder) and a CoOp JSON dataset (root/world_objects); seconds."""
    import json

    start = time.perf_counter()
    json_dir = root / "world_objects" / "images"
    split = {"train": [], "val": [], "test": []}
    for label in range(n_classes):
        name = f"class_{label:04d}"
        source = root / "source" / f"{name}.png"
        source.parent.mkdir(parents=True, exist_ok=True)
        Image.new("RGB", (8, 8), (label % 256, 80, 160)).save(source)
        count = n_files // n_classes + (1 if label < n_files % n_classes else 0)
        n_test = count // 5
        for index in range(count):
            folder_split = "test" if index < n_test else "train"
            json_split = "test" if index < n_test else "val" if index < 2 * n_test else "train"
            file = f"{name}/{index:06d}.png"
            for target in (root / "folder" / folder_split / file, json_dir / file):
                target.parent.mkdir(parents=True, exist_ok=True)
                os.link(source, target)
            split[json_split].append([file, label, name])
    (root / "world_objects" / "split_zhou_world_objects.json").write_text(json.dumps(split))
    return {"format": "imagefolder", "path": str(root / "folder")}, time.perf_counter() - start


def compare_layouts(args) -> None:
    """prepare of an ImageFolder vs the same files in CoOp's JSON layout, verify none: seconds and their ratio."""
    import logging

    from dear.config.params import CustomDataset

    logging.getLogger("dear").setLevel(logging.WARNING)
    shutil.rmtree(args.dir, ignore_errors=True)
    root = args.dir / "data"
    declared, build_s = build_pair(root, args.files, args.classes)
    data = Data(source="coop", root=str(root), datasets=["world_objects", "mine"], seeds=args.seeds, shots=16,
                val_shots=4, verify="none", skip_bad=False, hash_content=False, workers=args.workers, max_listed=20,
                custom={"mine": CustomDataset(**declared)})
    params = types.SimpleNamespace(data=data, study=types.SimpleNamespace(few_shot_on=None))  # no per-K tables
    baseline_stat_walk(root)  # both layouts' entries in the page cache
    prepare.run(params, prepare.Inputs("world_objects"), prepare.Outputs(args.dir / "warm"))  # imports, first forks
    seconds = {}
    for name in ("world_objects", "mine"):
        _, seconds[name] = timed(prepare.run, params, prepare.Inputs(name), prepare.Outputs(args.dir / "out" / name))
    rows = {name: read_manifest(args.dir / "out" / name).num_rows for name in seconds}
    print(f"{args.files} files, {args.classes} classes, built in {build_s:.1f} s; verify none, {len(args.seeds)} seeds")
    print(f"CoOp JSON layout (world_objects reader): {seconds['world_objects']:.2f} s, {rows['world_objects']} rows")
    print(f"ImageFolder (data.custom, val carved):   {seconds['mine']:.2f} s, {rows['mine']} rows")
    print(f"ratio ImageFolder / JSON: {seconds['mine'] / seconds['world_objects']:.2f}")
    if not args.keep:
        shutil.rmtree(args.dir, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--files", type=int, default=100_000, help="train images (default 100k)")
    parser.add_argument("--full", action="store_true", help="ImageNet's 1,281,167 train images")
    parser.add_argument("--classes", type=int, default=1000)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--dir", type=Path, default=Path("benchmarks/out/prepare_scale"))
    parser.add_argument("--keep", action="store_true", help="keep the synthetic layout afterwards")
    parser.add_argument("--layouts", action="store_true", help="ImageFolder vs CoOp's JSON layout, same --files")
    args = parser.parse_args()
    if args.layouts:
        return compare_layouts(args)
    n_train = IMAGENET_TRAIN if args.full else args.files

    shutil.rmtree(args.dir, ignore_errors=True)
    root = args.dir / "data"
    build_s = build_layout(root, n_train, args.classes)
    data = Data(source="coop", root=str(root), datasets=["imagenet"], seeds=args.seeds, shots=16, val_shots=4,
                verify="exists", skip_bad=False, hash_content=False, workers=args.workers, max_listed=20)
    params = types.SimpleNamespace(data=data, study=types.SimpleNamespace(few_shot_on=None))  # no per-K tables

    n_files, base_s = baseline_stat_walk(root / "imagenet" / "images")
    out = args.dir / "out"
    _, stage_s = timed(prepare.run, params, prepare.Inputs("imagenet"), prepare.Outputs(out))
    stage_peak = peak_mib()  # the stage's own peak: nothing else big was alive yet
    (spec, listing), list_s = timed(datasets.read_dataset, "imagenet", str(root))
    check, verify_s = timed(verify.check_images, listing.paths, "exists", False, args.workers, "imagenet")
    assert not check.reasons, "synthetic files should all be readable"
    del listing, check
    manifest = read_manifest(out)
    fewshot_s = {}
    for seed in args.seeds:
        _, fewshot_s[seed] = timed(prepare.fewshot_table, manifest, spec, 16, 4, seed)

    scale = (IMAGENET_TRAIN + IMAGENET_VAL) / n_files
    print(f"synthetic ImageNet layout: {n_files} files ({n_train} train), {args.classes} classes, "
          f"built in {build_s:.1f} s; workers={args.workers}, {os.cpu_count()} cores")
    print(f"{'step':<34}{'seconds':>9}{'files/s':>11}{'x baseline':>12}{'s at 1.33M':>12}")
    rows = [("baseline: os.walk + os.stat", base_s), ("listing (datasets.read_dataset)", list_s),
            ("verify=exists (header, w/h)", verify_s), ("whole stage (prepare.run)", stage_s)]
    for name, seconds in rows:
        print(f"{name:<34}{seconds:>9.2f}{n_files / seconds:>11.0f}{seconds / base_s:>12.2f}{seconds * scale:>12.1f}")
    for seed, seconds in fewshot_s.items():
        print(f"{f'few-shot sampling, seed {seed}':<34}{seconds:>9.3f}{manifest.num_rows / seconds:>11.0f}"
              f"{seconds / base_s:>12.3f}{seconds * scale:>12.2f}")
    own, children = stage_peak
    print(f"peak RSS of the stage: main process {own:.0f} MiB, largest worker {children:.0f} MiB; "
          f"manifest {os.path.getsize(out / 'manifest.parquet') / 2**20:.1f} MiB")
    if not args.keep:
        shutil.rmtree(args.dir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
