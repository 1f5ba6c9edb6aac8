"""DeAR's head roles applied to any method: which heads may read its tokens, which heads' weights it may change.

DeAR (SPEC §5) keeps its Generalization heads computing what the frozen CLIP
computes: they never read a learnable token. A `+roles` variant of another
method (`dear.methods.roles`) applies the same rule to what that method
learns, with the roles table of `dear profile`:
- tokens appended after the patches (MaPLe's, PromptSRC's, MMRL's deep image
  tokens): `token_masks` gives each layer holding them an additive [H, T, T]
  mask; a Generalization head never reads a token and its tokens read only
  themselves (SPEC §5's row); an Attribute head of a core concept reads every
  token (the method's tokens carry no concept, so none is "its own": ours);
  a Mixed head reads them when `mixed_heads` is open (SPEC §5: Mixed heads
  are open; heads of layers the table does not list count as Mixed);
- low-rank updates of the attention projections (CLIP-LoRA): `adapted_heads`
  says which heads' q, k, v slices carry the update, by the same rule.
An Attribute head whose concept is not among `core` is a Generalization head
(SPEC §3: the paper isolates such heads).
"""

from __future__ import annotations

import torch

from dear.model.masks import HeadRole, head_mask

OPENINGS = ("open", "closed")  # what a Mixed head gets (recipe key mixed_heads)


def head_kind(role: HeadRole | None, core: list[str], mixed_heads: str) -> str:
    """'open' (may read the tokens / take the update) or 'closed' (computes as the frozen model) for one head."""
    if mixed_heads not in OPENINGS:
        raise ValueError(f"mixed_heads must be one of {OPENINGS}, got {mixed_heads!r}")
    if role is None or role.mask_role == "mixed":  # unprofiled layers' heads are Mixed (SPEC §5)
        return mixed_heads
    if role.mask_role == "attribute" and role.concept in core:
        return "open"
    return "closed"  # Generalization heads, and Attribute heads of a non-core concept


def head_kinds(roles: list[HeadRole], core: list[str], mixed_heads: str, layer: int, heads: int) -> list[str]:
    """`head_kind` of every head of one 1-based layer, in head order."""
    by_head = {(role.layer, role.head): role for role in roles}
    return [head_kind(by_head.get((layer, head)), core, mixed_heads) for head in range(heads)]


def token_masks(roles: list[HeadRole], core: list[str], mixed_heads: str, layers: range, heads: int,
                n_other: int, n_tokens: int) -> dict[int, torch.Tensor]:
    """{1-based layer: additive mask [H, T, T]} for layers whose sequence is [CLS, patches (n_other in all), tokens
    (n_tokens)]: an open head is fully open (SPEC §5's Mixed row), a closed one is SPEC §5's Generalization row."""
    masks = {}
    for layer in layers:
        kinds = head_kinds(roles, core, mixed_heads, layer, heads)
        masks[layer] = torch.stack([head_mask("mixed" if kind == "open" else "generalization", None, n_other, n_tokens)
                                    for kind in kinds])  # [H, T, T]
    return masks


def adapted_heads(roles: list[HeadRole], core: list[str], mixed_heads: str, layer: int, heads: int) -> torch.Tensor:
    """[H] bool: the heads of one 1-based layer whose weights a method may change (the open ones)."""
    return torch.tensor([kind == "open" for kind in head_kinds(roles, core, mixed_heads, layer, heads)])
