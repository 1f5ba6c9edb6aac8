"""Exact per-head direct contributions to the image embedding (SPEC §1).

The image embedding is `e = proj(LN_post(z_L[CLS]))` and the final CLS state
is a sum of terms: the residual entering the first profiled layer, then per
profiled layer each head's write, the attention output bias and the MLP.
Freezing LN_post's statistics (this image's mean μ and std σ) makes it
linear, so every term can be pushed through it and through `proj`:
`c_t = proj(γ ⊙ (s_t − μ/T) / σ + β/T)` with T the number of terms (as in
Gandelsman et al.'s code). The terms then add up to `e` exactly.

Only the CLS query row of each profiled layer is split (see
`internals.block_forward_cls_terms`); no attention matrix is kept, so a
profile pass costs one forward plus a small einsum per profiled layer.

`HeadStatistics` streams over image batches and keeps, per head, the sum
and the sum of outer products of its contributions: everything TextSpan
needs (mean and covariance), in memory independent of the number of images:
layers × heads × E² float64 (ViT-B/16, 4 layers: 48 × 512² × 8 B = 100 MB;
ViT-L/14: 64 × 768² × 8 B = 302 MB; the embedded backbone: 16 × 128² × 8 B
= 2 MB).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

import torch
from torch import nn

from dear.errors import DearError
from dear.model import internals


@dataclass
class Decomposition:
    """All direct terms of a batch's image embeddings, in embedding space."""

    first_layer: int  # 1-based index of the first profiled layer
    residual: torch.Tensor  # [B, E] the residual stream entering the first profiled layer
    heads: torch.Tensor  # [B, Lp, H, E] each profiled head's direct contribution
    attn_bias: torch.Tensor  # [B, Lp, E] the attention output bias of each profiled layer
    mlp: torch.Tensor  # [B, Lp, E] each profiled layer's MLP
    embedding: torch.Tensor  # [B, E] encode_image's output, computed the usual way

    def total(self) -> torch.Tensor:
        """Sum of all terms: equals `embedding` to float tolerance. [B, E]"""
        return self.residual + self.heads.sum((1, 2)) + self.attn_bias.sum(1) + self.mlp.sum(1)


def check_layers(model: nn.Module, layers: int) -> int:
    """The number of image blocks, after checking `layers` of them can be profiled."""
    depth = internals.vision_tower(model).layers
    if not 1 <= layers <= depth:
        raise DearError(f"profile.layers: asked for the last {layers} layers but the image tower has {depth}; "
                        f"set profile.layers between 1 and {depth}")
    return depth


@torch.no_grad()
def decompose(model: nn.Module, images: torch.Tensor, layers: int) -> Decomposition:
    """Split the embeddings of `images` [B, 3, S, S] into direct terms of the last `layers` layers."""
    depth = check_layers(model, layers)
    blocks = internals.vision_tower(model).blocks
    first = depth - layers
    x = internals.image_tokens(model, images)  # [B, T, D]
    for block in blocks[:first]:
        x = internals.block_forward(block, x)
    residual = x[:, 0]  # [B, D]
    heads, biases, mlps = [], [], []
    for block in blocks[first:]:
        x, terms = internals.block_forward_cls_terms(block, x)
        heads.append(terms.heads)  # [B, H, D]
        biases.append(terms.attn_bias.expand_as(residual))  # [B, D]
        mlps.append(terms.mlp)  # [B, D]
    final = x[:, 0]  # [B, D]
    n_terms = 1 + layers * (heads[0].shape[1] + 2)
    through = _frozen_ln_post(model, final, n_terms)
    return Decomposition(
        first_layer=first + 1,
        residual=through(residual),
        heads=through(torch.stack(heads, 1)),  # [B, Lp, H, E]
        attn_bias=through(torch.stack(biases, 1)),  # [B, Lp, E]
        mlp=through(torch.stack(mlps, 1)),
        embedding=internals.image_embedding(model, final),
    )


