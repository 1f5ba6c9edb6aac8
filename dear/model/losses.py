"""The training objectives (SPEC §7), term by term so the log can show each one.

- ce (CoOp): CE(s_0, y) of the learned prompt's logits.
- mmrl (MMRL's, trainers/mmrl.py `MMRL_Loss`):
  s CE(s_0, y) + (1 - s) CE_attr + λ (1 - cos(f_0, f_0^frozen)) + λ mean_c (1 - cos(t_c, t_c^frozen)),
  CE_attr = CE of MMRL's one representation stream; with DeAR's K attribute
  streams (ours) the mean of the K streams' CEs (`streams`, each stream gets
  its own signal) or the CE of their mean logits (`mean_logits`).
- fused (ours, the earlier objective): CE(Σ_k α_k s_k, y) + the same two
  regularizers + λ_fus (-log α_0).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

TERMS = ("total", "cls", "attr", "fused", "img", "txt", "fus")


@dataclass(frozen=True)
class Weights:
    scale: float  # s of the mmrl objective
    reg: float  # λ of both cosine regularizers
    fus: float  # λ_fus of the fused objective
    attribute_loss: str  # streams | mean_logits


@dataclass
class LossTerms:
    total: torch.Tensor
    cls: torch.Tensor  # CE of the CLS stream
    attr: torch.Tensor  # CE of the attribute / representation streams (as the objective combines them)
    fused: torch.Tensor  # CE of the fused logits
    img: torch.Tensor  # 1 - cos(f_0, f_0 frozen)
    txt: torch.Tensor  # mean_c 1 - cos(t_c, t_c frozen)
    fus: torch.Tensor  # -log α_0

    def as_floats(self) -> dict[str, float]:
        return {("loss" if name == "total" else f"loss_{name}"): float(getattr(self, name).detach()) for name in TERMS}


def objective(kind: str, streams: torch.Tensor, fused: torch.Tensor, labels: torch.Tensor, alpha: torch.Tensor,
              cls_features: torch.Tensor, frozen_cls: torch.Tensor | None, text_features: torch.Tensor,
              frozen_text: torch.Tensor, weights: Weights) -> LossTerms:
    """Every term of objective `kind`. Features are normalized: cos is a row-wise dot product.

    streams [B, S+1, C] logits (stream 0 = CLS), fused [B, C], labels [B], alpha [S+1],
    cls_features / frozen_cls [B, E], text_features / frozen_text [C, E].
    """
    streams = streams.float()
    zero = streams.new_zeros(())
    cls = F.cross_entropy(streams[:, 0], labels)
    attr = _attribute_ce(streams[:, 1:], labels, weights.attribute_loss) if streams.shape[1] > 1 else zero
    fused_ce = F.cross_entropy(fused.float(), labels)
    if kind == "ce":
        return LossTerms(total=cls, cls=cls, attr=zero, fused=fused_ce, img=zero, txt=zero, fus=zero)
    img = (1.0 - (cls_features.float() * frozen_cls.float()).sum(-1)).mean() if frozen_cls is not None else zero
    txt = (1.0 - (text_features.float() * frozen_text.float()).sum(-1)).mean()
    regularizers = weights.reg * (img + txt)
    if kind == "mmrl":
        total = weights.scale * cls + (1.0 - weights.scale) * attr + regularizers
        return LossTerms(total=total, cls=cls, attr=attr, fused=fused_ce, img=img, txt=txt, fus=zero)
    if kind == "fused":
        fus = -alpha[0].float().log()
        total = fused_ce + regularizers + weights.fus * fus
        return LossTerms(total=total, cls=cls, attr=attr, fused=fused_ce, img=img, txt=txt, fus=fus)
    raise ValueError(f"unknown objective {kind!r}")


def _attribute_ce(streams: torch.Tensor, labels: torch.Tensor, how: str) -> torch.Tensor:
    """CE of the attribute streams [B, S, C]: the mean of each stream's CE, or the CE of their mean logits."""
    if how == "mean_logits":
        return F.cross_entropy(streams.mean(1), labels)
    per_stream = F.cross_entropy(streams.transpose(1, 2), labels[:, None].expand(-1, streams.shape[1]),
                                 reduction="none")  # [B, S]
    return per_stream.mean()
