"""The one module that touches open_clip's internals.

open_clip 3.3.0's ViT blocks run `nn.MultiheadAttention` with one mask for
all heads and no access to per-head outputs, and the vision tower calls its
transformer without a mask. DeAR needs both: per-head outputs at the CLS
query (head decomposition, SPEC §1) and a different additive mask per head
(the role mask, SPEC §5). So this module recomposes the towers from their
parts - reusing the frozen weights in place, never copying them - with the
same arithmetic as open_clip, through `scaled_dot_product_attention`.
CLIP-LoRA adds low-rank updates to the q, k, v projections of the blocks it
adapts: `LowRankQKV` holds one block's, and `low_rank_qkv` applies them to
every block function here while a method's forward runs, never outside it.

Everything else in `dear` goes through the functions below; when open_clip
changes its layout, this is the only file to update. Shapes are batch-first:
B images or texts, T tokens, D width, H heads, d = D / H, E embedding dim.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from dear.errors import DearError


@dataclass(frozen=True)
class Tower:
    """The parts of one open_clip transformer tower that DeAR composes itself."""

    blocks: list[nn.Module]  # ResidualAttentionBlock, batch-first
    width: int  # D
    heads: int  # H

    @property
    def layers(self) -> int:
        return len(self.blocks)

    @property
    def head_dim(self) -> int:
        return self.width // self.heads


# --- checks ----------------------------------------------------------------------

def vision_tower(model: nn.Module) -> Tower:
    """The image tower's blocks, after checking DeAR can recompose it exactly."""
    visual = model.visual
    if not hasattr(visual, "transformer") or not hasattr(visual, "conv1"):
        raise DearError(f"model: image tower {type(visual).__name__} is not an open_clip ViT; DeAR needs a ViT-B/L style tower")
    if getattr(visual, "attn_pool", None) is not None or getattr(visual, "final_ln_after_pool", False):
        raise DearError("model: image towers with attentional pooling are not supported; use a CLS-token ViT")
    if getattr(visual, "pool_type", "tok") != "tok":
        raise DearError(f"model: image pooling '{visual.pool_type}' is not supported; DeAR reads the CLS token ('tok')")
    return _tower(visual.transformer, "image")


def text_tower(model: nn.Module) -> Tower:
    text = _text_module(model)
    if getattr(text, "cls_emb", None) is not None:
        raise DearError("model: text towers with a CLS embedding (CoCa) are not supported")
    if getattr(text, "attn_mask", True) is None:
        raise DearError("model: text towers without a causal mask (text_cfg.no_causal_mask) are not supported; "
                        "DeAR's prompts are read under CLIP's causal mask")
    return _tower(text.transformer, "text")


def _tower(transformer: nn.Module, name: str) -> Tower:
    blocks = list(transformer.resblocks)
    if not getattr(transformer, "batch_first", True):
        raise DearError(f"model: the {name} transformer is sequence-first; open_clip >= 2.24 layout expected")
    for block in blocks:
        if not isinstance(getattr(block, "attn", None), nn.MultiheadAttention) or hasattr(block, "ln_1_kv"):
            raise DearError(f"model: {name} block {type(block).__name__} is not a standard open_clip ResidualAttentionBlock")
    attn = blocks[0].attn
    return Tower(blocks=blocks, width=attn.embed_dim, heads=attn.num_heads)


def _text_module(model: nn.Module) -> nn.Module:
    """CLIP keeps the text tower's parts on the model itself; CustomTextCLIP under `.text`."""
    return model.text if hasattr(model, "text") else model


# --- one block -------------------------------------------------------------------

def _heads(block: nn.Module, x: torch.Tensor, mask: torch.Tensor | None,
           rows: torch.Tensor | None = None) -> torch.Tensor:
    """Per-head attention outputs before the output projection.

    x: [B, T, D]; mask: additive, [T, T] or [H, T, T] (broadcast over B);
    rows: the query positions wanted, [R] or per example [B, R] (None: all T).
    Returns [B, H, T or R, d].
    """
    q, k, v = _qkv(block, x)  # each [B, H, T, d]
    return _attend(q, k, v, mask, rows)


