"""Check every image of a listing, in parallel, without keeping any image in memory.

`data.verify`:
- `decode`: open and fully decode each image (catches truncated files);
- `exists`: open each file and read its header only (PIL parses headers
  lazily), which also gives width and height;
- `none`: touch nothing; width and height stay null.
`data.hash_content` adds the sha256 of each file's bytes (in any mode).

Work goes to `data.workers` forked processes in chunks of rows; only per-file
results (two ints, a hash, an error string) come back.
"""

from __future__ import annotations

import hashlib
import multiprocessing
from dataclasses import dataclass
from typing import Iterator, Sequence

import numpy as np
from PIL import Image

from dear import cpus
from dear.progress import track

CHUNK = 2048  # paths per task: large enough to amortize inter-process traffic


@dataclass
class ImageCheck:
    """Per-file results, parallel to the listing's paths."""

    width: np.ndarray         # [N] int32, -1 where unknown
    height: np.ndarray        # [N] int32, -1 where unknown
    sha256: list[str | None]  # [N]
    reasons: dict[int, str]   # row -> why the file is bad (missing, corrupt)

    @property
    def bad_rows(self) -> np.ndarray:
        return np.asarray(sorted(self.reasons), dtype=np.int64)


def check_images(paths: Sequence[str], verify: str, hash_content: bool, workers: int,
                 description: str = "images") -> ImageCheck:
    """Run the per-file check over `paths`; bad files are reported, never raised."""
    n = len(paths)
    check = ImageCheck(width=np.full(n, -1, dtype=np.int32), height=np.full(n, -1, dtype=np.int32),
                       sha256=[None] * n, reasons={})
    if verify == "none" and not hash_content:
        return check
    ranges = [(start, min(start + CHUNK, n)) for start in range(0, n, CHUNK)]
    label = f"{verify} {description} ({n} files, {len(ranges)} chunks)"
    _SHARED.update(paths=paths, verify=verify, hash_content=hash_content)
    try:
        for chunk, (width, height, digests, reasons) in enumerate(_run(ranges, workers, label)):
            start, stop = ranges[chunk]
            check.width[start:stop], check.height[start:stop] = width, height
            if hash_content:
                check.sha256[start:stop] = digests
            check.reasons.update({start + offset: reason for offset, reason in reasons.items()})
    finally:
        _SHARED.clear()
    return check


# What the workers check: set before the pool forks, so only (start, stop) pairs
# travel to the workers instead of pickled path lists.
_SHARED: dict = {}


def _run(ranges: list[tuple[int, int]], workers: int, label: str) -> Iterator[tuple]:
    """Ordered results of `_check_range` over `ranges`, in-process when workers == 1 (or the job has 1 CPU)."""
    workers = cpus.processes(workers)
    if workers <= 1 or len(ranges) <= 1:
        yield from track(map(_check_range, ranges), label, total=len(ranges))
        return
    # fork (children see _SHARED) before the progress bar starts its refresh thread
    with multiprocessing.get_context("fork").Pool(workers) as pool:
        yield from track(pool.imap(_check_range, ranges), label, total=len(ranges))


def _check_range(bounds: tuple[int, int]) -> tuple[np.ndarray, np.ndarray, list[str | None], dict[int, str]]:
    """Widths, heights, hashes of paths[start:stop], and {offset: reason} for the bad ones."""
    start, stop = bounds
    paths, verify, hash_content = _SHARED["paths"], _SHARED["verify"], _SHARED["hash_content"]
    width = np.full(stop - start, -1, dtype=np.int32)
    height = np.full(stop - start, -1, dtype=np.int32)
    digests: list[str | None] = []
    reasons: dict[int, str] = {}
    for offset in range(stop - start):
        width[offset], height[offset], digest, reason = _check_one(paths[start + offset], verify, hash_content)
        digests.append(digest)
        if reason is not None:
            reasons[offset] = reason
    return width, height, digests, reasons


def _check_one(path: str, verify: str, hash_content: bool) -> tuple[int, int, str | None, str | None]:
    """(width, height, sha256, reason) of one file; reason None when it is fine."""
    width = height = -1
    digest = None
    try:
        if verify != "none":
            with Image.open(path) as image:
                if verify == "decode":
                    image.load()
                width, height = image.size
        if hash_content:
            digest = _sha256(path)
    except FileNotFoundError:
        return width, height, digest, "missing"
    except IsADirectoryError:
        return width, height, digest, "not a file"
    except Exception as err:  # noqa: BLE001 - any failure to read an image makes it a bad file
        message = " ".join(str(err).split()) or type(err).__name__
        return width, height, digest, f"unreadable ({message[:120]})"
    return width, height, digest, None


def _sha256(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while block := handle.read(1 << 20):
            digest.update(block)
    return digest.hexdigest()


def describe_bad(paths: Sequence[str], reasons: dict[int, str], max_listed: int) -> str:
    """One line naming the first `max_listed` bad files with their reason, then a count of the rest."""
    rows = sorted(reasons)
    shown = "; ".join(f"{paths[row]}: {reasons[row]}" for row in rows[:max_listed])
    rest = len(rows) - max_listed
    more = f"; and {rest} more" if rest > 0 else ""
    return f"{len(rows)} bad image(s): {shown}{more}"
