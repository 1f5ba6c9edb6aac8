"""The same image content twice in a dataset of one's own: refused across splits, warned within one.

A test image that is also a training image (a copy under another name or
folder) inflates accuracy without any sign; two copies in one split weigh
double. Paths cannot tell (`dear.data.listing` refuses a path listed twice):
bytes can. Hashing every byte of every file costs a full read of the
dataset, so the groups of identical files are found in three passes, each on
what the previous one left:
1. sizes, which `data.verify` (exists or decode) already read for every file:
   only files whose size another file shares can be copies;
2. a sampled sha256 (the first and last 16 KiB, the whole of a short file) of those;
3. the full sha256 of files still sharing size and sample (larger than 32 KiB).
With `data.hash_content: true` every file's sha256 is known and used
directly. Identical bytes only: a re-encoded or resized copy is another
file. Cost on 100,000 files: docs/your-data.md (benchmarks/data_checks.py).
"""

from __future__ import annotations

import logging
from collections import defaultdict
from typing import Sequence

import numpy as np

from dear.data import verify
from dear.data.listing import Listing
from dear.data.manifest import SPLITS
from dear.errors import DearError

log = logging.getLogger("dear.prepare")


def identical_groups(paths: Sequence[str], check: verify.ImageCheck, workers: int) -> list[list[int]]:
    """Rows of `paths` with identical bytes, as groups of two or more (bad files and unknown sizes left out)."""
    ok = np.ones(len(paths), dtype=bool)
    ok[check.bad_rows] = False
    rows = np.flatnonzero(ok).tolist()
    if rows and all(check.sha256[row] is not None for row in rows):  # data.hash_content: every sha256 is known
        return _groups({row: check.sha256[row] for row in rows})
    known = ok & (check.size >= 0)
    sizes = check.size[known]
    _, inverse, counts = np.unique(sizes, return_inverse=True, return_counts=True)
    candidates = np.flatnonzero(known)[counts[inverse] > 1]  # rows whose size another row shares
    found = _digests(paths, candidates, check.size, workers, sample=True)
    groups = _groups(found)
    long = [row for group in groups for row in group if check.size[row] > 2 * verify.SAMPLE]
    if long:
        full = _digests(paths, np.asarray(long, dtype=np.int64), check.size, workers, sample=False)
        short = {row: found[row] for group in groups for row in group if check.size[row] <= 2 * verify.SAMPLE}
        groups = _groups({**short, **{row: "full:" + digest for row, digest in full.items()}})
    return groups


def _digests(paths: Sequence[str], rows: np.ndarray, sizes: np.ndarray, workers: int,
             sample: bool) -> dict[int, str]:
    """{row: its size and (sampled) sha256} for `rows`; a file that vanished meanwhile is left out."""
    if not len(rows):
        return {}
    hashed = verify.check_images([paths[row] for row in rows], "none", True, workers,
                                 "sampled hashes" if sample else "full hashes", sample=sample)
    return {int(row): f"{sizes[row]}:{digest}" for row, digest in zip(rows, hashed.sha256) if digest is not None}


def _groups(digests: dict[int, str]) -> list[list[int]]:
    by_digest: dict[str, list[int]] = defaultdict(list)
    for row, digest in digests.items():
        by_digest[digest].append(row)
    return sorted(sorted(rows) for rows in by_digest.values() if len(rows) > 1)


def refuse_copies(name: str, listing: Listing, groups: list[list[int]], max_listed: int) -> None:
    """Refuse identical files in two declared splits (one line naming the first pair); warn of copies in one split."""
    declared = listing.declared_splits()
    across = [group for group in groups if len({int(declared[row]) for row in group}) > 1]
    if across:
        first = across[0]
        second = next(row for row in first if declared[row] != declared[first[0]])
        others = [listing.paths[group[-1]] for group in across[1:max_listed]]
        rest = len(across) - 1 - len(others)
        more = (f" ({len(across)} such groups; the others include {', '.join(others)}"
                + (f" and {rest} more" if rest > 0 else "") + ")") if others else ""
        raise DearError(f"{listing.where(second)}: the same bytes as {listing.where(first[0])}, in "
                        f"{SPLITS[declared[second]]} and {SPLITS[declared[first[0]]]}{more}; an image in two splits is "
                        "scored on what it was trained on: delete one copy, or keep both in one split")
    if groups:
        copies = sum(len(group) - 1 for group in groups)
        log.warning("%s: %d image(s) repeat another of the same split byte for byte (e.g. %s = %s), so they count "
                    "twice there; delete the copies unless that is meant", name, copies,
                    listing.where(groups[0][0]), listing.where(groups[0][1]))
