"""MMRL (yunncheng/MMRL: trainers/mmrl.py, clip/model_mmrl.py) as its authors train it.

The model is the representation-token block of `dear.methods.representation`
with MMRL's parts: 5 tokens of width REP_DIM from one bank, per-layer
projections into each tower that start as copies of one initialized layer,
replaced at every layer, a random representation projection proj_rep; the
loss alpha CE(CLS) + (1 - alpha) CE(rep) + REG_WEIGHT (1 - cos) to the frozen
CLIP's image and text features; logits 100 x cosine; fused logits on seen
classes, the CLS logits alone on unseen ones.
"""

from __future__ import annotations

from dear.methods.representation import RepresentationTokens


class MMRL(RepresentationTokens):
    """MMRL: the block with its own parts (`dear.methods.representation`)."""


MODELS = {"mmrl": MMRL}
