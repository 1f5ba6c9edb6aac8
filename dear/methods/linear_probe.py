"""Linear-probe CLIP: a logistic regression on the frozen image embedding (the authors' `lpclip/`).

What KaiyangZhou/CoOp's lpclip/ (copied by KgCoOp, MaPLe, PromptSRC, MMRL) does, following Appendix A3 of
the CLIP paper:
- features (lpclip/feat_extractor.py): `clip_model.visual(image)` of every image under the test
  transform: the image embedding after the projection, *not* normalized;
- classifier (lpclip/linear_probe.py): scikit-learn's `LogisticRegression` (L-BFGS, L2, max_iter 1000),
  multinomial, on the training shots;
- its inverse regularisation C, searched on the validation shots (`search`): the grid 1e6, 1e4, ..., 1e-6
  first; around the first best c_peak the range [c_peak/10, c_peak·10] is then halved in log10
  `search_steps` times, each round fitting both ends and moving towards the better one (the left one on a
  tie); the classifier of the last round's better end is the model.
What we do differently: the shots are the study's (Dassl's draws, the same as every other method's, with its
min(K, 4) validation shots per class, which is lpclip's `val_shot_list`), not lpclip's own np.random draws.

Nothing trains by gradient: `dear train` encodes the shots once and calls `fit` (dear/train/features.py).
Logits are W f + b over the fitted classes only: a probe has no classifier for a class it never saw, so
it scores a class list only when every name of it was fitted (`can_score`; the novel classes of
base-to-novel and another dataset's classes are left unscored, "—" in the report).
"""

from __future__ import annotations

import json
import logging
import warnings
from dataclasses import dataclass
from typing import Callable

import numpy as np
import torch

from dear.errors import DearError
from dear.methods.base import MethodModel

log = logging.getLogger("dear.methods.linear_probe")


@dataclass(frozen=True)
class Search:
    """The C search's result: the chosen C, its classifier, and every (C, validation accuracy) fitted, in order."""

    c: float
    classifier: object  # a fitted sklearn LogisticRegression
    tried: list[tuple[float, float]]


def classifier(c: float, max_iter: int):
    """lpclip's classifier: LogisticRegression(solver="lbfgs", max_iter, penalty="l2", C) (l1_ratio 0 is L2)."""
    from sklearn.linear_model import LogisticRegression

    return LogisticRegression(solver="lbfgs", max_iter=max_iter, C=c, l1_ratio=0.0)


def search(train_x: np.ndarray, train_y: np.ndarray, val_x: np.ndarray, val_y: np.ndarray,
           grid: list[float], steps: int, max_iter: int) -> Search:
    """C searched on the validation shots as lpclip/linear_probe.py searches it. x: [N, E], y: [N]."""
    from sklearn.exceptions import ConvergenceWarning

    tried: list[tuple[float, float]] = []

    def fit(c: float):
        with warnings.catch_warnings():  # lpclip's large C stops at max_iter on separable shots, as theirs does
            warnings.simplefilter("ignore", category=ConvergenceWarning)
            model = classifier(c, max_iter).fit(train_x, train_y)
        accuracy = float(np.sum(model.predict(val_x) == val_y) / len(val_y))
        tried.append((float(c), accuracy))
        return model, accuracy

    return Search(*refine(fit, grid, steps), tried)


def refine(fit: Callable[[float], tuple[object, float]], grid: list[float], steps: int) -> tuple[float, object]:
    """The grid, then `steps` rounds of lpclip's binary search in log10 around its first best C.

    `fit(c)` -> (classifier, validation accuracy). The arithmetic is lpclip's, in float64, so the C values
    tried are the same numbers: c_left, c_right = 1e-1·c_peak, 1e1·c_peak; a round keeps the better end
    and the half of [log10 c_left, log10 c_right] on its side.
    """
    accuracies = [fit(c)[1] for c in grid]
    peak = grid[int(np.argmax(accuracies))]  # the first best
    left, right = 1e-1 * peak, 1e1 * peak
    chosen = None
    for _ in range(steps):
        fitted_left, accuracy_left = fit(left)
        fitted_right, accuracy_right = fit(right)
        middle = 0.5 * (np.log10(right) + np.log10(left))
        if accuracy_left < accuracy_right:
            chosen = (right, fitted_right)
            left, right = middle, np.log10(right)
        else:
            chosen = (left, fitted_left)
            left, right = np.log10(left), middle
        left, right = np.power(10, left), np.power(10, right)
    if chosen is None:
        raise DearError("recipe: search_steps must be at least 1: the linear probe's classifier is the last "
                        "round's; set train.recipes.linear_probe.search_steps >= 1")
    return float(chosen[0]), chosen[1]


