"""The one trainer of every method: AdamW, constant warm-up then cosine, resumable.

What differs between methods lives in the model (`Method`) and the loss
(`regularized`); the loop is the same. Checkpoints every
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
from dear.params import Train
from dear.progress import track
from dear.train import checkpoint
from dear.train.data import Schedule, ShotImages, Shots, loader, train_transform

log = logging.getLogger("dear.train")


class WarmupCosine:
    """LR factor of step s: warmup_lr / lr for the warm-up steps, then a cosine from 1 to 0 over the rest."""

    def __init__(self, warmup_steps: int, total_steps: int, warmup_factor: float):
        self.warmup_steps, self.total_steps, self.warmup_factor = warmup_steps, total_steps, warmup_factor

    def __call__(self, step: int) -> float:
        if step < self.warmup_steps:
            return self.warmup_factor
        span = max(1, self.total_steps - self.warmup_steps)
        return 0.5 * (1.0 + math.cos(math.pi * min(step - self.warmup_steps, span) / span))


def resolve_device(choice: str) -> torch.device:
    if choice == "cuda" and not torch.cuda.is_available():
        raise DearError("train.device: cuda requested but no CUDA device is visible; use auto or cpu")
    if choice == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(choice)


@dataclass
class Run:
    """One training run: the model, its shots and where its checkpoint lives."""

    model: Adapted
    shots: Shots
    params: Train
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
    """Train `run.model` in place; returns the log rows (step, epoch, loss terms, lr, alpha, seconds)."""
    p = run.params
    device = resolve_device(p.device)
    use_bf16 = device.type == "cuda" and p.precision == "bf16"
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True  # fp32 matmuls outside autocast (frozen features)
        torch.backends.cudnn.allow_tf32 = True
    model = run.model.to(device).train()
    loop = make_loop(model, p, Schedule(n=len(run.shots.paths), batch_size=p.batch_size, epochs=p.epochs, seed=run.seed),
                     device)
    rows, start, elapsed = [], 0, 0.0
    state = checkpoint.load(run.checkpoint, run.params_hash)
    if state is not None:
        rows, start, elapsed = _restore(state, model, loop)
    dataset = ShotImages(run.shots, loop.schedule, train_transform(p.augmentation, run.image_size, *run.normalization))
    weights = Weights(p.lambda_img, p.lambda_txt, p.lambda_fus)
    classnames = run.shots.classnames
    frozen_text = model.frozen_text_features(classnames)  # [C, E], computed once
    began = time.perf_counter() - elapsed
    batches = loader(dataset, start, p.workers, pin_memory=device.type == "cuda")
    for step, (images, labels) in zip(track(range(start, loop.schedule.total_steps), f"train {model.method.name}",
                                            total=loop.schedule.total_steps - start), batches):
        lr = loop.scheduler.get_last_lr()[0]
        images, labels = images.to(device, non_blocking=True), labels.to(device, non_blocking=True)
        terms, alpha = loss_of_batch(model, images, labels, classnames, frozen_text, weights, use_bf16)
        if not torch.isfinite(terms.total):
            _stop_on_nan(step, terms, run.checkpoint)
        update(loop, terms.total)
        rows.append({"step": step, "epoch": step // loop.schedule.steps_per_epoch, **terms.as_floats(), "lr": lr,
                     "alpha": [float(a) for a in alpha.detach().float().cpu()],
                     "seconds": time.perf_counter() - began})
        done = step + 1
        if done % p.checkpoint_every == 0 or done == loop.schedule.total_steps:
            checkpoint.save(run.checkpoint, _state(model, loop, done, rows, run.params_hash))
    model.eval()
    return rows


def loss_of_batch(model: Adapted, images: torch.Tensor, labels: torch.Tensor, classnames: list[str],
                  frozen_text: torch.Tensor, weights: Weights, use_bf16: bool):
    """Forward pass and SPEC §7's loss for one batch: (LossTerms, alpha [K+1])."""
    regularized = model.method.regularized
    with torch.autocast(images.device.type, dtype=torch.bfloat16, enabled=use_bf16):
        out = model.image_forward(images, with_frozen=regularized and weights.img > 0)  # [B, K+1, E]
        text = model.text_features(classnames)  # [C, E]
        alpha = model.alpha  # [K+1]
        fused = model.fused_logits(model.logits_from(out.features, text), alpha)  # [B, C]
        terms = objective(fused, labels, alpha, out.features[:, 0], out.frozen_cls, text, frozen_text,
                          weights, regularized)
    return terms, alpha


def update(loop: "Loop", loss: torch.Tensor) -> None:
    """Backward pass, optimizer and scheduler step."""
    loop.optimizer.zero_grad(set_to_none=True)
    loop.scaler.scale(loss).backward()
    loop.scaler.step(loop.optimizer)
    loop.scaler.update()
    loop.scheduler.step()


def make_loop(model: Adapted, p: Train, schedule: Schedule, device: torch.device) -> Loop:
    """AdamW over the learnable tensors, constant warm-up then cosine (SPEC §7)."""
    learnable = [param for param in model.parameters() if param.requires_grad]
    optimizer = torch.optim.AdamW(learnable, lr=p.lr, weight_decay=p.weight_decay)
    factor = WarmupCosine(p.warmup_epochs * schedule.steps_per_epoch, schedule.total_steps, p.warmup_lr / p.lr)
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


def _stop_on_nan(step: int, terms, path: Path) -> None:
    values = ", ".join(f"{k}={v:.4g}" for k, v in terms.as_floats().items())
    kept = f"the last good checkpoint {path} is kept" if path.is_file() else "no checkpoint was written yet"
    raise DearError(f"step {step}: the loss is not finite ({values}); likely cause: a learning rate too high "
                    f"(train.lr) or bf16 overflow (try train.precision: fp32); {kept}")
