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


# --- low-rank updates of q, k, v (CLIP-LoRA) -------------------------------------------

def lora_reference(block, x, update):
    """What MaxZanella/CLIP-LoRA's attention computes, written plainly: separate q, k, v linears of the block's
    in-projection rows, each plus scaling · (x A^T) B^T, then nn.MultiheadAttention's scaled dot product."""
    attn = block.attn
    D, H = attn.embed_dim, attn.num_heads
    h = block.ln_1(x)
    outputs = []
    for index, m in enumerate("qkv"):
        w, b = attn.in_proj_weight[index * D:(index + 1) * D], attn.in_proj_bias[index * D:(index + 1) * D]
        out = h @ w.T + b
        if m in update.matrices:
            out = out + (h @ update.a[m].T @ update.b[m].T) * update.scaling
        outputs.append(out.view(x.shape[0], x.shape[1], H, D // H).transpose(1, 2))
    heads = torch.nn.functional.scaled_dot_product_attention(*outputs)  # [B, H, T, d]
    attended = attn.out_proj(heads.transpose(1, 2).reshape(x.shape))
    y = x + block.ls_1(attended)
    return y + block.ls_2(block.mlp(block.ln_2(y)))


def trained_update(width=64, matrices=("q", "k", "v"), dropout=0.0, seed=3):
    torch.manual_seed(seed)
    update = internals.LowRankQKV(width, 2, matrices, scaling=1 / 2 ** 0.5, dropout=dropout)
    with torch.no_grad():
        for b in update.b.values():
            b.normal_(0, 0.1)  # as after training: B moved away from zero
    return update.eval()


@pytest.mark.parametrize("matrices", [("q", "k", "v"), ("v",), ("q", "k")])
def test_a_low_rank_update_is_clip_loras_attention_inside_its_block_only(model, matrices):
    block = internals.vision_tower(model).blocks[1]
    x = torch.randn(2, 17, 64)
    update = trained_update(matrices=matrices)
    plain = internals.block_forward(block, x)
    with internals.low_rank_qkv({block: update}):
        adapted = internals.block_forward(block, x)
        other = internals.block_forward(internals.vision_tower(model).blocks[0], x)
    torch.testing.assert_close(adapted, lora_reference(block, x, update), rtol=1e-5, atol=1e-5)
    assert not torch.allclose(adapted, plain, atol=1e-4)
    torch.testing.assert_close(other, internals.block_forward(internals.vision_tower(model).blocks[0], x), rtol=0, atol=0)
    torch.testing.assert_close(internals.block_forward(block, x), plain, rtol=0, atol=0)  # gone after the block


def test_an_untrained_update_adds_exactly_nothing_and_a_starts_as_nn_linear(model):
    """B starts at zero; A as nn.Linear's weight (Kaiming uniform, a = √5): U(-1/√D, 1/√D)."""
    block = internals.vision_tower(model).blocks[0]
    torch.manual_seed(0)
    update = internals.LowRankQKV(64, 2, ("q", "k", "v"), scaling=1.0, dropout=0.25)
    assert all(float(b.detach().abs().max()) == 0.0 for b in update.b.values())
    bound = float(max(a.detach().abs().max() for a in update.a.values()))
    assert all(a.shape == (2, 64) for a in update.a.values()) and 0.9 / 64 ** 0.5 < bound <= 1 / 64 ** 0.5
    x = torch.randn(2, 17, 64)
    with internals.low_rank_qkv({block: update.train()}):
        adapted = internals.block_forward(block, x)
    assert torch.equal(adapted, internals.block_forward(block, x))


def test_dropout_acts_on_the_update_input_in_training_only_and_per_matrix():
    """Training: each of q, k, v multiplies its own dropout mask (scaled 1/(1-p)) into the input of its update."""
    update = trained_update(dropout=0.5)
    h = torch.randn(1, 5, 64)
    exact = torch.cat([(h @ update.a[m].T @ update.b[m].T) * update.scaling for m in "qkv"], -1)
    torch.testing.assert_close(update(h), exact)  # eval: no dropout
    update.train()
    torch.manual_seed(1)
    masks = [torch.nn.functional.dropout(torch.ones_like(h), 0.5) for _ in "qkv"]  # the same draws, in order
    torch.manual_seed(1)
    dropped = update(h)
    expected = torch.cat([((h * mask) @ update.a[m].T @ update.b[m].T) * update.scaling
                          for m, mask in zip("qkv", masks)], -1)
    torch.testing.assert_close(dropped, expected)
    assert not torch.equal(masks[0], masks[1])
    assert update.stochastic and not update.eval().stochastic


def test_a_stochastic_update_is_not_shared_across_rows(model):
    """With dropout on, equal prefixes of a text group get their own draws: the shared-prefix path steps aside."""
    block = internals.text_tower(model).blocks[0]
    N, T, P = 4, 9, 3
    x = torch.cat([torch.randn(1, P, 64).expand(N, -1, -1), torch.randn(N, T - P, 64)], 1)
    mask = torch.full((T, T), float("-inf")).triu(1)
    update = trained_update(dropout=0.5).train()
    with internals.low_rank_qkv({block: update}):
        torch.manual_seed(2)
        shared = internals.block_forward_shared(block, x, mask, P, N)
        torch.manual_seed(2)
        plain = internals.block_forward(block, x, mask)
    torch.testing.assert_close(shared, plain, rtol=0, atol=0)
    assert not torch.allclose(shared[0, :P], shared[1, :P])  # each row its own dropout draw


def test_nested_updates_of_one_block_are_refused(model):
    from dear.errors import DearError

    block = internals.vision_tower(model).blocks[0]
    update = trained_update()
    with internals.low_rank_qkv({block: update}):
        with pytest.raises(DearError, match="nested"):
            with internals.low_rank_qkv({block: update}):
                pass
    with pytest.raises(DearError, match="subset of"):
        internals.LowRankQKV(64, 2, ("o",), 1.0, 0.0)