def weights(fitted, n_classes: int) -> tuple[np.ndarray, np.ndarray]:
    """(W [C, E], b [C]) with argmax(W f + b) = fitted.predict(f); a binary sklearn model holds one row."""
    if list(fitted.classes_) != list(range(n_classes)):
        raise DearError(f"linear probe: fitted on classes {list(fitted.classes_)[:5]}..., not 0..{n_classes - 1}; "
                        "every class needs a training shot: rerun `dear prepare`")
    coef, bias = np.asarray(fitted.coef_, float), np.asarray(fitted.intercept_, float)
    if n_classes == 2 and coef.shape[0] == 1:  # sklearn predicts class 1 where f·w + b > 0
        coef, bias = np.concatenate([np.zeros_like(coef), coef]), np.concatenate([np.zeros(1), bias])
    return coef, bias


class LinearProbe(MethodModel):
    fits_features = True  # `dear train` fits it on the shots' frozen features, not with the trainer

    def build(self, roles) -> None:
        self.register_buffer("weight", torch.zeros(0, 0, dtype=torch.float64))  # [C, E], set by `fit`
        self.register_buffer("bias", torch.zeros(0, dtype=torch.float64))  # [C]
        self.register_buffer("c", torch.zeros((), dtype=torch.float64))  # the chosen C
        self.register_buffer("tried", torch.zeros(0, 2, dtype=torch.float64))  # [n, 2]: C, validation accuracy
        self.register_buffer("names", torch.zeros(0, dtype=torch.uint8))  # the fitted classes, JSON in UTF-8
        self._names: list[str] = []

    def encode(self, prefix: torch.Tensor) -> torch.Tensor:
        """lpclip's feature: the image embedding, unnormalized [B, 1, E], from the frozen prefix."""
        return self.frozen_embedding(prefix)[:, None]

    def fit(self, train_x: torch.Tensor, train_y: list[int], val_x: torch.Tensor, val_y: list[int],
            classnames: list[str]) -> Search:
        """Search C and fit on the shots' features ([N, 1, E] or [N, E]); the classifier becomes the model's."""
        if not len(val_y):
            raise DearError("linear probe: no validation shots; its C is searched on them: rerun `dear prepare` "
                            "on a dataset with a validation split")
        found = search(_numpy(train_x), np.asarray(train_y), _numpy(val_x), np.asarray(val_y),
                       list(self.recipe.c_grid), self.recipe.search_steps, self.recipe.max_iter)
        weight, bias = weights(found.classifier, len(classnames))
        device = self.weight.device
        self.weight = torch.from_numpy(weight).to(device)
        self.bias = torch.from_numpy(bias).to(device)
        self.c = torch.tensor(found.c, dtype=torch.float64, device=device)
        self.tried = torch.tensor(found.tried, dtype=torch.float64, device=device).reshape(-1, 2)
        self.names = torch.tensor(list(json.dumps(list(classnames)).encode()), dtype=torch.uint8, device=device)
        self._names = list(classnames)
        return found

    def can_score(self, classnames: list[str]) -> bool:
        """Only classes it was fitted on (their rows of W and b)."""
        return set(classnames) <= set(self._names)

    def logits(self, features: torch.Tensor, classnames: list[str], template: str | None = None) -> torch.Tensor:
        """[B, 1, E] unnormalized embeddings -> [B, 1, C]: W f + b of the listed classes (rows of the fitted ones)."""
        if not self.can_score(classnames):
            unknown = sorted(set(classnames) - set(self._names))
            raise DearError(f"linear probe: no classifier for classes it was not fitted on ({unknown[:3]}...); "
                            "a linear probe scores only the classes of its training shots")
        index = {name: row for row, name in enumerate(self._names)}
        rows = torch.tensor([index[name] for name in classnames], device=self.weight.device)
        weight, bias = self.weight[rows], self.bias[rows]  # [C, E], [C]
        return (features.double() @ weight.T + bias).float()  # [B, 1, C]

    def extra_state(self) -> dict[str, torch.Tensor]:
        return {"probe.weight": self.weight, "probe.bias": self.bias, "probe.c": self.c, "probe.tried": self.tried,
                "probe.classnames": self.names}

    def load_extra_state(self, state: dict[str, torch.Tensor]) -> None:
        self.weight, self.bias = state["probe.weight"].double(), state["probe.bias"].double()
        self.c, self.tried, self.names = state["probe.c"].double(), state["probe.tried"].double(), state["probe.classnames"]
        self._names = json.loads(bytes(self.names.tolist()).decode()) if self.names.numel() else []


def _numpy(features: torch.Tensor) -> np.ndarray:
    """[N, 1, E] or [N, E] -> float64 [N, E] (lpclip's features reach sklearn as float64)."""
    return features.reshape(len(features), -1).double().cpu().numpy()


MODELS = {"linear_probe": LinearProbe}
