"""`dear fuse`: refit the fusion weights α on held-out validation shots (SPEC §6).

The trained network stays frozen. Each stream's logits on the validation
shots are computed once; then only the S+1 fusion logits w (α = softmax(w))
are fitted by L-BFGS on the fused cross-entropy - seconds, not minutes.
Only validation rows of the few-shot table are read: never a test image.
A refit that scores lower on those shots than the trained α is not kept
(the trained α is; both accuracies go into fusion.json), and a model whose
logits are not finite is refused.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F

from dear.scoring import evaluation
from dear.data.manifest import read_fewshot, read_manifest
from dear.errors import DearError
from dear.runtime.io import filesystem_errors, provenance, write_json
from dear.model.clip import load_backbone
from dear.methods.trained import load_trained
from dear.config.params import Params

log = logging.getLogger("dear.fuse")


@dataclass(frozen=True)
class Inputs:
    model: Path  # model.pt of `dear train`
    backbone: Path  # folder of `dear backbone`
    roles: Path | None  # roles.parquet (method dear only)
    fewshot: Path  # fewshot-seed<S>.parquet: its validation shots are used
    manifest: Path  # the dataset's manifest (class names)
    classes: str  # base | all: the class list the model was trained on
    method: str | None = None  # the method the model must be of (None: any)


@dataclass(frozen=True)
class Outputs:
    fusion: Path  # fusion.json


def run(params: Params, inputs: Inputs, outputs: Outputs) -> None:
    model, precision = evaluation.prepared(load_trained(inputs.model, load_backbone(inputs.backbone), inputs.roles,
                                                        params, inputs.method), params.compute)
    val = evaluation.image_set(read_fewshot(inputs.fewshot), read_manifest(inputs.manifest), None, inputs.classes,
                               inputs.fewshot, fewshot_split="val")
    features = evaluation.encode_images(model, val, evaluation.eval_transform(model), params.evaluate.batch_size,
                                        params.compute.workers, precision, "fuse: validation shots")
    logits = evaluation.stream_logits(model, features, val.classnames)  # [N, S+1, C]
    if not torch.isfinite(logits).all():
        raise DearError(f"{inputs.model}: the model's logits on the validation shots are not finite (NaN or inf); "
                        "it is numerically broken: retrain with a lower learning rate (train.recipes.*.lr)")
    trained = model.alpha.detach().float().cpu()
    refit = params.fusion.mode == "refit" and model.refits_fusion and len(trained) > 1
    choice = choose_alpha(logits, val.labels, trained, params.fusion.refit_iterations) if refit \
        else Choice(trained, evaluation.accuracy(evaluation.fuse(logits, trained), val.labels))
    log.info("α %s -> %s; validation accuracy %.2f -> %.2f on %d shots", _round(trained), _round(choice.alpha),
             choice.before, choice.after, len(val))
    with filesystem_errors(outputs.fusion):
        write_json(outputs.fusion, {
            "alpha": choice.alpha.tolist(), "alpha_trained": trained.tolist(), "mode": params.fusion.mode,
            "refit": refit, "refit_kept": choice.refit_kept, "streams": model.stream_names(),
            "classes": inputs.classes, "n_val": len(val),
            "val_accuracy_before": choice.before, "val_accuracy_refit": choice.refit_accuracy,
            "val_accuracy_after": choice.after,
            "provenance": provenance({"fusion": params.fusion}, {"model": inputs.model, "fewshot": inputs.fewshot}),
        })


@dataclass(frozen=True)
class Choice:
    """The α fuse writes, and validation accuracy (%) of the trained α (before) and of the refit one."""

    alpha: torch.Tensor  # [S+1]
    before: float
    refit_accuracy: float | None = None  # None: no refit was made
    refit_kept: bool = False

    @property
    def after(self) -> float:
        return self.refit_accuracy if self.refit_kept else self.before


def choose_alpha(logits: torch.Tensor, labels: list[int], trained: torch.Tensor, iterations: int) -> Choice:
    """The refit α, unless it scores lower on the validation shots than the trained α it starts from.

    L-BFGS lowers the cross-entropy, which can cost accuracy on a handful of
    shots (seen: 33.3% -> 16.7% on 6 shots); the refit must never make the
    model worse on the only data it sees. logits: [N, S+1, C].
    """
    refit = fit_alpha(logits, labels, trained, iterations)
    before = evaluation.accuracy(evaluation.fuse(logits, trained), labels)
    after = evaluation.accuracy(evaluation.fuse(logits, refit), labels)
    if after < before:
        log.warning("the refit α %s lowers validation accuracy %.2f -> %.2f on %d shots; keeping the trained α %s",
                    _round(refit), before, after, len(labels), _round(trained))
        return Choice(trained, before, after, refit_kept=False)
    return Choice(refit, before, after, refit_kept=True)


def fit_alpha(logits: torch.Tensor, labels: list[int], init: torch.Tensor, iterations: int) -> torch.Tensor:
    """α = softmax(w) minimizing CE(Σ_k α_k s_k, y), from α = `init`. logits: [N, S+1, C]."""
    w = init.clamp_min(1e-8).log().clone().requires_grad_(True)  # [S+1]
    target = torch.tensor(labels)
    optimizer = torch.optim.LBFGS([w], max_iter=iterations, line_search_fn="strong_wolfe")

    def closure() -> torch.Tensor:
        optimizer.zero_grad()
        loss = F.cross_entropy(evaluation.fuse(logits, w.softmax(0)), target)
        loss.backward()
        return loss

    optimizer.step(closure)
    return w.detach().softmax(0)


def _round(alpha: torch.Tensor) -> list[float]:
    return [round(float(a), 3) for a in alpha]
