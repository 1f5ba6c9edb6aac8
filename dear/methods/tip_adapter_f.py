"""Tip-Adapter-F (gaopengcuhk/Tip-Adapter: main.py, utils.py, configs/<dataset>.yaml), written against the contract.

What the authors' code does (main.py and utils.py, one configs/<dataset>.yaml for every shot count):
- classifier: CLIP's text features of the dataset's prompts, each normalized, averaged over the prompts and
  normalized again (clip_classifier; ImageNet averages seven prompts, the other datasets have one);
- cache (build_cache_model): `augment_epoch` passes over the shots in their order under the training
  augmentation; the keys are each shot's image embedding (encode_image, not normalized) averaged over the
  passes, then normalized; the values are the shots' one-hot labels;
- logits: 100 f W^T + alpha exp(-beta (1 - f K^T)) V for a normalized image feature f, keys K, values V:
  the affinity's form is `((-1) * (beta - beta * affinity)).exp()`;
- Tip-Adapter-F: the keys become learnable (an nn.Linear's weight initialized to them, no bias) and are
  trained with AdamW(lr, eps 1e-4) under CosineAnnealingLR over all iterations on the cross-entropy of
  those logits at the config's init_alpha and init_beta, on fresh augmented views of the shots
  (batch 256, shuffled, the last short batch kept); the text classifier and the values stay fixed;
- afterwards (search_hp) beta and alpha are searched on the validation features (test transform), beta
  over `search_step[0]` values i (search_scale[0] - 0.1) / search_step[0] + 0.1, alpha likewise, beta in
  the outer loop: the first pair of strictly highest accuracy wins, (0, 0) when none beats 0%.
What we do differently:
- the model after the last epoch is kept: their loop keeps the epoch of highest *test* accuracy (main.py
  evaluates on the test set after every epoch and reloads the best), a choice on test data no table of
  ours may make;
- the search reads the study's validation shots (min(K, data.val_shots) per class, the same for every
  method), not the whole validation split their datasets/ load (ImageNet: their main_imagenet.py searches
  on the test set);
- the cache views and every epoch's views draw from (seed, pass or epoch, shot) as every method's do.
- a class with no cached shot (a novel class, another dataset's; their code, few-shot only, never scores
  one) has a zero column in the values: its logit is CLIP's zero-shot one, 100 f W^T.
"""

from __future__ import annotations

import json

import torch
import torch.nn.functional as F
from torch import nn

from dear.errors import DearError
from dear.methods import prompts, towers
from dear.methods.base import MethodModel, Step, cross_entropy
from dear.model import internals