def _qkv(block: nn.Module, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Queries, keys and values per head: [B, T, D] -> three [B, H, T, d] (plus a low-rank update, `low_rank_qkv`)."""
    attn: nn.MultiheadAttention = block.attn
    B, T, D = x.shape
    H = attn.num_heads
    h = block.ln_1(x)
    qkv = F.linear(h, attn.in_proj_weight, attn.in_proj_bias)  # [B, T, 3D]
    update = _QKV_UPDATES.get(block)
    if update is not None:
        qkv = qkv + update(h).to(qkv.dtype)
    return qkv.view(B, T, 3, H, D // H).permute(2, 0, 3, 1, 4).unbind(0)


# --- low-rank updates of the attention in-projection (LoRA) ------------------------

MATRICES = ("q", "k", "v")  # the rows of nn.MultiheadAttention's in_proj_weight [3D, D], in this order


class LowRankQKV(nn.Module):
    """A low-rank update of one block's query, key and value projections (LoRA, as MaxZanella/CLIP-LoRA adds it).

    nn.MultiheadAttention stacks W_q, W_k, W_v as the rows of `in_proj_weight` [3D, D]; for each matrix m of
    `matrices` this adds `scaling` · B_m A_m dropout_m(h) to m's projection of the block's attention input h
    (ln_1(x)), A_m [r, D], B_m [D, r]. Each matrix draws its own dropout mask (one dropout module each), and only
    in training mode. A_m starts as nn.Linear's weight does (Kaiming uniform, a = √5: U(±1/√D)), B_m at zero,
    so an untrained update adds exactly nothing.
    """

    def __init__(self, width: int, rank: int, matrices: tuple[str, ...], scaling: float, dropout: float):
        super().__init__()
        unknown = sorted(set(matrices) - set(MATRICES))
        if unknown or not matrices:
            raise DearError(f"recipe: LoRA matrices {list(matrices)} must be a non-empty subset of {list(MATRICES)}")
        self.width, self.matrices, self.scaling = width, tuple(m for m in MATRICES if m in matrices), scaling
        self.a = nn.ParameterDict({m: nn.Parameter(torch.empty(rank, width)) for m in self.matrices})
        self.b = nn.ParameterDict({m: nn.Parameter(torch.zeros(width, rank)) for m in self.matrices})
        self.dropout = nn.ModuleDict({m: nn.Dropout(dropout) for m in self.matrices})
        for a in self.a.values():
            nn.init.kaiming_uniform_(a, a=5 ** 0.5)

    @property
    def stochastic(self) -> bool:
        """Whether two equal rows may get different updates (dropout on, in training mode)."""
        return self.training and any(d.p > 0 for d in self.dropout.values())

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        """[..., T, D] attention input -> [..., T, 3D] update of the stacked q, k, v projections."""
        parts = []
        for m in MATRICES:
            if m in self.matrices:
                a, b = self.a[m].to(h.dtype), self.b[m].to(h.dtype)
                parts.append(self.dropout[m](h) @ a.T @ b.T * self.scaling)  # [..., T, D]
            else:
                parts.append(torch.zeros_like(h))
        return torch.cat(parts, -1)


_QKV_UPDATES: dict[nn.Module, LowRankQKV] = {}  # block -> its update, only inside `low_rank_qkv`


@contextlib.contextmanager
def low_rank_qkv(updates: dict[nn.Module, LowRankQKV]):
    """Inside the block, every listed block's q, k, v projections carry its update (every function of this module
    that runs a block: `block_forward`, `block_forward_shared`, `head_outputs`, ...); outside, the frozen model is
    untouched, so a model sharing the same CLIP never sees another method's update."""
    clash = [block for block in updates if block in _QKV_UPDATES]
    if clash:
        raise DearError("internals: low-rank updates of the same block were nested; one method's updates at a time")
    _QKV_UPDATES.update(updates)
    try:
        yield
    finally:
        for block in updates:
            _QKV_UPDATES.pop(block, None)


def _attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None,
            rows: torch.Tensor | None = None) -> torch.Tensor:
    """Attention of q [B, H, T_q, d] over k, v [B, H, T, d] (mask [T_q, T] or [H, T_q, T]) -> [B, H, T_q or R, d]."""
    if rows is not None:
        q, mask = _query_rows(q, mask, rows)  # q [B, H, R, d]; mask [R, T], [H, R, T] or [B, 1 or H, R, T]
    if mask is not None:
        # [H, T, T] -> [1, H, T, T]: the same broadcast, but torch's fused CPU kernel takes only 2-D or 4-D
        # masks; a 3-D one falls back to the unfused math kernel (2.9x slower at the demo's shapes)
        mask = (mask.unsqueeze(0) if mask.dim() == 3 else mask).to(q.dtype)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)  # [B, H, T_q or R, d]


