"""MMRL with DeAR's head roles (`mmrl+roles`, `dear.methods.roles`): its image tokens behind the role mask."""

from __future__ import annotations

import torch

from dear.methods.mmrl import MMRL
from dear.methods.roles import RoleAware


class MMRLRoles(RoleAware, MMRL):
    def build(self, roles) -> None:
        super().build(roles)
        self.keep_roles(roles)

    def _masks(self, n_other: int, device: torch.device) -> dict[int, torch.Tensor]:
        """The role mask of every layer holding MMRL's tokens (start_layer on)."""
        return self.role_masks(range(self.start, self.vision.layers + 1), n_other, self.image_tokens, device)


MODELS = {"mmrl+roles": MMRLRoles}
