"""CLIP-LoRA with DeAR's head roles (`clip_lora+roles`, `dear.methods.roles`): no update of a closed head's q, k, v.

An image layer's update is multiplied, row by row, by its heads' openings: a
closed head's rows of q, k and v add exactly 0, so its slice of every B gets
no gradient and stays at its zero init; the layer's A is shared by every head
(as its rank is). The text tower's updates are the plain method's.
"""

from __future__ import annotations

import torch
from torch import nn

from dear.methods.clip_lora import CLIPLoRA
from dear.methods.roles import RoleAware
from dear.model import internals as oc


class HeadSlicedUpdate(nn.Module):
    """A `LowRankQKV` whose update reaches only the open heads' rows of q, k and v (the others add exactly 0)."""

    def __init__(self, update: oc.LowRankQKV, open_heads: torch.Tensor):
        super().__init__()
        self.update = update
        rows = open_heads.repeat_interleave(update.width // len(open_heads)).float()  # [D]: each head's d rows
        self.register_buffer("rows", rows.repeat(3), persistent=False)  # [3D]: stacked q, k, v

    @property
    def stochastic(self) -> bool:
        return self.update.stochastic

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return self.update(h) * self.rows.to(h.dtype)  # [..., T, 3D]


class CLIPLoRARoles(RoleAware, CLIPLoRA):
    def build(self, roles) -> None:
        super().build(roles)  # the plain method's updates, from the same draws
        self.keep_roles(roles)
        self.image_updates = nn.ModuleList(HeadSlicedUpdate(update, self.open_heads(layer))
                                           for layer, update in zip(self.image_layers, self.image_updates))


MODELS = {"clip_lora+roles": CLIPLoRARoles}
