"""Contrastive (CLIP) pretraining of the embedded model on the world's corpus.

A fixed number of steps, never a time budget: the same params give the same
weights on the same machine and thread count. Each step draws its batch from
`dear.data.world.corpus_batch` (generated in memory, never a test scene).
"""

from __future__ import annotations

import logging
import math

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from dear.data import world as world_data
from dear.model import internals
from dear.model.clip import normalizer
from dear.runtime.progress import Pace, track
from dear.compute.transforms import INTERPOLATION, cpu_seeded, derived_seed

log = logging.getLogger("dear.pretrain")
MAX_LOGIT_SCALE = math.log(100.0)
# For sequences this short (65 image, <= 32 text tokens), torch's CPU flash-attention
# backward took half of the step; the math kernel is 2x faster (benchmarks/pretrain_step.py).
ATTENTION = [SDPBackend.MATH]
# On CUDA torch's own pick (flash / memory-efficient kernels) is the fast one.
ANY_ATTENTION = [SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.CUDNN_ATTENTION, SDPBackend.MATH]


def pretrain(model: torch.nn.Module, tokenizer, world, backbone, excluded: set[tuple], log_every: int = 50,
             precision: str | None = None) -> list[dict]:
    """Train `model` in place, on its device, for `backbone.steps` steps; returns the loss log (every `log_every` steps).

    Only the token embeddings of the corpus's vocabulary are trained (a few hundred of
    49,408 rows): the same updates for those rows, and the optimizer no longer walks
    the whole table every step (`benchmarks/pretrain_step.py`). `precision` defaults to
    `backbone.precision` (the CPU setting; the stage passes compute.precision on CUDA).
    """
    with torch.no_grad():  # open_clip starts from CLIP's 0.07; a lower tau is a sharper start (docs/world.md)
        model.logit_scale.fill_(math.log(1.0 / backbone.init_temperature))
    vocabulary = tokenizer(world_data.caption_vocabulary(world)).flatten()  # with SOT, EOT and padding ids
    with internals.compact_token_embedding(model, vocabulary):
        return _train(model, tokenizer, world, backbone, excluded, log_every, precision or backbone.precision)


def _train(model: torch.nn.Module, tokenizer, world, backbone, excluded: set[tuple], log_every: int,
           precision: str) -> list[dict]:
    device = model.logit_scale.device
    attention = ATTENTION if device.type == "cpu" else ANY_ATTENTION
    optimizer = _optimizer(model, backbone)
    schedule = lr_schedule(backbone)
    mean, std = normalizer(model)
    model.train()
    history, running = [], 0.0
    augment = augmentation(backbone.augmentation, world.image_size)
    pace = Pace(backbone.steps)
    for step in track(range(backbone.steps), "pretraining"):
        images, captions = world_data.corpus_batch(world, backbone, step, excluded)
        pixels = torch.from_numpy(images).permute(0, 3, 1, 2).float() / 255.0                # [B, 3, H, W]
        pixels = (augmented(pixels, augment, backbone.seed, step) - mean) / std
        tokens = tokenizer(captions)                                                          # [B, T]
        for group in optimizer.param_groups:
            group["lr"] = schedule(step)
        loss = contrastive_step(model, optimizer, pixels.to(device), tokens.to(device), precision, attention)
        running += loss
        if (step + 1) % log_every == 0 or step + 1 == backbone.steps:
            count = (step % log_every) + 1
            history.append({"step": step + 1, "loss": running / count, "lr": schedule(step)})
            log.info("pretraining: loss %.4f at %s", running / count, pace.line(step + 1))
            running = 0.0
    model.eval()
    return history


def augmentation(aug, size: int):
    """The corpus images' random resized crop and flip (None when both are off)."""
    from torchvision import transforms as T

    if tuple(aug.crop_scale) == (1.0, 1.0) and aug.flip_prob == 0.0:
        return None
    return T.Compose([T.RandomResizedCrop(size, scale=tuple(aug.crop_scale), interpolation=INTERPOLATION[aug.interpolation]),
                      T.RandomHorizontalFlip(aug.flip_prob)])


def augmented(pixels: torch.Tensor, augment, seed: int, step: int) -> torch.Tensor:
    """Each image of a corpus batch [B, 3, H, W] (0..1) cropped and flipped on its own, seeded by (seed, step)."""
    if augment is None:
        return pixels
    with cpu_seeded(derived_seed(seed, step)):
        return torch.stack([augment(image) for image in pixels]).clamp_(0.0, 1.0)


def contrastive_step(model, optimizer, pixels: torch.Tensor, tokens: torch.Tensor, precision: str,
                     attention: list[SDPBackend] = ATTENTION) -> float:
    """One symmetric InfoNCE step on the `attention` kernels; returns the loss.

    Captions are encoded without their all-padding tail (exact under the causal
    mask and argmax pooling, ~1/3 of the text tower's work).
    """
    autocast = torch.autocast(pixels.device.type, dtype=torch.bfloat16, enabled=precision == "bf16")
    with autocast, sdpa_kernel(attention):
        image = F.normalize(model.encode_image(pixels).float(), dim=-1)    # [B, D]
        captions = internals.trim_text_padding(model, tokens)                  # [B, T']
        text = F.normalize(internals.encode_text(model, captions).float(), dim=-1)  # [B, D]
    logits = model.logit_scale.exp() * image @ text.T                      # [B, B]
    target = torch.arange(logits.shape[0], device=logits.device)
    loss = (F.cross_entropy(logits, target) + F.cross_entropy(logits.T, target)) / 2
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    with torch.no_grad():
        model.logit_scale.clamp_(0, MAX_LOGIT_SCALE)
    return float(loss.detach())


def _optimizer(model: torch.nn.Module, backbone) -> torch.optim.Optimizer:
    """AdamW; gains, biases, embeddings-free scalars and the logit scale get no decay (open_clip's rule).

    The fused kernel updates all tensors in one pass instead of looping over
    them (the 49408-row token table dominates the parameter count).
    """
    decay, no_decay = [], []
    for name, param in model.named_parameters():
        exempt = param.ndim < 2 or "ln" in name or "bias" in name or "logit_scale" in name
        (no_decay if exempt else decay).append(param)
    groups = [{"params": decay, "weight_decay": backbone.weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=backbone.lr, betas=(0.9, 0.98), eps=1.0e-6, fused=True)


def lr_schedule(backbone):
    """Linear warm-up to `lr`, then cosine decay to zero."""
    warmup = max(1, int(backbone.steps * backbone.warmup_fraction))

    def at(step: int) -> float:
        if step < warmup:
            return backbone.lr * (step + 1) / warmup
        progress = (step - warmup) / max(1, backbone.steps - warmup)
        return backbone.lr * 0.5 * (1.0 + math.cos(math.pi * progress))

    return at
