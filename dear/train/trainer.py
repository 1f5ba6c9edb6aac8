"""The one trainer of every method: Dassl's schedule, resumable.

What differs between methods lives in the model (`Method`), the objective
(`Method.objective`) and the recipe (`train.recipes`: AdamW for the token
methods, SGD for CoOp); the loop is the same. The learning rate follows
Dassl's: constant `warmup_lr` for the warm-up epochs, then a cosine over
the epochs, changed once per epoch (MMRL and CoOp both step it per epoch). Checkpoints every
`train.checkpoint_every` steps carry the full state, and the batches depend
only on (seed, step), so a run killed at any moment and restarted with the
same command ends with the same bytes as one that never stopped (on CPU).
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from dear.errors import DearError
from dear.model.dear import Adapted
from dear.model.losses import Weights, objective
from dear import device as devices
from dear.params import Compute, Recipe, Train
from dear.progress import track
from dear.train import checkpoint
from dear.train.data import Schedule, ShotImages, Shots, loader, train_transform
from dear.train.views import ViewCache

log = logging.getLogger("dear.train")


class EpochCosine:
    """LR factor of step s (Dassl's ConstantWarmupScheduler over CosineAnnealingLR, stepped per epoch).

    Epoch e < W: warmup_lr / lr; epoch e >= W: 0.5 (1 + cos(π (e - W) / E)), E = all epochs.
    """

    def __init__(self, steps_per_epoch: int, epochs: int, warmup_epochs: int, warmup_factor: float):
        self.steps_per_epoch, self.epochs = steps_per_epoch, epochs
        self.warmup_epochs, self.warmup_factor = warmup_epochs, warmup_factor

    def __call__(self, step: int) -> float:
        epoch = step // self.steps_per_epoch
        if epoch < self.warmup_epochs:
            return self.warmup_factor
        return 0.5 * (1.0 + math.cos(math.pi * (epoch - self.warmup_epochs) / max(1, self.epochs)))


@dataclass
class Run:
    """One training run: the model, its shots and where its checkpoint lives."""

    model: Adapted
    shots: Shots
    params: Train
    recipe: Recipe
    epochs: int
    weights: Weights
    compute: Compute
    seed: int
    image_size: int
    normalization: tuple
    checkpoint: Path
    params_hash: str


@dataclass
class Loop:
    """Optimizer state that a checkpoint saves and restores."""

    optimizer: torch.optim.Optimizer
    scheduler: torch.optim.lr_scheduler.LambdaLR
    scaler: torch.amp.GradScaler
    schedule: Schedule


def fit(run: Run) -> list[dict]:
    """Train `run.model` in place; returns the log rows (step, epoch, loss terms, accuracy, lr, alpha, seconds)."""
    p, recipe = run.params, run.recipe
    device = devices.resolve(run.compute)
    use_bf16 = devices.uses_bf16(device, run.compute.precision)
    devices.fast_matmuls(device)  # fp32 matmuls outside autocast (frozen features)
    model = run.model.to(device).train()
    loop = make_loop(model, recipe, Schedule(n=len(run.shots.paths), batch_size=recipe.batch_size, epochs=run.epochs,
                                             seed=run.seed), device)
    rows, start, elapsed = [], 0, 0.0
    fade_steps = round(p.fade_in_epochs * loop.schedule.steps_per_epoch) if model.has_tokens else 0
    model.fade = fade_at(0, fade_steps)
    state = checkpoint.load(run.checkpoint, run.params_hash)
    if state is not None:
        rows, start, elapsed = _restore(state, model, loop)
    transform = train_transform(p.augmentation, run.image_size, *run.normalization)
    weights = run.weights
    classnames = run.shots.classnames
    frozen_text = model.frozen_text_features(classnames)  # [C, E], computed once
    began = time.perf_counter() - elapsed
    if p.views:
        cache = ViewCache(model, run.shots, transform, p.views, run.seed, max(64, recipe.batch_size),
                          with_frozen=_needs_frozen(model, weights), autocast=_autocast(device, use_bf16))
        batches = cached_batches(cache, loop.schedule, run.shots, start)
    else:
        batches = loader(ShotImages(run.shots, loop.schedule, transform), start, run.compute.workers,
                         pin_memory=device.type == "cuda")
    for step, (images, labels) in zip(track(range(start, loop.schedule.total_steps), f"train {model.method.name}",
                                            total=loop.schedule.total_steps - start), batches):
        lr = loop.scheduler.get_last_lr()[0]
        model.fade = fade_at(step + 1, fade_steps)
        images, labels = _to(images, device), labels.to(device, non_blocking=True)
        terms, alpha, correct = loss_of_batch(model, images, labels, classnames, frozen_text, weights, use_bf16)
        if not torch.isfinite(terms.total):
            _stop_on_nan(step, terms, run.checkpoint)
        update(loop, terms.total)
        rows.append({"step": step, "epoch": step // loop.schedule.steps_per_epoch, **terms.as_floats(),
                     "accuracy": 100.0 * correct / len(labels), "lr": lr, "fade": model.fade,
                     "alpha": [float(a) for a in alpha.detach().float().cpu()],
                     "seconds": time.perf_counter() - began})
        done = step + 1
        if done % p.checkpoint_every == 0 or done == loop.schedule.total_steps:
            _check_finite(model, step, run.checkpoint)
            if done == loop.schedule.total_steps:  # no next step's loss looks at the last update: look now
                with torch.no_grad():
                    after, _, _ = loss_of_batch(model, images, labels, classnames, frozen_text, weights, use_bf16)
                if not torch.isfinite(after.total):
                    _stop_on_nan(step, after, run.checkpoint, "after the last update")
            checkpoint.save(run.checkpoint, _state(model, loop, done, rows, run.params_hash))
    model.eval()
    return rows


def fade_at(steps: int, fade_steps: int) -> float:
    """The tokens' fade-in weight during step `steps` (1-based; 0 = before training): linear to 1 over `fade_steps`."""
    return 1.0 if fade_steps == 0 else min(1.0, steps / fade_steps)


def cached_batches(cache: ViewCache, schedule: Schedule, shots: Shots, start_step: int):
    """((prefix, frozen CLS), labels) of every step from `start_step`, from the view bank."""
    orders: dict[int, list[int]] = {}
    for items in schedule.batches(start_step):
        epoch = items[0][0]
        if epoch not in orders:
            orders = {epoch: schedule.order(epoch)}
        rows = [orders[epoch][slot] for _, slot in items]
        yield cache.batch(epoch, rows), torch.tensor([shots.labels[row] for row in rows])


def _to(images, device: torch.device):
    """Pixels [B, 3, S, S], or a cached (prefix, frozen CLS) pair, on `device`."""
    if isinstance(images, torch.Tensor):
        return images.to(device, non_blocking=True)
    return tuple(None if part is None else part.to(device) for part in images)


def _needs_frozen(model: Adapted, weights: Weights) -> bool:
    """Whether the objective has the image regularizer (the untouched model's CLS feature)."""
    return model.method.objective != "ce" and weights.reg > 0


def _autocast(device: torch.device, use_bf16: bool):
    return torch.autocast(device.type, dtype=torch.bfloat16, enabled=use_bf16)


def loss_of_batch(model: Adapted, images, labels: torch.Tensor, classnames: list[str],
                  frozen_text: torch.Tensor, weights: Weights, use_bf16: bool):
    """Forward pass and the method's objective for one batch: (LossTerms, alpha [S+1], correct predictions).

    `images`: pixels [B, 3, S, S], or (frozen blocks' output [B, 1+N, D], frozen CLS [B, E] or None) from a
    view bank. Correct counts the output the method reports on base classes (the fused logits; CoOp's prompt).
    """
    kind = model.method.objective
    with _autocast(labels.device, use_bf16):
        if isinstance(images, torch.Tensor):
            out = model.image_forward(images, with_frozen=_needs_frozen(model, weights))  # [B, S+1, E]
        else:
            prefix, frozen = images
            out = model.forward_from_prefix(prefix, _needs_frozen(model, weights), frozen)
        text = model.text_features(classnames)  # [C, E]
        alpha = model.alpha  # [S+1]
        streams = model.logits_from(out.features, text)  # [B, S+1, C]
        fused = model.fused_logits(streams, alpha)  # [B, C]
        terms = objective(kind, streams, fused, labels, alpha, out.features[:, 0], out.frozen_cls, text, frozen_text,
                          weights)
    correct = int((fused.detach().argmax(1) == labels).sum())
    return terms, alpha, correct


def update(loop: "Loop", loss: torch.Tensor) -> None:
    """Backward pass, optimizer and scheduler step."""
    loop.optimizer.zero_grad(set_to_none=True)
    loop.scaler.scale(loss).backward()
    loop.scaler.step(loop.optimizer)
    loop.scaler.update()
    loop.scheduler.step()


def make_loop(model: Adapted, recipe: Recipe, schedule: Schedule, device: torch.device) -> Loop:
    """The recipe's optimizer over the learnable tensors and Dassl's per-epoch schedule (SPEC §7)."""
    learnable = [param for param in model.parameters() if param.requires_grad]
    if recipe.optimizer == "sgd":  # Dassl's SGD: no dampening, no Nesterov
        optimizer = torch.optim.SGD(learnable, lr=recipe.lr, momentum=recipe.momentum, weight_decay=recipe.weight_decay)
    else:
        optimizer = torch.optim.AdamW(learnable, lr=recipe.lr, weight_decay=recipe.weight_decay)
    factor = EpochCosine(schedule.steps_per_epoch, schedule.epochs, recipe.warmup_epochs, recipe.warmup_lr / recipe.lr)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, factor)
    scaler = torch.amp.GradScaler(device.type, enabled=False)  # bf16 needs no loss scaling; kept for the checkpoint format
    return Loop(optimizer, scheduler, scaler, schedule)


