"""PromptSRC with DeAR's head roles (`promptsrc+roles`, `dear.methods.roles`): its image prompts behind the role
mask."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from dear.methods import towers
from dear.methods.promptsrc import PromptSRC
from dear.methods.roles import RoleAware
from dear.model import internals as oc


class PromptSRCRoles(RoleAware, PromptSRC):
    def build(self, roles) -> None:
        super().build(roles)
        self.keep_roles(roles)

    def encode(self, prefix: torch.Tensor) -> torch.Tensor:
        """PromptSRC's forward, its n_ctx_vision image prompts (from layer 1 on) behind the mask in every layer."""
        if not self.vision_depth:
            return self.frozen_image(prefix)[:, None]
        masks = self.role_masks(range(1, self.vision.layers + 1), prefix.shape[1], self.recipe.n_ctx_vision,
                                prefix.device)
        rows = towers.run_image(self.vision, prefix, 1, self._vision_tokens, range(1, self.vision_depth + 1),
                                append_at=1, masks=masks)  # [B, 1+n, D]
        return F.normalize(oc.image_embedding(self.clip, rows[:, 0]), dim=-1)[:, None]


MODELS = {"promptsrc+roles": PromptSRCRoles}
