"""The baselines with DeAR's head roles: `maple+roles`, `promptsrc+roles`, `mmrl+roles`, `clip_lora+roles`.

Each is its plain method (same learnable parts, initialized from the same
seed, same loss, same recipe), with one change, read from the roles table of
`dear profile` and the keys of `recipes/roles.yaml` (`dear.model.head_roles`):
- MaPLe, PromptSRC: their deep image prompts, appended after the patches at
  layer 1 and carried on to the last layer, sit behind DeAR's role mask in
  every layer holding them;
- MMRL: its representation tokens, from `start_layer` on, likewise;
- CLIP-LoRA: the low-rank update of an image layer's q, k, v reaches only the
  open heads' rows; a closed head's slice of B never gets a gradient and
  stays zero (its A is shared by every head of the layer, as the rank is).
A closed head (Generalization, an Attribute head of a non-core concept, a
Mixed head under `mixed_heads: closed`) therefore computes exactly what the
frozen CLIP computes on the same residual stream. The text tower is as the
plain method's (SPEC §4: no role mask on the text side).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from dear.errors import DearError
from dear.methods import towers
from dear.methods.clip_lora import CLIPLoRA
from dear.methods.maple import MaPLe
from dear.methods.mmrl import MMRL
from dear.methods.promptsrc import PromptSRC
from dear.model import head_roles
from dear.model import internals as oc
from dear.model.masks import HeadRole


class RoleAware:
    """What every variant shares: the roles it was given, and the rule of its recipe's roles keys."""

    def keep_roles(self, roles: list[HeadRole] | None) -> None:
        if roles is None:
            raise DearError(f"--roles: method {self.name} needs the roles table of `dear profile`; pass --roles PATH")
        self.roles = roles

    def role_masks(self, layers: range, n_other: int, n_tokens: int, device: torch.device) -> dict[int, torch.Tensor]:
        """{1-based layer: [H, T, T]} for layers holding n_tokens tokens after n_other positions (cached)."""
        r = self.recipe

        def build():
            masks = head_roles.token_masks(self.roles, list(r.role_concepts), r.mixed_heads, layers,
                                           self.vision.heads, n_other, n_tokens)
            return {layer: mask.to(device) for layer, mask in masks.items()}
        return self.once(("role-masks", layers.start, layers.stop, n_other, n_tokens), build)

    def open_heads(self, layer: int) -> torch.Tensor:
        """[H] bool: the heads of image layer `layer` whose weights may change."""
        r = self.recipe
        return head_roles.adapted_heads(self.roles, list(r.role_concepts), r.mixed_heads, layer, self.vision.heads)


class MaPLeRoles(RoleAware, MaPLe):
    def build(self, roles) -> None:
        super().build(roles)
        self.keep_roles(roles)

    def encode(self, prefix: torch.Tensor) -> torch.Tensor:
        """MaPLe's forward with its n_ctx image prompts (layer 1 on) behind the role mask in every layer."""
        masks = self.role_masks(range(1, self.vision.layers + 1), prefix.shape[1], self.recipe.n_ctx, prefix.device)
        rows = towers.run_image(self.vision, prefix, 1, self._image_prompts, range(1, self.depth + 1), append_at=1,
                                masks=masks)  # [B, 1+n, D_v]
        return F.normalize(oc.image_embedding(self.clip, rows[:, 0]), dim=-1)[:, None]


class PromptSRCRoles(RoleAware, PromptSRC):
    def build(self, roles) -> None:
        super().build(roles)
        self.keep_roles(roles)

    def encode(self, prefix: torch.Tensor) -> torch.Tensor:
        """PromptSRC's forward with its n_ctx_vision image prompts (layer 1 on) behind the role mask."""
        if not self.vision_depth:
            return self.frozen_image(prefix)[:, None]
        masks = self.role_masks(range(1, self.vision.layers + 1), prefix.shape[1], self.recipe.n_ctx_vision,
                                prefix.device)
        rows = towers.run_image(self.vision, prefix, 1, self._vision_tokens, range(1, self.vision_depth + 1),
                                append_at=1, masks=masks)  # [B, 1+n, D]
        return F.normalize(oc.image_embedding(self.clip, rows[:, 0]), dim=-1)[:, None]


class MMRLRoles(RoleAware, MMRL):
    def build(self, roles) -> None:
        super().build(roles)
        self.keep_roles(roles)

    def _masks(self, n_other: int, device: torch.device) -> dict[int, torch.Tensor]:
        return self.role_masks(range(self.start, self.vision.layers + 1), n_other, self.image_tokens, device)


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
        super().build(roles)  # the plain method's updates, the same draws
        self.keep_roles(roles)
        self.image_updates = nn.ModuleList(HeadSlicedUpdate(update, self.open_heads(layer))
                                           for layer, update in zip(self.image_layers, self.image_updates))


MODELS = {"maple+roles": MaPLeRoles, "promptsrc+roles": PromptSRCRoles, "mmrl+roles": MMRLRoles,
          "clip_lora+roles": CLIPLoRARoles}
