"""What the checks of a dataset of one's own cost: the end-of-file read of `data.verify: exists`, and copies by content.

Two measurements, each on files it generates (in --dir, removed afterwards unless --keep):

`--verify` (default 10,000 images): JPEG photographs' stand-ins (smooth random
content, 3/4 of them 500x375 JPEG at quality 90, 1/4 PNG of the same size),
each checked in this one process (workers 1: the cost per core) four ways:
- header: `data.verify: exists` as the built-in datasets run it (PIL parses the header);
- header + end: as a dataset of one's own runs it (`dear.data.verify`, `ends`):
  the header, then the last bytes, decoding only a file whose end is not its
  format's end;
- PIL's `Image.verify()` after open (what a forum answer suggests);
- decode: `data.verify: decode`.
and which of three damaged copies each way catches (half a JPEG, a JPEG
missing its last 5 bytes, a PNG cut to 300 bytes).

`--duplicates` (default 100,000 files): small JPEGs (64x64, ~2-3 KB, so nearly
every size is shared: the worst case for the first pass) with --planted copies
moved into another split; times `data.verify: exists` with ends (which reads
the sizes) and then `dear.data.content.identical_groups` (sampled then full
hashes of the files whose size another shares), with `data.workers` processes,
and checks that exactly the planted copies are found.

    .venv/bin/python benchmarks/data_checks.py --verify
    .venv/bin/python benchmarks/data_checks.py --duplicates --workers 2

Files are in the page cache after building, so these are CPU-bound figures; a
cold disk or a network file system adds its latency per file (the end read
is one more read of the file's last page).
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import sys
import time
from pathlib import Path

import numpy as np
from PIL import Image

from dear.data import content, verify


def smooth_image(rng: np.random.Generator, width: int, height: int) -> Image.Image:
    """Random low-frequency content scaled up: compresses like a photograph, not like noise."""
    small = rng.integers(0, 256, (max(2, height // 16), max(2, width // 16), 3), dtype=np.uint8)
    return Image.fromarray(small).resize((width, height), Image.Resampling.BICUBIC)


def build_photos(folder: Path, n: int, seed: int = 0) -> list[str]:
    rng = np.random.default_rng(seed)
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for index in range(n):
        suffix = ".png" if index % 4 == 3 else ".jpg"
        path = folder / f"{index:06d}{suffix}"
        image = smooth_image(rng, 500, 375)
        image.save(path, **({"quality": 90} if suffix == ".jpg" else {"compress_level": 1}))
        paths.append(str(path))
    return paths


def damaged(folder: Path, photos: list[str]) -> dict[str, str]:
    """{path: what was done} of three damaged copies of generated photos."""
    jpeg = Path(next(p for p in photos if p.endswith(".jpg"))).read_bytes()
    png = Path(next(p for p in photos if p.endswith(".png"))).read_bytes()
    made = {"half.jpg": ("half a JPEG", jpeg[: len(jpeg) // 2]), "cut5.jpg": ("a JPEG without its last 5 bytes",
                                                                                jpeg[:-5]),
            "cut.png": ("300 bytes of a PNG", png[:300])}
    for name, (_, data) in made.items():
        (folder / name).write_bytes(data)
    return {str(folder / name): what for name, (what, _) in made.items()}


def pil_verify(paths: list[str]) -> set[str]:
    bad = set()
    for path in paths:
        try:
            with Image.open(path) as image:
                image.verify()
        except Exception:  # noqa: BLE001 - any failure is a catch
            bad.add(path)
    return bad


def measure_verify(args) -> None:
    folder = args.dir / "photos"
    start = time.perf_counter()
    photos = build_photos(folder, args.images)
    broken = damaged(folder, photos)
    size_mb = sum(os.path.getsize(p) for p in photos) / 1e6
    print(f"{args.images} images ({size_mb:.0f} MB: 3/4 JPEG, 1/4 PNG, 500x375) built in "
          f"{time.perf_counter() - start:.0f} s")
    ways = {
        "header (exists, built-in datasets)": lambda paths: set(
            paths[r] for r in verify.check_images(paths, "exists", False, 1).reasons),
        "header + end (exists, one's own)": lambda paths: set(
            paths[r] for r in verify.check_images(paths, "exists", False, 1, ends=True).reasons),
        "PIL Image.verify()": pil_verify,
        "decode": lambda paths: set(paths[r] for r in verify.check_images(paths, "decode", False, 1).reasons),
    }
    for name, way in ways.items():
        way(photos[: min(200, len(photos))])  # warm: imports, first reads
        seconds = []
        for _ in range(args.repeat):  # the fastest of the repeats: the machine may be shared
            start = time.perf_counter()
            flagged = way(photos)
            seconds.append(time.perf_counter() - start)
        seconds = min(seconds)
        caught = way(list(broken))
        print(f"{name:36s} {seconds:7.2f} s = {seconds / len(photos) * 1e4:7.2f} s per 10,000 images; "
              f"false alarms {len(flagged)}; catches: {', '.join(broken[p] for p in broken if p in caught) or 'none'}")


def build_small(folder: Path, n: int, planted: int, seed: int = 0) -> tuple[list[str], list[str], set[tuple]]:
    """n small JPEGs in train/ and test/ (4:1), `planted` of the train images copied into test/ under new names."""
    rng = np.random.default_rng(seed)
    paths, splits = [], []
    for index in range(n):
        split = "test" if index % 5 == 4 else "train"
        path = folder / split / f"{index // 1000:03d}" / f"{index:06d}.jpg"
        path.parent.mkdir(parents=True, exist_ok=True)
        smooth_image(rng, 64, 64).save(path, quality=90)
        paths.append(str(path))
        splits.append(split)
    pairs = set()
    train = [i for i, split in enumerate(splits) if split == "train"]
    for number, row in enumerate(random.Random(seed).sample(train, planted)):
        copy = folder / "test" / "copies" / f"copy_{number:05d}.jpg"
        copy.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(paths[row], copy)
        pairs.add((row, len(paths)))
        paths.append(str(copy))
        splits.append("test")
    return paths, splits, pairs


def measure_duplicates(args) -> None:
    start = time.perf_counter()
    paths, _, planted = build_small(args.dir / "small", args.files, args.planted)
    size_mb = sum(os.path.getsize(p) for p in paths) / 1e6
    print(f"{len(paths)} files ({size_mb:.0f} MB, 64x64 JPEG; {args.planted} copied into test/) built in "
          f"{time.perf_counter() - start:.0f} s; data.workers {args.workers}")
    verify.check_images(paths[:200], "exists", False, 1, ends=True)  # warm
    timings: dict[str, list[float]] = {"exists (header)": [], "exists + ends": [], "identical_groups": []}
    for _ in range(args.repeat):  # the fastest of the repeats: the machine may be shared
        start = time.perf_counter()
        verify.check_images(paths, "exists", False, args.workers)
        timings["exists (header)"].append(time.perf_counter() - start)
        start = time.perf_counter()
        check = verify.check_images(paths, "exists", False, args.workers, ends=True)
        timings["exists + ends"].append(time.perf_counter() - start)
        start = time.perf_counter()
        groups = content.identical_groups(paths, check, args.workers)
        timings["identical_groups"].append(time.perf_counter() - start)
    counts = np.unique(check.size, return_counts=True)[1]
    shared = int(counts[counts > 1].sum())
    found = {tuple(group) for group in groups}
    print(f"{shared} of {len(paths)} files share their size with another (candidates of the sampled hash)")
    for name, seconds in timings.items():
        print(f"{name:18s} {min(seconds):6.1f} s ({min(seconds) / len(paths) * 1e5:.1f} s per 100,000 files)")
    print(f"found {len(found)} groups of identical files, the planted ones: {found == planted}")
    if found != planted:
        sys.exit("the copies found are not the planted ones")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--verify", action="store_true", help="time the ways of checking images (default)")
    parser.add_argument("--duplicates", action="store_true", help="time the search for copies by content")
    parser.add_argument("--images", type=int, default=10_000, help="images of --verify")
    parser.add_argument("--files", type=int, default=100_000, help="files of --duplicates")
    parser.add_argument("--planted", type=int, default=100, help="copies planted across splits (--duplicates)")
    parser.add_argument("--workers", type=int, default=1, help="data.workers of --duplicates")
    parser.add_argument("--repeat", type=int, default=2, help="timed runs of each way (the fastest is shown)")
    parser.add_argument("--dir", type=Path, default=Path("/tmp/dear-data-checks"))
    parser.add_argument("--keep", action="store_true", help="keep the generated files")
    args = parser.parse_args()
    shutil.rmtree(args.dir, ignore_errors=True)
    try:
        if args.verify or not args.duplicates:
            measure_verify(args)
        if args.duplicates:
            measure_duplicates(args)
    finally:
        if not args.keep:
            shutil.rmtree(args.dir, ignore_errors=True)


if __name__ == "__main__":
    main()
