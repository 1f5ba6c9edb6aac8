"""CLIP-Adapter (Gao et al., arXiv 2110.04544; gaopengcuhk/CLIP-Adapter clip_adapter.py, CustomCLIP and Adapter).

What the authors' code does, and this module with it:
- the image feature is CLIP's image embedding (after the projection, before normalization);
- an adapter, Linear(E -> E/reduction, no bias) -> ReLU -> Linear(E/reduction -> E, no bias) -> ReLU, reads it,
  and the feature used is `ratio * adapter(f) + (1 - ratio) * f` (their ratio 0.2, reduction 4);
- the class features are the frozen CLIP's features of each dataset's hand-written prompt (CUSTOM_TEMPLATES,
  names with "_" read as spaces);
- logits are CLIP's logit scale times the cosine; the loss is the cross-entropy; only the adapter trains.
The authors build the adapter for RN50's 1024-wide embedding (`Adapter(1024, 4)`): here its width is the
backbone's embedding width E (ViT-B/16: 512).
Shapes: B images, C classes, E embedding width, D image tower width, N patches.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from dear.contract import MethodModel, Step, cross_entropy, internals, prompts, towers


class CLIPAdapter(MethodModel):
    TERMS = ("ce",)

    def build(self, roles) -> None:
        width = internals.image_projection(self.clip).shape[-1]  # E
        hidden = width // self.recipe.reduction
        self.adapter = nn.Sequential(nn.Linear(width, hidden, bias=False), nn.ReLU(),
                                     nn.Linear(hidden, width, bias=False), nn.ReLU())

    @torch.no_grad()
    def zero_effect(self) -> bool:
        """Zero weights: the adapter gives ReLU(0) = 0, the feature 0.8 f, CLIP's once normalized."""
        for layer in (self.adapter[0], self.adapter[2]):
            layer.weight.zero_()
        return True

    def encode(self, prefix: torch.Tensor) -> torch.Tensor:
        """[B, 1+N, D] frozen prefix -> [B, 1, E]: the adapted image feature, normalized (one stream)."""
        embedding = self.frozen_embedding(prefix)  # [B, E], no gradient: the image tower is frozen
        ratio = self.recipe.ratio
        adapted = ratio * self.adapter(embedding) + (1 - ratio) * embedding
        return F.normalize(adapted, dim=-1)[:, None]

    def compute_text_features(self, classnames: list[str], template: str | None) -> torch.Tensor:
        """[C, E]: the frozen CLIP's features of the hand-written prompt of each class."""
        texts = [prompts.hand_written(template, name).text for name in classnames]
        return towers.encode_texts(self.clip, self.text, self.tokenizer, texts)

    def step(self, prefix, labels, classnames, frozen_image=None) -> Step:
        logits = self.logits(self.encode(prefix), classnames)[:, 0]  # [B, C]
        ce = cross_entropy(logits, labels)
        return Step(ce, {"ce": ce}, logits)
