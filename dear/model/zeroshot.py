"""Zero-shot classification from class names and prompt templates.

Text features are computed once per (class list, templates): the mean of the
normalized template embeddings, renormalized (CLIP's prompt ensembling).
Evaluation stages reuse `ZeroShotClassifier` for any backbone.
"""

from __future__ import annotations

from typing import Sequence

import torch
import torch.nn.functional as F


@torch.no_grad()
def class_text_features(model, tokenizer, classnames: Sequence[str], templates: Sequence[str],
                        batch_size: int = 256) -> torch.Tensor:
    """Normalized text features [C, D], one per class, averaged over templates."""
    prompts = [template.format(name) for name in classnames for template in templates]
    device = model.logit_scale.device
    chunks = [model.encode_text(tokenizer(prompts[i:i + batch_size]).to(device)).float()
              for i in range(0, len(prompts), batch_size)]
    features = F.normalize(torch.cat(chunks), dim=-1)                     # [C * M, D]
    features = features.view(len(classnames), len(templates), -1).mean(1)  # [C, D]
    return F.normalize(features, dim=-1)


@torch.no_grad()
def image_features(model, pixels: torch.Tensor, batch_size: int = 256) -> torch.Tensor:
    """Normalized image features [N, D] of preprocessed pixels [N, 3, H, W]."""
    chunks = [model.encode_image(pixels[i:i + batch_size]).float() for i in range(0, len(pixels), batch_size)]
    return F.normalize(torch.cat(chunks), dim=-1)


class ZeroShotClassifier:
    """Class text features fixed at construction; `logits(pixels)` -> [N, C]."""

    def __init__(self, model, tokenizer, classnames: Sequence[str], templates: Sequence[str]):
        self.model = model
        self.classnames = list(classnames)
        self.text = class_text_features(model, tokenizer, classnames, templates)   # [C, D]

    def logits(self, pixels: torch.Tensor, batch_size: int = 256) -> torch.Tensor:
        return self.logits_of(image_features(self.model, pixels, batch_size))   # [N, C]

    def logits_of(self, features: torch.Tensor) -> torch.Tensor:
        """Logits [N, C] of normalized image features [N, D]."""
        return self.model.logit_scale.exp().float() * features @ self.text.T

    def accuracy(self, pixels: torch.Tensor, labels: torch.Tensor, batch_size: int = 256) -> float:
        predicted = self.logits(pixels, batch_size).argmax(-1)
        return float((predicted == labels).float().mean())