class TipAdapterF(MethodModel):
    TERMS = ("ce",)
    needs_frozen_image = True  # every step reads the frozen CLIP's normalized image feature
    searches_validation = True  # alpha and beta are searched on the validation shots after training (search_hp)

    def build(self, roles) -> None:
        width = internals.image_projection(self.clip).shape[-1]
        self.keys = nn.Parameter(torch.zeros(0, width))  # [N, E], the cache's keys: made by `init_from_passes`
        self.register_buffer("cache_labels", torch.zeros(0, dtype=torch.long))  # [N] the values' labels
        self.register_buffer("cache_alpha", torch.tensor(float(self.recipe.init_alpha)))  # residual ratio
        self.register_buffer("cache_beta", torch.tensor(float(self.recipe.init_beta)))  # sharpness
        self.register_buffer("names", torch.zeros(0, dtype=torch.uint8))  # the cached classes, JSON in UTF-8
        self._names: list[str] = []

    # --- the cache ---------------------------------------------------------------------

    def init_passes(self) -> int:
        return self.recipe.augment_epochs

    @torch.no_grad()
    def init_from_passes(self, passes) -> None:
        """build_cache_model: keys = the passes' mean image embedding per shot, normalized; values = its label."""
        first, labels, total, current, row = [], [], None, 0, 0
        for index, prefix, batch_labels in passes:  # pass 0's batches, then pass 1's, ..., each in shot order
            embedding = self.frozen_embedding(prefix).float()  # [B, E], not normalized (encode_image)
            if index == 0:
                first.append(embedding)
                labels.append(batch_labels)
                continue
            if total is None:
                total = torch.cat(first)  # [N, E]
            if index != current:
                current, row = index, 0
            total[row:row + len(embedding)] += embedding
            row += len(embedding)
        if not first:
            raise DearError(f"{self.name}: no training shots to build its cache from")
        total = torch.cat(first) if total is None else total
        keys = F.normalize(total / self.init_passes(), dim=-1)  # [N, E]
        self.keys = nn.Parameter(keys.to(device=self.device, dtype=internals.image_dtype(self.clip)))
        self.cache_labels = torch.cat(labels).to(self.device)

    def cache_logits(self, image: torch.Tensor, classnames: list[str], alpha, beta) -> torch.Tensor:
        """alpha exp(-beta (1 - f K^T)) V of normalized features f [B, E] -> [B, C] for a class list: the one-hot
        product as a sum per class, a class without cached shots a zero column."""
        affinity = image.to(self.keys.dtype) @ self.keys.T  # [B, N]
        weights = (-1 * (beta - beta * affinity.float())).exp()  # [B, N]
        position = {name: column for column, name in enumerate(classnames)}
        column = torch.tensor([position.get(name, -1) for name in self._names], dtype=torch.long, device=image.device)
        picked = column[self.cache_labels]  # [N] each cached shot's column in the list, -1 for a class not listed
        kept = picked >= 0
        values = torch.zeros(image.shape[0], len(classnames), device=image.device, dtype=weights.dtype)
        return alpha * values.index_add(1, picked[kept], weights[:, kept])  # [B, C]

    # --- text side ----------------------------------------------------------------------

    def compute_text_features(self, classnames: list[str], template: str | None) -> torch.Tensor:
        """clip_classifier: each prompt's normalized feature, averaged over the prompts, normalized: [C, E]."""
        ensemble = [template or self.recipe.template, *self.recipe.extra_templates]

        @torch.no_grad()
        def classifier():
            per_prompt = [towers.encode_texts(self.clip, self.text, self.tokenizer,
                                              [prompts.hand_written(t, name).text for name in classnames])
                          for t in ensemble]  # each [C, E]
            return F.normalize(torch.stack(per_prompt).float().mean(0), dim=-1)

        return self.once(("classifier", tuple(classnames), tuple(ensemble)), classifier)

    # --- logits -------------------------------------------------------------------------

    def tip_logits(self, image: torch.Tensor, classnames: list[str], alpha, beta,
                   template: str | None = None) -> torch.Tensor:
        """100 f W^T + alpha exp(-beta (1 - f K^T)) V for normalized image features f [B, E] -> [B, C]."""
        text = self.text_features(classnames, template)  # [C, E]
        clip_logits = self.logit_scale().float() * image.float() @ text.float().T
        return clip_logits + self.cache_logits(image, classnames, alpha, beta)

    def logits(self, features: torch.Tensor, classnames: list[str], template: str | None = None) -> torch.Tensor:
        """[B, 1, E] normalized image features -> [B, 1, C] at the searched alpha and beta."""
        return self.tip_logits(features[:, 0], classnames, self.cache_alpha, self.cache_beta, template)[:, None]

    # --- training and the search ----------------------------------------------------------

    def step(self, prefix, labels, classnames, frozen_image=None) -> Step:
        self._remember(classnames)
        image = self.frozen_image(prefix) if frozen_image is None else frozen_image  # [B, E] normalized
        logits = self.tip_logits(image, classnames, self.recipe.init_alpha, self.recipe.init_beta)
        ce = cross_entropy(logits, labels)
        return Step(ce, {"ce": ce}, logits)

    @torch.no_grad()
    def search_validation(self, features: torch.Tensor, labels: list[int], classnames: list[str]) -> dict:
        """search_hp on the validation features [N, 1, E]: the first (beta, alpha) of strictly highest accuracy."""
        self._remember(classnames)
        image = features[:, 0].to(self.device)  # [N, E] normalized
        text = self.text_features(classnames)  # [C, E]
        clip_logits = self.logit_scale().float() * image.float() @ text.float().T  # [N, C]
        found = search(clip_logits, lambda beta: self.cache_logits(image, classnames, 1.0, beta),
                       torch.tensor(labels, device=self.device), self.recipe.search_scale, self.recipe.search_step)
        self.cache_beta = torch.tensor(found["beta"], device=self.device)
        self.cache_alpha = torch.tensor(found["alpha"], device=self.device)
        return found

    def _remember(self, classnames: list[str]) -> None:
        """The class list the cache's labels index (the training shots'), kept with the model."""
        if self._names != list(classnames):
            self._names = list(classnames)
            self.names = torch.tensor(list(json.dumps(self._names).encode()), dtype=torch.uint8, device=self.device)

    # --- state ----------------------------------------------------------------------------

    def extra_state(self) -> dict[str, torch.Tensor]:
        return {"cache.labels": self.cache_labels, "cache.alpha": self.cache_alpha, "cache.beta": self.cache_beta,
                "cache.classnames": self.names}

    def load_extra_state(self, state: dict[str, torch.Tensor]) -> None:
        self.cache_labels, self.names = state["cache.labels"].long(), state["cache.classnames"]
        self.cache_alpha, self.cache_beta = state["cache.alpha"].float(), state["cache.beta"].float()
        self._names = json.loads(bytes(self.names.tolist()).decode()) if self.names.numel() else []

    def load_trainable(self, state: dict[str, torch.Tensor], source: str) -> None:
        """The keys take the saved cache's size (N shots) before they are loaded."""
        if "keys" in state and state["keys"].shape != self.keys.shape:
            self.keys = nn.Parameter(torch.zeros_like(state["keys"], device=self.device, dtype=self.keys.dtype))
        super().load_trainable(state, source)


def grid(scale: float, steps: int) -> list[float]:
    """search_hp's list: i (scale - 0.1) / steps + 0.1 for i in range(steps), in Python floats as theirs."""
    return [i * (scale - 0.1) / steps + 0.1 for i in range(steps)]


def search(clip_logits: torch.Tensor, cache_logits, labels: torch.Tensor, scale: list[float], steps: list[int]) -> dict:
    """utils.py search_hp: beta over grid(scale[0], steps[0]) (outer), alpha over grid(scale[1], steps[1]) (inner);
    logits = clip_logits [N, C] + alpha cache_logits(beta) [N, C] (the cache's at alpha 1). The first pair of
    strictly highest accuracy is kept, from accuracy 0 at (beta, alpha) = (0, 0) as theirs starts."""
    best = {"beta": 0.0, "alpha": 0.0, "accuracy": 0.0}
    for beta in grid(scale[0], steps[0]):
        cache = cache_logits(beta)
        for alpha in grid(scale[1], steps[1]):
            accuracy = 100.0 * int(((clip_logits + alpha * cache).argmax(1) == labels).sum()) / len(labels)  # cls_acc
            if accuracy > best["accuracy"]:
                best = {"beta": beta, "alpha": alpha, "accuracy": accuracy}
    return best


MODELS = {"tip_adapter_f": TipAdapterF}
