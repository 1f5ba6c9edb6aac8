"""The Role-Based Attention Mask (SPEC §5), one additive [H, T, T] mask per layer.

Token layout inside a layer holding attribute tokens: [CLS, patches..., attr_1..attr_K],
i.e. the group O (CLS + patches, the first T - K positions) then one position per
attribute token. Rows are queries, columns keys; 0 = may attend, -inf = blocked.

| role of (l, h)            | O -> O | O -> A_k          | A_k -> O          | A_k -> A_j  |
| generalization            | open   | blocked           | blocked           | only j = k  |
| attribute of concept c    | open   | open only k = c   | open only k = c   | only j = k  |
| mixed                     | open   | open              | open              | open        |

An attribute head whose concept has no token (not among `dear.concepts[:K]`) is
masked as a generalization head; heads of layers absent from the roles table
are mixed. The diagonal is always open, so no row is ever fully blocked.

`fade_in` adds the tokens' fade-in on top of any of these masks (and of the text
tower's causal mask): log w on every O -> A entry (`train.fade_in_epochs`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from dear.errors import DearError

MASK_ROLES = ("attribute", "generalization", "mixed")


@dataclass(frozen=True)
class HeadRole:
    """How one head is masked: its mask role and, for attribute heads, the token it serves."""

    layer: int  # 1-based
    head: int  # 0-based
    mask_role: str  # 'attribute' | 'generalization' | 'mixed'
    concept: str | None


def head_mask(role: str, token: int | None, n_other: int, n_tokens: int) -> torch.Tensor:
    """One head's additive mask [T, T], T = n_other + n_tokens.

    role: 'attribute' (with `token` = index k of its concept's token), 'generalization' or 'mixed'.
    """
    T = n_other + n_tokens
    allowed = torch.zeros(T, T, dtype=torch.bool)  # [query, key]
    allowed[:n_other, :n_other] = True  # O -> O is open for every role
    if role == "mixed":
        allowed[:] = True
    else:
        attr = torch.arange(n_other, T)
        allowed[attr, attr] = True  # A_k -> A_k only
        if role == "attribute":
            if token is None or not 0 <= token < n_tokens:
                raise ValueError(f"attribute head needs a token index in [0, {n_tokens}), got {token}")
            k = n_other + token
            allowed[:n_other, k] = True  # O -> A_c
            allowed[k, :n_other] = True  # A_c -> O
        elif role != "generalization":
            raise ValueError(f"unknown mask role {role!r}")
    mask = torch.zeros(T, T)
    return mask.masked_fill_(~allowed, float("-inf"))


def layer_masks(roles: list[HeadRole], concepts: list[str], layers: range, heads: int, n_other: int) -> dict[int, torch.Tensor]:
    """Masks of the token-holding layers: {1-based layer: [H, T, T]}.

    `concepts[k]` is the concept of attribute token k (K = len(concepts)).
    """
    by_head = {(role.layer, role.head): role for role in roles}
    masks = {}
    for layer in layers:
        per_head = []
        for head in range(heads):
            role = by_head.get((layer, head))
            kind, token = _masking(role, concepts)
            per_head.append(head_mask(kind, token, n_other, len(concepts)))
        masks[layer] = torch.stack(per_head)  # [H, T, T]
    return masks


def _masking(role: HeadRole | None, concepts: list[str]) -> tuple[str, int | None]:
    """(mask kind, token index) of a head: unprofiled -> mixed; attribute without a token -> generalization."""
    if role is None:
        return "mixed", None
    if role.mask_role == "attribute":
        if role.concept in concepts:
            return "attribute", concepts.index(role.concept)
        return "generalization", None
    return role.mask_role, None


def roles_from_rows(rows: list[dict], layers: int, heads: int, source: str) -> list[HeadRole]:
    """Check the roles table's rows against the backbone's shape and turn them into `HeadRole`s."""
    roles, seen = [], set()
    for row in rows:
        layer, head, kind = int(row["layer"]), int(row["head"]), str(row["mask_role"])
        if not 1 <= layer <= layers or not 0 <= head < heads:
            raise DearError(f"{source}: head (layer {layer}, head {head}) does not exist in this backbone "
                            f"({layers} layers x {heads} heads); rerun `dear profile` with this backbone")
        if kind not in MASK_ROLES:
            raise DearError(f"{source}: mask_role {kind!r} at layer {layer} head {head}; expected one of {MASK_ROLES}")
        if (layer, head) in seen:
            raise DearError(f"{source}: layer {layer} head {head} listed twice; rerun `dear profile`")
        seen.add((layer, head))
        concept = row.get("concept")
        roles.append(HeadRole(layer, head, kind, None if concept is None else str(concept)))
    return roles


def fade_in(mask: torch.Tensor | None, is_token: torch.Tensor, weight: float) -> torch.Tensor | None:
    """`mask` with the frozen positions' reads of the tokens scaled by `weight` in their softmax.

    Adds log(weight) to every (non-token query, token key) entry: at weight 0
    those positions attend exactly as the untouched model (the tokens are
    invisible to them), at weight 1 the mask is returned unchanged. Token
    queries are not touched. mask: [T, T] | [H, T, T] | None; is_token: [T] bool.
    """
    if weight >= 1.0:
        return mask
    reads_token = (~is_token)[:, None] & is_token[None, :]  # [T, T]
    extra = torch.zeros(reads_token.shape, device=is_token.device)
    extra[reads_token] = math.log(weight) if weight > 0 else float("-inf")
    return extra if mask is None else mask + extra.to(mask.dtype)
