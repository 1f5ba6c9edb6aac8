"""The one trainer of every method: Dassl's mechanics, resumable.

What differs between methods lives in the method's model (`MethodModel.step`:
its loss terms) and in its resolved recipe (`dear.methods.recipe.Recipe`:
optimizer, learning rate, batch, epochs, warm-up, augmentation, precision);
the loop is Dassl's TrainerX:
- the learning rate is `warmup_lr` for the warm-up epochs, then a cosine over
  all epochs (ConstantWarmupScheduler over CosineAnnealingLR(T_max=epochs)),
  changed once per epoch, so the last epoch does not run at zero (`EpochCosine`);
- an epoch is a fresh permutation of the shots in batches, the last short one
  dropped when the shots hold at least one full batch (`Schedule`);
- the model after the last epoch is the one kept (no selection on validation);
- what only some authors' loops do, asked for by keys only their recipes have
  (absent, nothing changes): a run of `iterations_per_shot` x K steps instead of
  whole epochs, a cosine stepped per iteration down to `min_lr` (`schedule:
  cosine_steps`, torch's CosineAnnealingLR over all steps), the last short
  batch kept (`drop_last: false`), AdamW's `adam_eps` (CLIP-LoRA, Tip-Adapter-F);
  and a model's augmented passes over the shots before the first step
  (`MethodModel.init_passes`: Tip-Adapter-F's cache);
- the precision of the recipe on CUDA: fp16 (CLIP and the learnable tensors in
  half), amp (fp16 autocast, loss scaling), bf16 autocast (ours) or fp32.
Checkpoints every `train.checkpoint_every` steps carry the full state, and the
batches depend only on (seed, step), so a run killed at any moment and
restarted with the same command ends with the same bytes as one that never
stopped (on CPU).
"""

from __future__ import annotations

import contextlib

import logging
import math
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from dear.compute import device as devices
from dear.errors import DearError
from dear.methods.base import MethodModel, in_precision
from dear.methods.recipe import Recipe
from dear.config.params import Compute
from dear.runtime.progress import track
from dear.train import checkpoint
from dear.train.data import (Schedule, ShotImages, ShotPasses, Shots, Views, loader, passes, train_transform,
                             unaugmented_transform)
from dear.train.views import ViewCache

log = logging.getLogger("dear.train")


class EpochCosine:
    """LR factor of step s (Dassl's ConstantWarmupScheduler over CosineAnnealingLR, stepped per epoch).

    Epoch e < W: warmup_lr / lr; epoch e >= W: 0.5 (1 + cos(π (e - W) / E)), E = all epochs (e 0-based).
    """

    def __init__(self, steps_per_epoch: int, epochs: int, warmup_epochs: int, warmup_factor: float):
        self.steps_per_epoch, self.epochs = steps_per_epoch, epochs
        self.warmup_epochs, self.warmup_factor = warmup_epochs, warmup_factor

    def __call__(self, step: int) -> float:
        epoch = step // self.steps_per_epoch
        if epoch < self.warmup_epochs:
            return self.warmup_factor
        return 0.5 * (1.0 + math.cos(math.pi * (epoch - self.warmup_epochs) / max(1, self.epochs)))


class StepCosine:
    """LR factor of step s under torch's CosineAnnealingLR(T_max = all steps, eta_min), stepped once per step.

    lr(s) = eta_min + (lr - eta_min) · 0.5 (1 + cos(π s / T)): the closed form of torch's recursion (the same
    numbers up to float rounding), as CLIP-LoRA's lora.py and Tip-Adapter's main.py step it after every batch.
    """

    def __init__(self, total_steps: int, lr: float, min_lr: float):
        self.total_steps, self.lr, self.min_lr = total_steps, lr, min_lr

    def __call__(self, step: int) -> float:
        cosine = 0.5 * (1.0 + math.cos(math.pi * step / max(1, self.total_steps)))
        return (self.min_lr + (self.lr - self.min_lr) * cosine) / self.lr


