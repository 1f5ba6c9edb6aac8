"""The baselines with DeAR's head roles (`+roles` in `study.methods`): what every variant shares.

Each variant is its plain method (same learnable parts, initialized from the
same seed, same loss, same recipe), with one change, read from the roles
table of `dear profile` and the keys of `recipes/roles.yaml`
(`dear.model.head_roles`), in a module of its own so that a job's code is
what it runs:
- `maple_roles`, `promptsrc_roles`: the deep image prompts, appended after
  the patches at layer 1 and carried on to the last layer, sit behind DeAR's
  role mask in every layer holding them;
- `mmrl_roles`: MMRL's representation tokens, from `start_layer` on, likewise;
- `clip_lora_roles`: the low-rank update of an image layer's q, k, v reaches
  only the open heads' rows.
A closed head (Generalization, an Attribute head of a non-core concept, a
Mixed head under `mixed_heads: closed`) therefore computes exactly what the
frozen CLIP computes on the same residual stream. The text tower is as the
plain method's (SPEC §4: no role mask on the text side).
"""

from __future__ import annotations

import torch

from dear.errors import DearError
from dear.model import head_roles
from dear.model.masks import HeadRole


class RoleAware:
    """Mixed into a method's model: the roles it was given, and the rule of its recipe's roles keys."""

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