def _merge_heads(block: nn.Module, heads: torch.Tensor) -> torch.Tensor:
    """[B, H, T, d] -> attention output [B, T, D] (output projection, bias, layer scale)."""
    B, H, T, d = heads.shape
    out = F.linear(heads.transpose(1, 2).reshape(B, T, H * d), block.attn.out_proj.weight, block.attn.out_proj.bias)
    return block.ls_1(out)


def _mlp(block: nn.Module, x: torch.Tensor) -> torch.Tensor:
    return block.ls_2(block.mlp(block.ln_2(x)))


def head_outputs(block: nn.Module, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
    """Each head's attention output before the output projection: [B, T, D] -> [B, H, T, d].

    Public so that tests can check what a single head reads under a role mask.
    """
    return _heads(block, x, mask)


def block_forward(block: nn.Module, x: torch.Tensor, mask: torch.Tensor | None = None,
                  rows: torch.Tensor | None = None) -> torch.Tensor:
    """One residual block, as open_clip computes it, with an optional per-head mask.

    x: [B, T, D]; mask: [T, T] or [H, T, T] additive (0 open, -inf blocked).
    rows ([R], or [B, R] per example): only these positions' outputs are wanted, as
    in a tower's last block, whose other outputs nobody reads; queries, output
    projection and MLP run for them alone (keys and values for all T), the same
    numbers at a fraction of the work. Returns [B, T, D], or [B, R, D] with rows.
    """
    x = (x if rows is None else _take_rows(x, rows)) + _merge_heads(block, _heads(block, x, mask, rows))
    return x + _mlp(block, x)


def block_forward_shared(block: nn.Module, x: torch.Tensor, mask: torch.Tensor, shared: int, group: int,
                         rows: torch.Tensor | None = None) -> torch.Tensor:
    """`block_forward` for causal sequences whose first `shared` positions are the same in every row of a group.

    x: [N, T, D], N = G * group rows, each group's rows equal at positions < P = `shared` (prompts of one class
    list: start-of-text and the context; CoCoOp: one image's prompts); mask: [T, T] or [H, T, T], causal.
    Under a causal mask position t reads only positions <= t, so those P positions compute the same in every
    row of a group: they run once per group [G, P, D], and every row's later positions read their keys and
    values. The numbers are `block_forward`'s up to float rounding, with P * (group - 1) fewer token rows per
    group. rows ([N, R] per example, all >= P): only those outputs, as in `block_forward`.
    Returns [N, T, D], or [N, R, D] with rows.
    """
    update = _QKV_UPDATES.get(block)
    if update is not None and update.stochastic:  # dropout draws per row: the shared rows would not stay equal
        return block_forward(block, x, mask, rows=rows)
    N, T, D = x.shape
    G, P = N // group, shared
    prefix, suffix = x[::group, :P], x[:, P:]  # [G, P, D], [N, T - P, D]
    q_p, k_p, v_p = _qkv(block, prefix)  # each [G, H, P, d]
    q_s, k_s, v_s = _qkv(block, suffix)  # each [N, H, T - P, d]
    k = torch.cat([k_p.repeat_interleave(group, 0), k_s], 2)  # [N, H, T, d]
    v = torch.cat([v_p.repeat_interleave(group, 0), v_s], 2)
    later = _attend(q_s, k, v, mask[..., P:, :], None if rows is None else rows - P)  # [N, H, T - P or R, d]
    suffix = (suffix if rows is None else _take_rows(suffix, rows - P)) + _merge_heads(block, later)
    suffix = suffix + _mlp(block, suffix)
    if rows is not None:
        return suffix  # [N, R, D]
    prefix = prefix + _merge_heads(block, _attend(q_p, k_p, v_p, mask[..., :P, :P]))  # [G, P, D]
    prefix = prefix + _mlp(block, prefix)
    return torch.cat([prefix.repeat_interleave(group, 0), suffix], 1)  # [N, T, D]


def shared_prefix(x: torch.Tensor, group: int) -> int:
    """How many leading positions of x [N, T, D] are the same in every row of each group of `group` consecutive
    rows (exact equality: the condition under which `block_forward_shared` computes them once)."""
    N, T, D = x.shape
    if group < 2 or N % group:
        return 0
    grouped = x.detach().reshape(N // group, group, T, D)
    same = (grouped == grouped[:, :1]).all(-1).all(1).all(0)  # [T]
    return int(same.int().cumprod(0).sum())


def _take_rows(x: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
    """x [B, T, ...] at positions rows [R] (every example) or [B, R] (each its own) -> [B, R, ...]."""
    if rows.dim() == 1:
        return x[:, rows]
    return x[torch.arange(x.shape[0], device=x.device)[:, None], rows]


def _query_rows(q: torch.Tensor, mask: torch.Tensor | None,
                rows: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Queries q [B, H, T, d] and the mask's rows for positions `rows` only."""
    q = _take_rows(q.transpose(1, 2), rows).transpose(1, 2)  # [B, H, R, d]
    if mask is None:
        return q, None
    if rows.dim() == 1:
        return q, mask[..., rows, :]  # [R, T] or [H, R, T]
    picked = mask[..., rows, :]  # [B, R, T] or [H, B, R, T]
    return q, picked[:, None] if mask.dim() == 2 else picked.transpose(0, 1)  # [B, 1 or H, R, T]


@dataclass
class CLSTerms:
    """A block's direct writes into the residual stream at the CLS position."""

    heads: torch.Tensor  # [B, H, D] each head's share of the attention output
    attn_bias: torch.Tensor  # [D] the output projection's bias (after layer scale)
    mlp: torch.Tensor  # [B, D]


def block_forward_cls_terms(block: nn.Module, x: torch.Tensor, mask: torch.Tensor | None = None) -> tuple[torch.Tensor, CLSTerms]:
    """`block_forward` that also splits the CLS row's update into its terms.

    The attention output at CLS is Σ_h W_O^h o_h + b_O; layer scale is a
    per-channel product, so it distributes over the sum. Only the CLS query
    row is split: no attention matrix is kept.
    """
    heads = _heads(block, x, mask)  # [B, H, T, d]
    attn_out = _merge_heads(block, heads)  # [B, T, D]
    B, H, T, d = heads.shape
    w_o = block.attn.out_proj.weight.view(-1, H, d)  # [D, H, d]
    per_head = torch.einsum("bhd,ehd->bhe", heads[:, :, 0], w_o)  # [B, H, D]
    bias = block.attn.out_proj.bias
    bias = torch.zeros_like(per_head[0, 0]) if bias is None else bias
    scale = _layer_scale(block.ls_1, per_head)
    x = x + attn_out
    mlp = _mlp(block, x)
    terms = CLSTerms(heads=per_head * scale, attn_bias=bias * scale, mlp=mlp[:, 0])
    return x + mlp, terms


def _layer_scale(ls: nn.Module, like: torch.Tensor) -> torch.Tensor:
    """The per-channel factor of an open_clip LayerScale (1 for Identity)."""
    gamma = getattr(ls, "gamma", None)
    return torch.ones_like(like[0, 0]) if gamma is None else gamma


# --- image tower -----------------------------------------------------------------

def image_tokens(model: nn.Module, images: torch.Tensor) -> torch.Tensor:
    """Patch + class + position embeddings and ln_pre: the input of block 1.

    images: [B, 3, S, S] -> [B, 1 + N, D] (CLS first).
    """
    return model.visual._embeds(images.to(image_dtype(model)))


def image_positions(model: nn.Module) -> int:
    """Tokens entering block 1: CLS plus the patches, 1 + (S / patch)^2 (the group O of the role mask)."""
    return int(model.visual.positional_embedding.shape[0])


def image_embedding(model: nn.Module, cls_state: torch.Tensor) -> torch.Tensor:
    """ln_post and projection of final CLS states: [B, D] -> [B, E] (unnormalized)."""
    visual = model.visual
    pooled = visual.ln_post(cls_state)
    return pooled @ visual.proj if visual.proj is not None else pooled


def image_size(model: nn.Module) -> int:
    """Side of the square input images the image tower was built for (e.g. 224)."""
    size = model.visual.image_size
    height, width = (size, size) if isinstance(size, int) else size
    if height != width:
        raise DearError(f"model: non-square image size {height}x{width} is not supported")
    return int(height)


def image_normalization(model: nn.Module) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """Per-channel (mean, std) the tower expects; open_clip's OpenAI values when the model sets none."""
    from open_clip.constants import OPENAI_DATASET_MEAN, OPENAI_DATASET_STD

    mean = getattr(model.visual, "image_mean", None) or OPENAI_DATASET_MEAN
    std = getattr(model.visual, "image_std", None) or OPENAI_DATASET_STD
    return tuple(float(v) for v in mean), tuple(float(v) for v in std)


def image_ln_post(model: nn.Module) -> nn.LayerNorm:
    return model.visual.ln_post


def image_ln_pre(model: nn.Module) -> nn.Module:
    """The norm every image token passes before block 1 (per token: prompts appended before it may take it alone)."""
    return model.visual.ln_pre


def image_dtype(model: nn.Module) -> torch.dtype:
    """The dtype of the image tower's weights (fp16 after `half_precision`)."""
    return model.visual.conv1.weight.dtype


def image_projection(model: nn.Module) -> torch.Tensor:
    """[D, E] projection of the image tower (identity when the tower has none)."""
    visual = model.visual
    if visual.proj is None:
        return torch.eye(visual.ln_post.normalized_shape[0])
    return visual.proj


def encode_image(model: nn.Module, images: torch.Tensor, masks: dict[int, torch.Tensor] | None = None) -> torch.Tensor:
    """`model.encode_image` recomposed from the parts, with optional per-layer masks.

    masks: {1-based layer: [H, T, T]} (as `masks.layer_masks` and `towers.run_image` number them: layer 1 is the
    first block); unmasked layers are plain. A key outside 1..L is an error, never a silently unmasked model.
    """
    tower = vision_tower(model)
    masks = masks or {}
    outside = sorted(layer for layer in masks if not 1 <= layer <= tower.layers)
    if outside:
        raise DearError(f"masks: layer {outside[0]} is outside this image tower's layers 1..{tower.layers} "
                        "(layers are 1-based)")
    x = image_tokens(model, images)  # [B, T, D]
    for layer, block in enumerate(tower.blocks, start=1):
        x = block_forward(block, x, masks.get(layer))
    return image_embedding(model, x[:, 0])


# --- text tower ------------------------------------------------------------------

def text_token_embeddings(model: nn.Module, text: torch.Tensor) -> torch.Tensor:
    """Token embeddings without positions: [B, T] ids -> [B, T, D]."""
    return _text_module(model).token_embedding(text)


class CompactTokenEmbedding(nn.Module):
    """The rows of a token embedding that a closed vocabulary uses, as one small learnable table.

    Stands in for the text tower's `token_embedding` while a model is trained on
    captions of a known vocabulary: the optimizer then updates (and weight-decays)
    a few hundred rows instead of all 49,408, which is most of the parameters.
    An id outside the vocabulary is an error, never a silent zero.
    """

    def __init__(self, full: nn.Embedding, ids: torch.Tensor):
        super().__init__()
        device = full.weight.device
        self.ids = ids.to(device).unique()  # [V] sorted
        self.weight = nn.Parameter(full.weight.detach()[self.ids].clone())  # [V, D]
        lookup = torch.full((full.num_embeddings,), -1, dtype=torch.long, device=device)
        lookup[self.ids] = torch.arange(len(self.ids), device=device)
        self.register_buffer("lookup", lookup, persistent=False)

    def forward(self, text: torch.Tensor) -> torch.Tensor:
        index = self.lookup[text]  # [B, T]
        if (index < 0).any():
            unknown = sorted(set(text[index < 0].tolist()))[:5]
            raise ValueError(f"token ids {unknown} are outside the compact vocabulary")
        return F.embedding(index, self.weight)


@contextlib.contextmanager
def compact_token_embedding(model: nn.Module, ids: torch.Tensor):
    """Train only the token-embedding rows `ids` inside the block; they are written back on exit."""
    module = _text_module(model)
    full = module.token_embedding
    compact = CompactTokenEmbedding(full, ids)
    module.token_embedding = compact
    try:
        yield compact
    finally:
        module.token_embedding = full
        with torch.no_grad():
            full.weight[compact.ids] = compact.weight.detach()


def text_dtype(model: nn.Module) -> torch.dtype:
    """The dtype the text blocks compute in (their weights'; fp16 after `half_precision`)."""
    return text_tower(model).blocks[0].attn.in_proj_weight.dtype


def text_positions(model: nn.Module) -> torch.Tensor:
    """[T, D] learned positional embedding of the text tower."""
    return _text_module(model).positional_embedding


def text_context_length(model: nn.Module) -> int:
    """How many token positions the text tower has positional embeddings for."""
    return int(text_positions(model).shape[0])


def text_causal_mask(model: nn.Module, length: int) -> torch.Tensor:
    """Additive causal mask [length, length] (0 on and below the diagonal, -inf above)."""
    positions = text_positions(model)
    mask = torch.full((length, length), float("-inf"), device=positions.device)
    return mask.triu_(1).to(positions.dtype)


def text_pool_index(model: nn.Module, text: torch.Tensor) -> torch.Tensor:
    """Index of the pooled (end-of-text) token for each text: [B]."""
    module = _text_module(model)
    pool_type = getattr(module, "text_pool_type", getattr(module, "pool_type", "argmax"))
    if pool_type == "argmax":
        return text.argmax(dim=-1)
    if pool_type == "eos":
        eos = getattr(module, "text_eos_id", getattr(module, "eos_id", None))
        return (text == eos).int().argmax(dim=-1)
    if pool_type == "last":
        return torch.full((text.shape[0],), text.shape[1] - 1, dtype=torch.long, device=text.device)
    raise DearError(f"model: text pooling '{pool_type}' is not supported")


def text_embedding(model: nn.Module, x: torch.Tensor, pool_index: torch.Tensor) -> torch.Tensor:
    """ln_final, pooling at `pool_index` and projection: [B, T, D] -> [B, E]."""
    module = _text_module(model)
    x = module.ln_final(x)
    pooled = x[torch.arange(x.shape[0], device=x.device), pool_index]  # [B, D]
    projection = module.text_projection
    if projection is None:
        return pooled
    return projection(pooled) if isinstance(projection, nn.Linear) else pooled @ projection


def trim_text_padding(model: nn.Module, text: torch.Tensor) -> torch.Tensor:
    """Drop trailing columns that are padding in every row: [B, T] -> [B, T'].

    Exact for argmax/eos pooling: under the causal mask no token reads a later
    one, so padding after the pooled token never changes the embedding. Texts
    are then ~5x cheaper to encode. With 'last' pooling nothing is trimmed.
    """
    module = _text_module(model)
    pool_type = getattr(module, "text_pool_type", getattr(module, "pool_type", "argmax"))
    pad_id = getattr(module, "pad_id", 0)
    if pool_type not in ("argmax", "eos") or text.numel() == 0:
        return text
    used = (text != pad_id).any(dim=0).nonzero()
    keep = int(used.max()) + 1 if used.numel() else 1
    return text[:, :keep]


def encode_text(model: nn.Module, text: torch.Tensor) -> torch.Tensor:
    """`model.encode_text` recomposed from the parts (unnormalized).

    `text` may be shorter than the context length (see `trim_text_padding`).
    """
    tower = text_tower(model)
    x = text_token_embeddings(model, text) + text_positions(model)[: text.shape[1]]  # [B, T, D]
    mask = text_causal_mask(model, x.shape[1])
    for block in tower.blocks:
        x = block_forward(block, x, mask)
    return text_embedding(model, x, text_pool_index(model, text))


def half_precision(model: nn.Module) -> nn.Module:
    """The authors' fp16 CLIP, in place: OpenAI's `convert_weights` (open_clip's `convert_weights_to_lp`) turns
    linear, convolution and attention weights and both projections to fp16; embeddings and norms stay fp32,
    and every LayerNorm computes in fp32 and casts back, as OpenAI's CLIP LayerNorm does."""
    from open_clip.model import convert_weights_to_lp
    from open_clip.transformer import LayerNorm, LayerNormFp32

    convert_weights_to_lp(model, torch.float16)
    for module in model.modules():
        if type(module) in (LayerNorm, nn.LayerNorm):
            module.__class__ = LayerNormFp32
    return model


def logit_scale(model: nn.Module) -> torch.Tensor:
    """CLIP's temperature τ = exp(logit_scale), a scalar tensor."""
    return model.logit_scale.exp()