def _frozen_ln_post(model: nn.Module, final: torch.Tensor, n_terms: int):
    """The map term -> contribution: LN_post with this image's μ, σ, then proj.

    final: [B, D] the CLS state LN_post normalizes; each term is [B, ..., D].
    """
    ln = internals.image_ln_post(model)
    proj = internals.image_projection(model)  # [D, E]
    final = final.float()
    mean = final.mean(-1)  # [B]
    std = (final.var(-1, unbiased=False) + ln.eps).sqrt()  # [B]
    gamma = ln.weight if ln.weight is not None else torch.ones_like(final[0])
    beta = ln.bias if ln.bias is not None else torch.zeros_like(final[0])

    def through(term: torch.Tensor) -> torch.Tensor:
        shape = (-1,) + (1,) * (term.dim() - 1)  # broadcast per image
        normalized = gamma * (term.float() - mean.view(shape) / n_terms) / std.view(shape) + beta / n_terms
        return normalized @ proj.float()

    return through


class HeadStatistics:
    """Streaming mean and covariance of every profiled head's contribution.

    Batches are centred on the first batch's mean before their outer
    products are summed, so the final covariance does not suffer from
    cancellation however many images pass. Centring and sums are float64:
    how a device or a thread count orders the sum over a batch then moves
    the covariance by ~1e-16 of itself, far below what could change a
    TextSpan pick (the picks' own tolerance: `textspan.TIE`). The sums live
    on the contributions' device (a GPU profile never copies a batch back).
    """

    def __init__(self) -> None:
        self.count = 0
        self._shift: torch.Tensor | None = None  # [Lp, H, E]
        self._sum: torch.Tensor | None = None  # [Lp, H, E] float64
        self._outer: torch.Tensor | None = None  # [Lp, H, E, E] float64

    def update(self, heads: torch.Tensor) -> None:
        """Add a batch of contributions [B, Lp, H, E]."""
        if self._shift is None:
            self._shift = heads.double().mean(0)
            self._sum = torch.zeros(self._shift.shape, dtype=torch.float64, device=heads.device)
            self._outer = torch.zeros(self._shift.shape + self._shift.shape[-1:], dtype=torch.float64,
                                      device=heads.device)
        centred = heads.double() - self._shift  # [B, Lp, H, E] float64
        self._sum += centred.sum(0)
        self._outer += torch.einsum("blhe,blhf->lhef", centred, centred)
        self.count += heads.shape[0]

    @property
    def mean(self) -> torch.Tensor:
        """[Lp, H, E] float64 mean contribution of each head."""
        self._check()
        return self._shift + self._sum / self.count

    @property
    def covariance(self) -> torch.Tensor:
        """[Lp, H, E, E] float64 covariance over images (divided by M) of each head."""
        self._check()
        centre = self._sum / self.count  # [Lp, H, E]
        return self._outer / self.count - centre[..., :, None] * centre[..., None, :]

    def _check(self) -> None:
        if not self.count:
            raise DearError("profile: no images were profiled; check profile.split and the manifest")


@torch.no_grad()
def head_statistics(model: nn.Module, batches: Iterable[torch.Tensor], layers: int,
                    contributions: str = "embedding") -> HeadStatistics:
    """Stream image batches [B, 3, S, S] through `decompose` into per-head statistics.

    contributions: "embedding" keeps the terms of the raw embedding (SPEC §1);
    "normalized" divides them by the embedding's norm, so they add up to the
    unit embedding CLIP compares with texts (what TextSpan's code does).
    """
    stats = HeadStatistics()
    for images in batches:
        parts = decompose(model, images, layers)
        heads = parts.heads  # [B, Lp, H, E]
        if contributions == "normalized":
            heads = heads / parts.embedding.norm(dim=-1).clamp_min(1e-12)[:, None, None, None]
        stats.update(heads)
    return stats


def mean_ablate(embedding: torch.Tensor, heads: torch.Tensor, means: torch.Tensor,
                ablated: Iterable[tuple[int, int]]) -> torch.Tensor:
    """Embeddings with some heads' direct contributions replaced by their mean.

    embedding: [B, E]; heads: [B, Lp, H, E] (from `decompose`); means: [Lp, H, E];
    ablated: (profiled-layer index, head) pairs, 0-based. Returns [B, E]
    (unnormalized): `e − Σ c_h + Σ mean(c_h)`, the direct effect of removing
    what is image-specific in those heads (Gandelsman et al.'s mean-ablation).
    """
    result = embedding.clone()
    for layer, head in ablated:
        result += means[layer, head].to(result.dtype) - heads[:, layer, head]
    return result
