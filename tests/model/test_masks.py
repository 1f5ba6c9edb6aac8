"""The Role-Based Attention Mask is exactly SPEC §5's table."""

import math

import pytest
import torch

from dear.errors import DearError
from dear.model.masks import HeadRole, fade_in, head_mask, layer_masks, roles_from_rows

N_OTHER, K = 3, 3  # CLS + 2 patches, three attribute tokens
O, A = list(range(N_OTHER)), [N_OTHER + k for k in range(K)]


def opened(mask: torch.Tensor) -> set[tuple[int, int]]:
    return {(q, k) for q, k in zip(*torch.nonzero(mask == 0, as_tuple=True)) for q, k in [(int(q), int(k))]}


def pairs(queries, keys) -> set[tuple[int, int]]:
    return {(q, k) for q in queries for k in keys}


def test_generalization_head_never_mixes_tokens_and_image():
    mask = head_mask("generalization", None, N_OTHER, K)
    assert opened(mask) == pairs(O, O) | {(a, a) for a in A}
    assert set(mask.unique().tolist()) == {0.0, float("-inf")}


@pytest.mark.parametrize("c", range(K))
def test_attribute_head_opens_only_its_own_token(c):
    mask = head_mask("attribute", c, N_OTHER, K)
    own = A[c]
    expected = pairs(O, O) | pairs(O, [own]) | pairs([own], O) | {(a, a) for a in A}
    assert opened(mask) == expected


def test_mixed_head_is_fully_open():
    assert opened(head_mask("mixed", None, N_OTHER, K)) == pairs(O + A, O + A)


@pytest.mark.parametrize("role,token", [("generalization", None), ("attribute", 1), ("mixed", None)])
def test_no_row_is_fully_blocked(role, token):
    mask = head_mask(role, token, N_OTHER, K)
    assert (mask == 0).any(dim=1).all()
    assert (mask.diagonal() == 0).all()


def test_layer_masks_map_concepts_and_fill_unprofiled_heads():
    roles = [HeadRole(3, 0, "attribute", "texture"), HeadRole(3, 1, "attribute", "emotion"),
             HeadRole(3, 2, "generalization", "other")]  # head 3 of layer 3 and all of layer 4: unprofiled
    masks = layer_masks(roles, ["color", "shape", "texture"], range(3, 5), heads=4, n_other=N_OTHER)
    assert set(masks) == {3, 4} and masks[3].shape == (4, N_OTHER + K, N_OTHER + K)
    torch.testing.assert_close(masks[3][0], head_mask("attribute", 2, N_OTHER, K))  # texture = token 2
    torch.testing.assert_close(masks[3][1], head_mask("generalization", None, N_OTHER, K))  # non-core concept
    torch.testing.assert_close(masks[3][2], head_mask("generalization", None, N_OTHER, K))
    torch.testing.assert_close(masks[3][3], head_mask("mixed", None, N_OTHER, K))
    assert (masks[4] == 0).all()


def test_attribute_head_without_its_token_is_generalization_when_k_is_smaller():
    roles = [HeadRole(1, 0, "attribute", "position")]
    masks = layer_masks(roles, ["color", "shape"], range(1, 2), heads=1, n_other=N_OTHER)
    torch.testing.assert_close(masks[1][0], head_mask("generalization", None, N_OTHER, 2))


@pytest.mark.parametrize("row,match", [
    (dict(layer=5, head=0, mask_role="mixed", concept=None), "does not exist"),
    (dict(layer=1, head=4, mask_role="mixed", concept=None), "does not exist"),
    (dict(layer=1, head=0, mask_role="attributes", concept="color"), "mask_role"),
])
def test_bad_roles_rows_are_one_line_errors(row, match):
    with pytest.raises(DearError, match=match):
        roles_from_rows([row], layers=4, heads=4, source="roles.parquet")


def test_duplicate_head_is_an_error():
    row = dict(layer=1, head=0, mask_role="mixed", concept=None)
    with pytest.raises(DearError, match="twice"):
        roles_from_rows([row, row], layers=4, heads=4, source="roles.parquet")


def test_fade_in_weights_only_the_frozen_positions_reads_of_the_tokens():
    is_token = torch.tensor([False, False, True, False, True])  # e.g. text: tokens among the positions
    role = torch.zeros(2, 5, 5)
    role[0, 0, 2] = float("-inf")
    assert fade_in(role, is_token, 1.0) is role and fade_in(None, is_token, 1.0) is None
    half = fade_in(role, is_token, 0.5)
    reads = (~is_token)[:, None] & is_token[None, :]
    assert torch.equal(half[:, ~reads], role[:, ~reads])  # token queries and frozen keys untouched
    assert half[0, 0, 2] == float("-inf") and half[1, 0, 2] == pytest.approx(math.log(0.5))
    assert torch.isinf(fade_in(None, is_token, 0.0)[reads]).all()