def _state(model: Adapted, loop: Loop, step: int, rows: list[dict], params_hash: str) -> dict:
    return {
        "model": model.trainable_state(),
        "optimizer": loop.optimizer.state_dict(),
        "scheduler": loop.scheduler.state_dict(),
        "scaler": loop.scaler.state_dict(),
        "rng": checkpoint.rng_states(),
        "step": step,
        "log": rows,
        "params_hash": params_hash,
    }


def _restore(state: dict, model: Adapted, loop: Loop) -> tuple[list[dict], int, float]:
    model.load_trainable(state["model"], "checkpoint")
    loop.optimizer.load_state_dict(state["optimizer"])
    loop.scheduler.load_state_dict(state["scheduler"])
    loop.scaler.load_state_dict(state["scaler"])
    checkpoint.set_rng_states(state["rng"])
    rows = state["log"]
    return rows, state["step"], rows[-1]["seconds"] if rows else 0.0


def _check_finite(model: Adapted, step: int, path: Path) -> None:
    """Every learnable tensor finite before it is saved: a NaN must never become the last good checkpoint."""
    bad = [name for name, param in model.named_parameters() if param.requires_grad and not torch.isfinite(param).all()]
    if bad:
        raise DearError(f"step {step}: the learnable tensor {bad[0]} is not finite after the update ({len(bad)} such "
                        f"tensors); likely cause: {_LIKELY}; {_kept(path)}")


_LIKELY = "a learning rate too high (train.recipes.*.lr) or bf16 overflow (try compute.precision: fp32)"


def _kept(path: Path) -> str:
    return f"the last good checkpoint {path} is kept" if path.is_file() else "no checkpoint was written yet"


def _stop_on_nan(step: int, terms, path: Path, when: str = "") -> None:
    values = ", ".join(f"{k}={v:.4g}" for k, v in terms.as_floats().items())
    raise DearError(f"step {step}: the loss is not finite{' ' + when if when else ''} ({values}); "
                    f"likely cause: {_LIKELY}; {_kept(path)}")
