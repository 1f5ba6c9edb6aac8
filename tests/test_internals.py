"""The recomposed towers compute exactly what open_clip computes."""

import open_clip
import pytest
import torch

from dear.model import internals
from tests.floats import GRADIENT_ULPS, assert_same_up_to_rounding
from tests.tiny_clip import tiny_clip


@pytest.fixture(params=[None, 0.1], ids=["no-layerscale", "layerscale"])
def model(request):
    return tiny_clip(ls_init=request.param)


def test_block_forward_matches_open_clip(model):
    x = torch.randn(3, 17, 64)
    for block in internals.vision_tower(model).blocks:
        torch.testing.assert_close(internals.block_forward(block, x), block(x), rtol=1e-5, atol=1e-5)


def test_encode_image_matches(model):
    images = torch.randn(2, 3, 32, 32)
    assert_same_up_to_rounding(internals.encode_image(model, images), model.encode_image(images))


def test_encode_text_matches(model):
    text = open_clip.tokenize(["a photo of a dog", "a red square on a striped background"], context_length=16)
    assert_same_up_to_rounding(internals.encode_text(model, text), model.encode_text(text))


def test_cls_terms_add_up_to_the_block_update(model):
    block = internals.vision_tower(model).blocks[-1]
    x = torch.randn(2, 17, 64)
    after, terms = internals.block_forward_cls_terms(block, x)
    rebuilt = x[:, 0] + terms.heads.sum(1) + terms.attn_bias + terms.mlp
    torch.testing.assert_close(rebuilt, after[:, 0], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(after, internals.block_forward(block, x), rtol=1e-6, atol=1e-6)


def test_per_head_mask_blocks_what_it_says(model):
    """A head whose mask blocks token j does not change when token j changes; others do."""
    block = internals.vision_tower(model).blocks[0]
    x = torch.randn(1, 17, 64)
    mask = torch.zeros(4, 17, 17)
    mask[0, :, 16] = float("-inf")  # head 0 never reads the last token
    mask[0, 16, 16] = 0.0  # ... except the last token itself (no fully blocked row)
    y = x.clone()
    y[:, 16] += torch.randn(64)  # not a constant: ln_1 would remove it
    heads_x = internals._heads(block, x, mask)
    heads_y = internals._heads(block, y, mask)
    torch.testing.assert_close(heads_x[:, 0, :16], heads_y[:, 0, :16])
    assert not torch.allclose(heads_x[:, 1, :16], heads_y[:, 1, :16])


def test_per_head_masks_run_on_the_fused_cpu_kernel(model):
    """torch's fused CPU attention takes 2-D or 4-D masks only: a role mask [H, T, T] must reach it as 4-D
    (as 3-D it fell back to the math kernel, 2.9x slower at the demo's shapes), with the math kernel's numbers."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    block = internals.vision_tower(model).blocks[0]
    x = torch.randn(2, 17, 64)
    mask = torch.zeros(4, 17, 17)
    mask[0, :, 16] = float("-inf")
    mask[0, 16, 16] = 0.0
    with sdpa_kernel([SDPBackend.FLASH_ATTENTION]):  # "No available kernel" if the mask stays 3-D
        fused = internals._heads(block, x, mask)
    with sdpa_kernel([SDPBackend.MATH]):
        math = internals._heads(block, x, mask)
    torch.testing.assert_close(fused, math, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("mask_kind", ["none", "causal", "per-head"])
@pytest.mark.parametrize("per_example", [False, True], ids=["rows", "rows-per-example"])
def test_a_block_computes_only_the_rows_asked_for(model, mask_kind, per_example):
    """`rows`: the wanted outputs of the whole block, and the same gradient into its input."""
    block = internals.vision_tower(model).blocks[-1]
    x = torch.randn(3, 17, 64, requires_grad=True)
    mask = {"none": None, "causal": torch.full((17, 17), float("-inf")).triu(1),
            "per-head": torch.zeros(4, 17, 17).index_fill_(2, torch.tensor([16]), float("-inf"))}[mask_kind]
    if mask_kind == "per-head":
        mask[:, 16, 16] = 0.0
    rows = torch.tensor([[0, 5], [3, 16], [16, 2]]) if per_example else torch.tensor([0, 12, 16])
    full = internals.block_forward(block, x, mask)
    wanted = full[torch.arange(3)[:, None], rows] if per_example else full[:, rows]
    picked = internals.block_forward(block, x, mask, rows=rows)
    torch.testing.assert_close(picked, wanted, rtol=1e-5, atol=1e-5)
    weights = torch.randn_like(wanted)
    (grad_full,) = torch.autograd.grad((wanted * weights).sum(), x)
    (grad_rows,) = torch.autograd.grad((picked * weights).sum(), x)
    torch.testing.assert_close(grad_rows, grad_full, rtol=1e-4, atol=1e-5)  # float32 sums in another order


def test_unsupported_tower_is_a_clean_error():
    from dear.errors import DearError

    model = tiny_clip()
    model.visual.pool_type = "avg"
    with pytest.raises(DearError, match="pooling"):
        internals.vision_tower(model)


def test_head_outputs_merge_to_the_block(model):
    """The per-head outputs are the attention half of `block_forward`."""
    block = internals.vision_tower(model).blocks[0]
    x = torch.randn(2, 17, 64)
    heads = internals.head_outputs(block, x)  # [B, H, T, d]
    assert heads.shape == (2, 4, 17, 16)
    merged = block.attn.out_proj(heads.transpose(1, 2).reshape(2, 17, 64))
    torch.testing.assert_close(block.ls_1(merged), internals.block_forward(block, x) - x - internals._mlp(block, x + block.ls_1(merged)))


def test_image_size_normalization_and_context(model):
    assert internals.image_size(model) == 32
    mean, std = internals.image_normalization(model)
    assert len(mean) == len(std) == 3 and all(s > 0 for s in std)
    assert internals.text_context_length(model) == 16


def test_trimmed_padding_gives_the_same_text_embedding(model):
    text = open_clip.tokenize(["a photo of a dog", "a red square"], context_length=16)
    trimmed = internals.trim_text_padding(model, text)
    assert trimmed.shape[1] == 7  # start, five words at most, end
    torch.testing.assert_close(internals.encode_text(model, trimmed), model.encode_text(text), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("group", [6, 3], ids=["one-group", "per-image-groups"])
@pytest.mark.parametrize("last", [False, True], ids=["all-rows", "pooled-rows"])
def test_a_shared_prefix_runs_once_per_group_with_the_same_numbers(model, group, last):
    """`block_forward_shared`: the causal block's outputs and input gradients, computing each group's
    common first positions once (CoOp's start-of-text and context; CoCoOp's per image)."""
    block = internals.text_tower(model).blocks[0]
    N, T, P = 6, 11, 4
    start = torch.randn(N // group, P, 64).repeat_interleave(group, 0)  # [N, P, 64]: equal within each group
    x = torch.cat([start, torch.randn(N, T - P, 64)], 1).requires_grad_(True)
    mask = torch.full((T, T), float("-inf")).triu(1)
    assert internals.shared_prefix(x, group) == P
    rows = torch.randint(P, T, (N, 1)) if last else None
    plain = internals.block_forward(block, x, mask, rows=rows)
    shared = internals.block_forward_shared(block, x, mask, P, group, rows=rows)
    torch.testing.assert_close(shared, plain, rtol=1e-5, atol=1e-5)
    weights = torch.randn_like(plain)
    (grad_plain,) = torch.autograd.grad((plain * weights).sum(), x)
    (grad_shared,) = torch.autograd.grad((shared * weights).sum(), x)
    per_group = lambda grad: grad.view(N // group, group, T, 64).sum(1)  # what reaches a tensor shared by the group
    assert_same_up_to_rounding(per_group(grad_shared), per_group(grad_plain), per_vector=False, ulps=GRADIENT_ULPS)
    assert_same_up_to_rounding(grad_shared[:, P:], grad_plain[:, P:], per_vector=False, ulps=GRADIENT_ULPS)


def test_the_shared_prefix_is_found_by_exact_comparison():
    x = torch.randn(4, 6, 8)
    x[:, :3] = x[:1, :3]
    assert internals.shared_prefix(x, 4) == 3
    assert internals.shared_prefix(x, 1) == 0  # one row: nothing to share
    x[2, 1, 5] += 1e-6  # one value off in one row: only start-of-text is common
    assert internals.shared_prefix(x, 4) == 1
    assert internals.shared_prefix(x, 2) == 1 and internals.shared_prefix(x[:2], 2) == 3


def test_open_clip_is_imported_without_transformers_which_imports_later():
    """Jobs skip HuggingFace transformers when they import open_clip (0.65 s each); it still imports afterwards."""
    import subprocess
    import sys

    code = ("import sys, dear.model.clip, open_clip; assert 'transformers' not in sys.modules; "
            "assert open_clip.hf_model.transformers is None; import transformers; print('ok')")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.stdout.strip() == "ok", done.stderr
