"""Check every image of a listing, in parallel, without keeping any image in memory.

`data.verify`:
- `decode`: open and fully decode each image (catches truncated files);
- `exists`: open each file and read its header only (PIL parses headers
  lazily), which also gives width and height; with `ends` (a dataset of
  one's own: `Declaration.check_content`) also its last bytes: a JPEG must
  end with its end-of-image marker, a PNG with its IEND chunk, a WebP must
  hold the bytes its RIFF header counts; any other file, or one whose end
  is not that, is decoded in full to decide (trailing bytes after a
  complete image pass). So a truncated file is caught for the price of one
  more read of the file's last page (measured: benchmarks/data_checks.py);
- `none`: touch nothing; width and height stay null.
`data.hash_content` adds the sha256 of each file's bytes (in any mode);
`sample` hashes the first and last SAMPLE bytes instead (the whole file
when it is no longer than 2 * SAMPLE), the cheap first pass of
`dear.data.content`.

Work goes to `data.workers` forked processes in chunks of rows; only per-file
results (two ints, a hash, an error string) come back.
"""

from __future__ import annotations

import hashlib
import multiprocessing
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
import os
from dataclasses import dataclass
from typing import Iterator, Sequence

import numpy as np
from PIL import Image

from dear.compute import cpus
from dear.errors import DearError
from dear.runtime.progress import track

CHUNK = 2048  # paths per task: large enough to amortize inter-process traffic
SAMPLE = 1 << 14  # bytes hashed at each end of a file by a sampled hash
PNG_END = b"\x00\x00\x00\x00IEND\xaeB`\x82"  # the IEND chunk: length 0, type, CRC
JPEG_END = b"\xff\xd9"  # end-of-image marker


@dataclass
class ImageCheck:
    """Per-file results, parallel to the listing's paths."""

    width: np.ndarray         # [N] int32, -1 where unknown
    height: np.ndarray        # [N] int32, -1 where unknown
    sha256: list[str | None]  # [N]
    size: np.ndarray          # [N] int64 bytes, -1 where unknown (verify none)
    reasons: dict[int, str]   # row -> why the file is bad (missing, corrupt)

    @property
    def bad_rows(self) -> np.ndarray:
        return np.asarray(sorted(self.reasons), dtype=np.int64)


def check_images(paths: Sequence[str], verify: str, hash_content: bool, workers: int,
                 description: str = "images", ends: bool = False, sample: bool = False) -> ImageCheck:
    """Run the per-file check over `paths`; bad files are reported, never raised.

    `ends`: with verify exists, also check each file's end (see the module's docstring); `sample`: the digest
    of `hash_content` covers the first and last SAMPLE bytes only.
    """
    n = len(paths)
    check = ImageCheck(width=np.full(n, -1, dtype=np.int32), height=np.full(n, -1, dtype=np.int32),
                       sha256=[None] * n, size=np.full(n, -1, dtype=np.int64), reasons={})
    if verify == "none" and not hash_content:
        return check
    ranges = [(start, min(start + CHUNK, n)) for start in range(0, n, CHUNK)]
    label = f"{verify}{' + ends' if ends and verify == 'exists' else ''} {description} ({n} files, {len(ranges)} chunks)"
    _SHARED.update(paths=paths, verify=verify, hash_content=hash_content, ends=ends, sample=sample)
    try:
        for chunk, (width, height, size, digests, reasons) in enumerate(_run(ranges, workers, label)):
            start, stop = ranges[chunk]
            check.width[start:stop], check.height[start:stop], check.size[start:stop] = width, height, size
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
    # fork (children see _SHARED) before the progress bar starts its refresh thread. An executor, not a
    # multiprocessing.Pool: when a worker dies (the kernel's OOM killer, a signal), a Pool waits forever for
    # its lost chunk; the executor raises
    fork = multiprocessing.get_context("fork")
    try:
        with ProcessPoolExecutor(workers, mp_context=fork) as pool:
            yield from track(pool.map(_check_range, ranges), label, total=len(ranges))
    except BrokenProcessPool:
        raise DearError(f"{label}: a worker process died before it finished (out of memory?): "
                        "rerun with data.workers: 1, or with more memory") from None


def _check_range(bounds: tuple[int, int]) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[str | None],
                                                    dict[int, str]]:
    """Widths, heights, sizes, hashes of paths[start:stop], and {offset: reason} for the bad ones."""
    start, stop = bounds
    paths, options = _SHARED["paths"], {key: _SHARED[key] for key in ("verify", "hash_content", "ends", "sample")}
    width = np.full(stop - start, -1, dtype=np.int32)
    height = np.full(stop - start, -1, dtype=np.int32)
    size = np.full(stop - start, -1, dtype=np.int64)
    digests: list[str | None] = []
    reasons: dict[int, str] = {}
    for offset in range(stop - start):
        width[offset], height[offset], size[offset], digest, reason = _check_one(paths[start + offset], **options)
        digests.append(digest)
        if reason is not None:
            reasons[offset] = reason
    return width, height, size, digests, reasons


def _check_one(path: str, verify: str, hash_content: bool, ends: bool = False,
               sample: bool = False) -> tuple[int, int, int, str | None, str | None]:
    """(width, height, size, sha256, reason) of one file; reason None when it is fine."""
    width = height = size = -1
    digest = None
    try:
        if verify != "none":
            with Image.open(path) as image:
                size = os.fstat(image.fp.fileno()).st_size if hasattr(image.fp, "fileno") else os.path.getsize(path)
                if verify == "decode" or (ends and not _ends_whole(image, size)):
                    image.load()
                width, height = image.size
        if hash_content:
            digest = _sha256(path, sample)
    except FileNotFoundError:
        return width, height, size, digest, "missing"
    except IsADirectoryError:
        return width, height, size, digest, "not a file"
    except Exception as err:  # noqa: BLE001 - any failure to read an image makes it a bad file
        message = " ".join(str(err).split()) or type(err).__name__
        return width, height, size, digest, f"unreadable ({message[:120]})"
    return width, height, size, digest, None


def _ends_whole(image: Image.Image, size: int) -> bool:
    """Whether the file ends as a complete image of its format does (False: decode it to decide).

    The end marker of JPEG and PNG cannot occur at the end of a cut file: JPEG's entropy-coded data escapes
    every 0xFF byte, and PNG's IEND chunk is fixed. WebP states its length in its RIFF header.
    """
    handle = image.fp
    if image.format in ("JPEG", "MPO", "PNG"):
        end = PNG_END if image.format == "PNG" else JPEG_END
        if size < len(end):
            return False
        handle.seek(size - len(end))
        return handle.read(len(end)) == end
    if image.format == "WEBP":
        handle.seek(4)
        declared = handle.read(4)
        return len(declared) == 4 and int.from_bytes(declared, "little") + 8 <= size
    return False


def _sha256(path: str, sample: bool = False) -> str:
    """sha256 of the file's bytes; `sample`: of its first and last SAMPLE bytes (all of a short file)."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        if sample:
            head = handle.read(2 * SAMPLE + 1)
            if len(head) > 2 * SAMPLE:
                handle.seek(-SAMPLE, os.SEEK_END)
                head = head[:SAMPLE] + handle.read(SAMPLE)
            digest.update(head)
            return digest.hexdigest()
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
