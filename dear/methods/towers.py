"""Prompt tokens in either tower at given layers: the shared block every method's forward uses.

A method hands over its learnable tokens per layer; these functions put them
into the sequence and run the frozen blocks (through `dear.model.internals`,
the one module that touches open_clip):
- text: tokens right after start-of-text. At the layer named `insert_at` the
  sequence grows by n (MMRL, DeAR: the pooled end-of-text index moves by n);
  at every other layer listed they replace positions 1..n (deep prompts of
  MaPLe and PromptSRC, MMRL's later layers), or mix with the previous layer's
  outputs there (`compose`: MMRL++). CoOp's shallow context replaces
  the token embeddings themselves, before any layer (`prompt_embeddings`).
- image: tokens after the patches. At `append_at` the sequence grows by n;
  at every other layer listed they replace the last n positions. A token
  function may read the previous layer's output at those positions (DeAR's
  and MMRL++'s beta composition).
Layers are 1-based. Only the rows read after the last block are computed
there (CLS and the tokens; each prompt's end-of-text row): keys and values
still come from every position, so the numbers are those of the full block.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import copy

import torch
import torch.nn.functional as F

from dear.methods import prompts
from dear.model import internals as oc
from dear.model.masks import fade_in

TokenFn = Callable[[int, torch.Tensor | None], torch.Tensor]  # (layer, previous tokens [B, n, D] | None) -> [B|1, n, D]
ComposeFn = Callable[[int, torch.Tensor, torch.Tensor], torch.Tensor]  # (layer, tokens, previous) -> [C, n, D]


@dataclass
class TextInput:
    """Tokenized prompts of one class list, trimmed after the last end-of-text (never read under a causal mask)."""

    tokens: torch.Tensor  # [C, T] ids
    embeddings: torch.Tensor  # [C, T, D] token embeddings, no positions
    pool: torch.Tensor  # [C] end-of-text index


def text_input(clip, tokenizer, texts: list[str]) -> TextInput:
    device = oc.text_positions(clip).device
    tokens = tokenizer(texts).to(device)  # [C, T_max]
    pool = oc.text_pool_index(clip, tokens)
    tokens = tokens[:, : int(pool.max()) + 1]
    with torch.no_grad():
        embeddings = oc.text_token_embeddings(clip, tokens)
    return TextInput(tokens, embeddings, pool)


def with_positions(clip, embeddings: torch.Tensor) -> torch.Tensor:
    """[..., T, D] token embeddings -> the input of text layer 1 (positions added, in the tower's dtype)."""
    return (embeddings + oc.text_positions(clip)[: embeddings.shape[-2]]).to(oc.text_dtype(clip))


def prompt_embeddings(embeddings: torch.Tensor, context: torch.Tensor) -> torch.Tensor:
    """CoOp's prompt: positions 1..M of [C, T, D] (or [B, C, T, D]) replaced by context [M, D] (or [B, M, D])."""
    M = context.shape[-2]
    context = context.to(embeddings.dtype)
    if embeddings.dim() == 4 and context.dim() == 3:  # per image: [B, M, D] into [B, C, T, D]
        context = context[:, None].expand(-1, embeddings.shape[1], -1, -1)
    else:
        context = context.expand(*embeddings.shape[:-2], M, -1)
    return torch.cat([embeddings[..., :1, :], context, embeddings[..., 1 + M:, :]], -2)


def run_text(clip, tower: oc.Tower, x: torch.Tensor, pool: torch.Tensor, first: int = 1,
             tokens: dict[int, torch.Tensor] | None = None, insert_at: int | None = None,
             fade: float = 1.0, group: int | None = None, compose: ComposeFn | None = None) -> torch.Tensor:
    """Text layers `first`..L on x [C, T, D] -> normalized features [C, E].

    tokens[l]: [n, D] or [C, n, D], the tokens after start-of-text entering layer l (see the module doc).
    `fade` < 1 scales the other positions' reads of inserted tokens in their softmax (ours: the fade-in).
    `group`: rows come in groups of this many prompts that may share their first positions (default: all C;
    CoCoOp: one image's prompts); what they share runs once per group (`text_block`).
    `compose(layer, tokens, previous)`: at a layer whose tokens replace earlier ones, what enters from the
    layer's tokens [C, n, D] and the previous layer's outputs at their positions [C, n, D] (MMRL++'s
    progressive composition); None: the layer's tokens alone.
    """
    tokens = tokens or {}
    n, shared, group = 0, None, group or x.shape[0]
    blocks = tower.blocks[first - 1:]
    for i, block in enumerate(blocks):
        layer = first + i
        if layer in tokens:
            new = tokens[layer].to(x.dtype).expand(x.shape[0], -1, -1)  # [C, n, D]
            if compose is not None and layer != insert_at:
                new = compose(layer, new, x[:, 1:1 + new.shape[1]]).to(x.dtype)
            n = new.shape[1] if layer == insert_at else n
            kept = x[:, 1:] if layer == insert_at else x[:, 1 + new.shape[1]:]
            x = torch.cat([x[:, :1], new, kept], 1)
            shared = None
        if shared is None:  # a shared block writes its shared positions alike in every row: they stay shared
            shared = shared_positions(x, pool + n, group)
        mask = oc.text_causal_mask(clip, x.shape[1]).to(x.device)
        if insert_at is not None and n and fade < 1.0:
            positions = torch.arange(x.shape[1], device=x.device)
            mask = fade_in(mask, (positions >= 1) & (positions <= n), fade)
        last = (pool + n)[:, None] if i == len(blocks) - 1 else None
        x = text_block(block, x, mask, shared, group, rows=last)  # last: [C, 1, D]
    return F.normalize(oc.text_embedding(clip, x, torch.zeros_like(pool)), dim=-1)


SHARED_MIN = 2  # shared leading positions worth a block of their own (start-of-text alone: not)


def shared_positions(x: torch.Tensor, pool: torch.Tensor, group: int) -> int:
    """The leading positions of x [C, T, D] every prompt of a group shares, before every end-of-text `pool` [C].

    Prompts of one class list begin alike (start-of-text, the context or "a photo of a", the tokens after it):
    under the causal mask those positions never read a class name, so they compute the same in every row.
    They are found by exact comparison (`internals.shared_prefix`).
    """
    return min(oc.shared_prefix(x, group), int(pool.min()))


def text_block(block, x: torch.Tensor, mask: torch.Tensor, shared: int, group: int,
               rows: torch.Tensor | None = None) -> torch.Tensor:
    """One causal text block on x [C, T, D], its first `shared` positions (`shared_positions`) run once per group.

    The same numbers up to float rounding; CoCoOp's text pass on the embedded world costs 0.65x.
    """
    if shared < SHARED_MIN:
        return oc.block_forward(block, x, mask, rows=rows)
    return oc.block_forward_shared(block, x, mask, shared, group, rows=rows)


def run_image(tower: oc.Tower, x: torch.Tensor, first: int, tokens: TokenFn | None = None,
              layers: range | None = None, append_at: int | None = None,
              masks: dict[int, torch.Tensor] | None = None, fade: float = 1.0) -> torch.Tensor:
    """Image layers `first`..L on x [B, 1+N(+n), D] -> the last block's CLS and token rows [B, 1+n, D].

    `tokens(layer, previous)` gives the tokens entering each layer of `layers`; `masks[layer]`: [H, T, T].
    """
    layers = layers or range(0)
    n = 0  # tokens at the end of x (the frozen prefix holds none: it stops before the first token layer)
    blocks = tower.blocks[first - 1:]
    read = None
    for i, block in enumerate(blocks):
        layer = first + i
        if tokens is not None and layer in layers:
            previous = x[:, x.shape[1] - n:] if layer != append_at and n else None
            new = tokens(layer, previous).to(x.dtype).expand(x.shape[0], -1, -1)  # [B, n, D]
            kept = x if layer == append_at else x[:, : x.shape[1] - new.shape[1]]
            x = torch.cat([kept, new], 1)
            n = new.shape[1]
        mask = masks.get(layer) if masks else None
        if n and fade < 1.0:
            positions = torch.arange(x.shape[1], device=x.device)
            mask = fade_in(mask, positions >= x.shape[1] - n, fade)
        if i == len(blocks) - 1:
            positions = torch.arange(x.shape[1], device=x.device)
            read = positions[(positions == 0) | (positions >= x.shape[1] - n)]  # [1+n]
        x = oc.block_forward(block, x, mask, rows=read)
    return x



@torch.no_grad()
def text_hidden(tower: oc.Tower, x: torch.Tensor, upto: int, mask: torch.Tensor, pool: torch.Tensor) -> torch.Tensor:
    """The output [C, T, D] of text layers 1..`upto` (0: x itself): what precedes the first token layer."""
    shared = shared_positions(x, pool, x.shape[0])
    for block in tower.blocks[:upto]:
        x = text_block(block, x, mask, shared, x.shape[0])
    return x


@torch.no_grad()
def encode_texts(clip, tower: oc.Tower, tokenizer, texts: list[str]) -> torch.Tensor:
    """The untouched model's normalized features [C, E] of hand-written prompts."""
    prompt = text_input(clip, tokenizer, texts)
    return run_text(clip, tower, with_positions(clip, prompt.embeddings), prompt.pool)


@torch.no_grad()
def template_features(clip, tokenizer, templates: list[str], classnames: list[str], chunk: int = 1000) -> torch.Tensor:
    """The untouched model's class features [C, E] averaged over prompts: per class the mean of the unnormalized
    features of every template, then normalized, in fp32 whatever the model's precision (PromptSRC's teacher, TAC's
    `templates` option). The prompts are encoded `chunk` at a time: independent rows, the same features in chunks
    of any size."""
    texts = [prompts.hand_written(t, name).text for t in templates for name in classnames]
    features = _untouched_text_features(clip, tokenizer, texts, chunk)  # [T C, E]
    mean = features.view(len(templates), len(classnames), -1).mean(0)  # [C, E], of unnormalized features
    return (mean / mean.norm(dim=-1, keepdim=True)).float()


def text_list_features(clip, tokenizer, texts: list[list[str]], chunk: int = 1000) -> torch.Tensor:
    """The untouched model's class features [C, E] from each class's own texts (TAC's descriptions: their
    encode_text(texts).mean(dim=0) per class, then the [C, E] matrix normalized), in fp32."""
    features = _untouched_text_features(clip, tokenizer, [text for own in texts for text in own], chunk)
    mean = torch.stack([part.mean(0) for part in features.split([len(own) for own in texts])])  # [C, E]
    return (mean / mean.norm(dim=-1, keepdim=True)).float()


def _untouched_text_features(clip, tokenizer, texts: list[str], chunk: int) -> torch.Tensor:
    """The untouched model's unnormalized text features [T, E] in fp32, `chunk` texts at a time."""
    clip = clip if oc.text_dtype(clip) == torch.float32 else copy.deepcopy(clip).float()
    device = oc.text_positions(clip).device
    tokens = tokenizer(texts)
    return torch.cat([oc.encode_text(clip, oc.trim_text_padding(clip, part.to(device)))
                      for part in tokens.split(chunk)])
