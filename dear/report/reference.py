"""Published reference averages (the DeAR paper's base-to-novel table), kept apart from anything measured.

ViT-B/16 CLIP, base-to-novel, average over the paper's 11 datasets. These
numbers come from the papers, not from this pipeline; the report prints them
in their own labelled block and never in a measured table. `None` = not
reported.
"""

from __future__ import annotations

CAPTION = ("Published averages, ViT-B/16 CLIP, base-to-novel over the papers' 11 datasets, as the DeAR paper (CVPR 2026) reports them. "
           "Copied from the papers, not measured here: a different model and different data from the tables "
           "above, so compare trends, not values.")

BASE_TO_NOVEL: tuple[tuple[str, float | None, float | None, float | None], ...] = (
    # method, base, novel, HM
    ("zero-shot CLIP", 69.34, 74.22, 71.70),
    ("CoOp", 82.69, 63.22, 71.66),
    ("CoCoOp", 80.47, 71.69, 75.83),
    ("MaPLe", 82.28, 75.14, 78.55),
    ("PromptSRC", 84.26, 76.10, 79.97),
    ("MMRL", 85.68, 77.16, 81.20),
    ("DeAR (reported)", 85.94, None, None),
)
