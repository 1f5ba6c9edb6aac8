"""MaPLe with DeAR's head roles (`maple+roles`, `dear.methods.roles`): its image prompts behind the role mask."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from dear.methods import towers
from dear.methods.maple import MaPLe
from dear.methods.roles import RoleAware
from dear.model import internals as oc


class MaPLeRoles(RoleAware, MaPLe):
    def build(self, roles) -> None:
        super().build(roles)
        self.keep_roles(roles)

    def encode(self, prefix: torch.Tensor) -> torch.Tensor:
        """MaPLe's forward, its n_ctx image prompts (in the sequence from layer 1 on) behind the mask in every layer."""
        masks = self.role_masks(range(1, self.vision.layers + 1), prefix.shape[1], self.recipe.n_ctx, prefix.device)
        rows = towers.run_image(self.vision, prefix, 1, self._image_prompts, range(1, self.depth + 1), append_at=1,
                                masks=masks)  # [B, 1+n, D_v]
        return F.normalize(oc.image_embedding(self.clip, rows[:, 0]), dim=-1)[:, None]


MODELS = {"maple+roles": MaPLeRoles}
