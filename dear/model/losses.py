"""The training objective (SPEC §7), term by term so the log can show each one.

L = CE(s, y) + λ_img (1 - cos(f_0, f_0^frozen)) + λ_txt mean_c (1 - cos(t_c, t_c^frozen)) + λ_fus (-log α_0)

Methods without the regularizers (CoOp) use the cross-entropy alone; with
K = 0 the fused logits are the CLS stream's.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F


@dataclass(frozen=True)
class Weights:
    img: float
    txt: float
    fus: float


@dataclass
class LossTerms:
    total: torch.Tensor
    ce: torch.Tensor
    img: torch.Tensor
    txt: torch.Tensor
    fus: torch.Tensor

    def as_floats(self) -> dict[str, float]:
        return {f"loss_{name}" if name != "total" else "loss": float(getattr(self, name).detach())
                for name in ("total", "ce", "img", "txt", "fus")}


def objective(fused_logits: torch.Tensor, labels: torch.Tensor, alpha: torch.Tensor,
              cls_features: torch.Tensor, frozen_cls: torch.Tensor | None,
              text_features: torch.Tensor, frozen_text: torch.Tensor,
              weights: Weights, regularized: bool) -> LossTerms:
    """All terms of L. Features are normalized: cos is a row-wise dot product.

    fused_logits [B, C], labels [B], alpha [K+1], cls_features / frozen_cls [B, E],
    text_features / frozen_text [C, E].
    """
    ce = F.cross_entropy(fused_logits.float(), labels)
    zero = ce.new_zeros(())
    if not regularized:
        return LossTerms(total=ce, ce=ce, img=zero, txt=zero, fus=zero)
    img = (1.0 - (cls_features.float() * frozen_cls.float()).sum(-1)).mean() if frozen_cls is not None else zero
    txt = (1.0 - (text_features.float() * frozen_text.float()).sum(-1)).mean()
    fus = -alpha[0].float().log()
    total = ce + weights.img * img + weights.txt * txt + weights.fus * fus
    return LossTerms(total=total, ce=ce, img=img, txt=txt, fus=fus)
