"""MMRL++ (yunncheng/MMRL@208ba96: trainers/mmrlpp.py, clip/model_mmrlpp.py, configs/trainers/MMRLpp/) as its authors
train it, using only names `dear.contract` exports (imported from where they live: built in, the module sits
below the contract).

MMRL's representation tokens (`representation.RepresentationTokens`: the bank R of `tokens` x `rep_dim`,
N(0, 0.02), entering image and text layers from `start_layer` on, their mean-pooled image outputs a second
feature; the loss alpha CE(CLS) + (1 - alpha) CE(rep) + reg_weight (1 - cos) to the frozen CLIP's image and
text features; logits 100 x cosine; fused logits on seen classes, the CLS logits alone on unseen ones), with
the three parts MMRL++ changes:
- SRRA, the shared-residual representation aligner (Shared_Residual_Representation_Aligner): per tower one
  weight W [D, rep_dim], a copy of one initialized Linear's, shared by the token layers and trained; per
  layer a low-rank residual A_l B_l (A_l [D, aligner_rank] Kaiming-uniform with a = sqrt(5), B_l
  [aligner_rank, rep_dim] zeros) and a bias of its own (each a copy of that Linear's bias): layer l's
  tokens are R (W + A_l B_l)^T + b_l;
- PRC, the progressive representation composition (ResidualAttentionBlock, model "MMRLpp"): at the first
  token layer the aligned tokens enter alone; at every later one beta x the layer's aligned tokens +
  (1 - beta) x the previous layer's outputs at the tokens' positions, in both towers;
- the representation projection proj_rep = proj + A B (VisionTransformer: proj the frozen CLIP projection,
  A [D, projection_rank] Kaiming-uniform with a = sqrt(5), B [projection_rank, E] zeros, so it starts as
  proj).
Test time: the authors' test script builds the model under the scored dataset's config, so a cross-dataset
or domain-generalization target is scored with its own BETA (trainers/config.py, task CD; `for_dataset`).
Ours, off in the authors' recipe: `fade_in_epochs` and `views`, as for MMRL.
"""

from __future__ import annotations

import functools
import math

import torch
import torch.nn.functional as F
from torch import nn

from dear.methods import representation
from dear.methods.recipe import Recipe
from dear.model import internals

KAIMING_A = math.sqrt(5)  # nn.init.kaiming_uniform_(A, a=math.sqrt(5)): U(-1/sqrt(rank), 1/sqrt(rank))


class ResidualAligners(nn.Module):
    """SRRA of one tower: layer l maps R [n, rep_dim] -> [n, D] by W + A_l B_l and b_l; `self[l]` is that map."""

    def __init__(self, rep_dim: int, width: int, layers: int, rank: int):
        super().__init__()
        shared = nn.Linear(rep_dim, width)  # their base_linear: its weight and bias start every layer
        self.weight = nn.Parameter(shared.weight.detach().clone())  # W [D, rep_dim], one for every layer
        self.a = nn.ParameterList(nn.Parameter(nn.init.kaiming_uniform_(torch.empty(width, rank), a=KAIMING_A))
                                  for _ in range(layers))  # A_l [D, rank]
        self.b = nn.ParameterList(nn.Parameter(torch.zeros(rank, rep_dim)) for _ in range(layers))  # B_l [rank, rep_dim]
        self.bias = nn.ParameterList(nn.Parameter(shared.bias.detach().clone()) for _ in range(layers))  # b_l [D]

    def forward(self, tokens: torch.Tensor, layer: int) -> torch.Tensor:
        """[n, rep_dim] -> [n, D] of token layer `layer` (0-based offset from the first token layer)."""
        return F.linear(tokens, self.weight + self.a[layer] @ self.b[layer], self.bias[layer])

    def __len__(self) -> int:
        return len(self.bias)

    def __getitem__(self, layer: int):
        return functools.partial(self.forward, layer=layer)

    def __iter__(self):
        return (self[layer] for layer in range(len(self)))


class MMRLpp(representation.RepresentationTokens):
    """MMRL's tokens with SRRA aligners, progressive composition and a low-rank proj_rep (see the module doc)."""

    def build(self, roles) -> None:
        self.beta = self.recipe.beta
        super().build(roles)

    def aligners(self, width: int, layers: int) -> nn.Module:
        return ResidualAligners(self.recipe.rep_dim, width, layers, self.recipe.aligner_rank)

    def build_projection(self) -> None:
        frozen = internals.image_projection(self.clip)  # proj [D, E]
        rank = self.recipe.projection_rank
        self.projection_a = nn.Parameter(nn.init.kaiming_uniform_(torch.empty(frozen.shape[0], rank), a=KAIMING_A))
        self.projection_b = nn.Parameter(torch.zeros(rank, frozen.shape[1]))

    def rep_projection(self) -> torch.Tensor:
        """proj_rep = proj + A B [D, E], proj the frozen CLIP projection."""
        frozen = internals.image_projection(self.clip).detach()
        return frozen + (self.projection_a @ self.projection_b).to(frozen.dtype)

    def composed(self, tokens: torch.Tensor, previous: torch.Tensor) -> torch.Tensor:
        """PRC: beta x this layer's aligned tokens + (1 - beta) x the previous layer's outputs there."""
        return self.beta * tokens + (1.0 - self.beta) * previous

    def _vision_tokens(self, layer: int, previous: torch.Tensor | None) -> torch.Tensor:
        """[1, n, D] at the first token layer, [B, n, D] composed with the previous layer's outputs after it."""
        aligned = self.vision_aligners[layer - self.start](self.bank[: self.image_tokens])[None]
        return aligned if previous is None else self.composed(aligned, previous)

    def compose_text(self, layer: int, tokens: torch.Tensor, previous: torch.Tensor) -> torch.Tensor:
        return self.composed(tokens, previous)

    def for_dataset(self, recipe: Recipe) -> None:
        """The scored dataset's BETA (their test run builds the model under that dataset's config)."""
        if recipe.beta != self.beta:
            self.beta = recipe.beta
            self.forget_text()


MODELS = {"mmrlpp": MMRLpp}