def schedule_of(recipe: Recipe, shots: Shots, seed: int) -> Schedule:
    """The batches of a run: `epochs` whole epochs, or `iterations_per_shot` x K steps (K: the most shots of a
    class; CLIP-LoRA's total_iters = n_iters * shots), the last short batch dropped as Dassl does unless the
    recipe's `drop_last` is false."""
    n, per_shot = len(shots.paths), recipe.get("iterations_per_shot")
    steps = None if per_shot is None else per_shot * shots.per_class()[1]
    probe = Schedule(n=n, batch_size=recipe.batch_size, epochs=1, seed=seed, drop_last=recipe.get("drop_last"))
    if steps is None and recipe.epochs is None:
        raise DearError(f"recipe {recipe.recipe}: epochs is null and so is iterations_per_shot; set one "
                        f"(train.recipes.{recipe.recipe}.epochs or .iterations_per_shot)")
    epochs = recipe.epochs if steps is None else -(-steps // probe.steps_per_epoch)
    return Schedule(n=n, batch_size=recipe.batch_size, epochs=epochs, seed=seed, drop_last=recipe.get("drop_last"),
                    steps=steps)


@dataclass
class Run:
    """One training run: the model, its shots, its recipe and where its checkpoint lives."""

    model: MethodModel
    shots: Shots
    recipe: Recipe
    compute: Compute
    seed: int
    image_size: int
    normalization: tuple
    checkpoint: Path
    checkpoint_every: int
    params_hash: str


@dataclass
class Loop:
    """Optimizer state that a checkpoint saves and restores."""

    optimizer: torch.optim.Optimizer
    scheduler: torch.optim.lr_scheduler.LambdaLR
    scaler: torch.amp.GradScaler
    schedule: Schedule


def fit(run: Run) -> list[dict]:
    """Train `run.model` in place; returns the log rows (step, epoch, loss and its terms, accuracy, lr, ...)."""
    recipe = run.recipe
    device = devices.resolve(run.compute)
    precision = devices.Precision(recipe.precision, device)
    devices.fast_matmuls(device)  # fp32 matmuls outside autocast (frozen features)
    model = in_precision(run.model.to(device), precision).train()
    schedule = schedule_of(recipe, run.shots, run.seed)
    init_from_passes(run, model, precision)  # before the optimizer: it may make learnable tensors (Tip-Adapter-F)
    loop = make_loop(model, recipe, schedule, precision)
    rows, start, elapsed = [], 0, 0.0
    fade_steps = round(recipe.get("fade_in_epochs", 0.0) * schedule.steps_per_epoch)
    model.fade = fade_at(0, fade_steps)
    state = checkpoint.load(run.checkpoint, run.params_hash)
    if state is not None:
        rows, start, elapsed = _restore(state, model, loop)
    classnames = run.shots.classnames
    began = time.perf_counter() - elapsed
    batches = _batches(run, model, schedule, start, precision)
    for step, (inputs, labels) in zip(track(range(start, schedule.total_steps), f"train {model.name}",
                                            total=schedule.total_steps - start), batches):
        lr = loop.scheduler.get_last_lr()[0]
        model.fade = fade_at(step + 1, fade_steps)
        labels = labels.to(device, non_blocking=True)
        with seeded_step(run.seed, step, device):
            result = step_of_batch(model, _to(inputs, device), labels, classnames, precision)
        if not torch.isfinite(result.total):
            _stop_on_nan(step, result, run.checkpoint)
        update(loop, result.total)
        rows.append({"step": step, "epoch": step // schedule.steps_per_epoch, "loss": float(result.total.detach()),
                     **{f"loss_{name}": float(value.detach()) for name, value in result.terms.items()},
                     "accuracy": 100.0 * int((result.logits.detach().argmax(1) == labels).sum()) / len(labels),
                     "lr": lr, "fade": model.fade, "alpha": [float(a) for a in model.alpha.detach().float().cpu()],
                     "seconds": time.perf_counter() - began})
        done = step + 1
        if done % schedule.steps_per_epoch == 0:
            model.on_epoch_end(done // schedule.steps_per_epoch, schedule.epochs)
        if done % run.checkpoint_every == 0 or done == schedule.total_steps:
            _check_finite(model, step, run.checkpoint)
            if done == schedule.total_steps:  # no next step's loss looks at the last update: look now
                with torch.no_grad(), seeded_step(run.seed, done, device):
                    after = step_of_batch(model, _to(inputs, device), labels, classnames, precision)
                if not torch.isfinite(after.total):
                    _stop_on_nan(step, after, run.checkpoint, "after the last update")
            checkpoint.save(run.checkpoint, _state(model, loop, done, rows, run.params_hash))
    model.eval()
    return rows


def _batches(run: Run, model: MethodModel, schedule: Schedule, start: int, precision: "devices.Precision"):
    """(pixels [B, 3, S, S], `Views` (k views of each image, labels repeated) or (prefix, untouched image feature),
    labels) of every step from `start`."""
    recipe = run.recipe
    transform = train_transform(recipe, run.image_size, *run.normalization)
    k, with_img0 = recipe.get("k_transforms", 1), recipe.get("return_img0", False)
    if recipe.views and (k > 1 or with_img0):
        raise DearError(f"recipe {recipe.recipe}: views {recipe.views} (a fixed bank of one view per epoch) and "
                        f"k_transforms {k} / return_img0 {with_img0} (fresh views per step) exclude each other; set "
                        f"train.recipes.{recipe.recipe}.views: null, or k_transforms: 1 and return_img0: false")
    if recipe.views:
        cache = ViewCache(model, run.shots, transform, recipe.views, run.seed, max(64, recipe.batch_size),
                          autocast=precision.autocast())
        return cached_batches(cache, schedule, run.shots, start)
    img0 = unaugmented_transform(recipe.interpolation, run.image_size, *run.normalization) if with_img0 else None
    batches = loader(ShotImages(run.shots, schedule, transform, k, img0), start, run.compute.workers,
                     pin_memory=precision.device.type == "cuda")
    if k == 1 and img0 is None:
        return batches
    return ((Views.of(item), labels.repeat(k)) for item, labels in batches)  # their label.repeat(k_transforms)


def init_from_passes(run: Run, model: MethodModel, precision: "devices.Precision") -> None:
    """The model's augmented passes over the shots (`MethodModel.init_passes`), their frozen prefixes in shot order,
    each view drawn from (seed, pass, shot) alone: the same on a fresh start and on a resumed one."""
    count = model.init_passes()
    if not count:
        return
    transform = train_transform(run.recipe, run.image_size, *run.normalization)
    batches = passes(ShotPasses(run.shots, transform, run.seed), count, run.recipe.batch_size, run.compute.workers)

    def prefixes():
        for index, pixels, labels in batches:
            with torch.no_grad(), precision.autocast():
                yield int(index[0]), model.image_prefix(pixels.to(model.device)), labels.to(model.device)

    model.init_from_passes(prefixes())


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
    """Pixels [B, 3, S, S], k views of each image (`Views`), or a cached (prefix, untouched image feature) pair,
    on `device`."""
    if isinstance(images, torch.Tensor):
        return images.to(device, non_blocking=True)
    if isinstance(images, Views):
        return images.to(device)
    return tuple(None if part is None else part.to(device) for part in images)


@contextlib.contextmanager
def seeded_step(seed: int, step: int, device: torch.device):
    """The random draws of one step's forward (CLIP-LoRA's dropout) from (seed, step) alone, the generators' states
    restored after: a resumed run draws what the uninterrupted one drew, and a method that draws nothing in its
    forward computes what it computed without this."""
    with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
        torch.manual_seed(seed * 1_000_003 + step)
        yield


def step_of_batch(model: MethodModel, inputs, labels: torch.Tensor, classnames: list[str],
                  precision: "devices.Precision"):
    """The method's loss on one batch (`MethodModel.step`), from pixels, k views of each image, or a view bank's
    cached pair. With the unaugmented images (`Views.img0`) the untouched feature is theirs, repeated for the k
    views (TAC's ZS_image_encoder(img_o).repeat(k_transforms, 1))."""
    with precision.autocast():
        if isinstance(inputs, torch.Tensor):
            prefix = model.image_prefix(inputs)  # [B, 1+N, D]
            frozen = model.frozen_image(prefix) if model.needs_frozen_image else None
        elif isinstance(inputs, Views):
            prefix = model.image_prefix(inputs.pixels)  # [k B, 1+N, D]
            frozen = None
            if model.needs_frozen_image:  # [k B, E]
                frozen = (model.frozen_image(prefix) if inputs.img0 is None
                          else model.frozen_image(model.image_prefix(inputs.img0)).repeat(inputs.k, 1))
        else:
            prefix, frozen = inputs
        return model.step(prefix, labels, classnames, frozen)


def update(loop: "Loop", loss: torch.Tensor) -> None:
    """Backward pass (loss-scaled under amp), optimizer and scheduler step."""
    loop.optimizer.zero_grad(set_to_none=True)
    loop.scaler.scale(loss).backward()
    loop.scaler.step(loop.optimizer)
    loop.scaler.update()
    loop.scheduler.step()


def make_loop(model: MethodModel, recipe: Recipe, schedule: Schedule, precision: "devices.Precision") -> Loop:
    """The recipe's optimizer over the learnable tensors and Dassl's per-epoch schedule."""
    learnable = [param for param in model.parameters() if param.requires_grad]
    if recipe.optimizer == "sgd":  # Dassl's SGD: no dampening, no Nesterov
        optimizer = torch.optim.SGD(learnable, lr=recipe.lr, momentum=recipe.momentum, weight_decay=recipe.weight_decay)
    else:  # Dassl's adamw: betas (0.9, 0.999), eps 1e-8 (Tip-Adapter's: adam_eps 1e-4)
        optimizer = torch.optim.AdamW(learnable, lr=recipe.lr, weight_decay=recipe.weight_decay,
                                      eps=recipe.get("adam_eps", 1e-8))
    if recipe.get("schedule") == "cosine_steps":
        factor = StepCosine(schedule.total_steps, recipe.lr, recipe.min_lr)
    else:
        factor = EpochCosine(schedule.steps_per_epoch, schedule.epochs, recipe.warmup_epochs,
                             recipe.warmup_lr / recipe.lr)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, factor)
    scaler = torch.amp.GradScaler(precision.device.type, enabled=precision.scales_loss)
    return Loop(optimizer, scheduler, scaler, schedule)


def _state(model: MethodModel, loop: Loop, step: int, rows: list[dict], params_hash: str) -> dict:
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


def _restore(state: dict, model: MethodModel, loop: Loop) -> tuple[list[dict], int, float]:
    model.load_trainable(state["model"], "checkpoint")
    loop.optimizer.load_state_dict(state["optimizer"])
    loop.scheduler.load_state_dict(state["scheduler"])
    loop.scaler.load_state_dict(state["scaler"])
    checkpoint.set_rng_states(state["rng"])
    rows = state["log"]
    return rows, state["step"], rows[-1]["seconds"] if rows else 0.0


def _check_finite(model: MethodModel, step: int, path: Path) -> None:
    """Every learnable tensor finite before it is saved: a NaN must never become the last good checkpoint."""
    bad = [name for name, param in model.named_parameters() if param.requires_grad and not torch.isfinite(param).all()]
    if bad:
        raise DearError(f"step {step}: the learnable tensor {bad[0]} is not finite after the update ({len(bad)} such "
                        f"tensors); likely cause: {_LIKELY}; {_kept(path)}")


_LIKELY = "a learning rate too high (train.recipes.*.lr) or an overflow in low precision (try train.recipes.*.precision: fp32)"


def _kept(path: Path) -> str:
    return f"the last good checkpoint {path} is kept" if path.is_file() else "no checkpoint was written yet"


def _stop_on_nan(step: int, result, path: Path, when: str = "") -> None:
    values = ", ".join(f"{k}={float(v.detach()):.4g}" for k, v in {"loss": result.total, **result.terms}.items())
    raise DearError(f"step {step}: the loss is not finite{' ' + when if when else ''} ({values}); "
                    f"likely cause: {_LIKELY}; {_kept(path)}")
