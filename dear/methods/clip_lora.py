"""CLIP-LoRA (MaxZanella/CLIP-LoRA: main.py, lora.py, loralib/, run_utils.py), written against the contract.

What the authors' code does, with one recipe for every dataset and shot count (run_utils.py's defaults):
- placement (loralib/utils.py apply_lora): every attention block of the layers `--position` names (all
  12 by default) in the towers `--encoder` names (both), its nn.MultiheadAttention replaced by one whose
  q, k, v projections (`--params q k v`; not the output projection) each carry a LoRA update;
- each update (loralib/layers.py LinearLoRA): W x + scaling · B A dropout(x), A [r, D] Kaiming-uniform
  (a = √5), B [D, r] zero, dropout 0.25 on the update's input only, in training, drawn per matrix;
  scaling = lora_alpha / √r (their LoRALayer; the line lora_alpha / r is commented out), r 2, alpha 1;
- training (lora.py run_lora): `n_iters * shots` iterations (500 K) of batch 32 on fresh augmented views
  (RandomResizedCrop(224, scale (0.08, 1), bicubic), flip 0.5; a shuffled loader that keeps the last short
  batch, restarted when it runs out), AdamW(lr 2e-4, betas (0.9, 0.999), weight decay 1e-2) under
  CosineAnnealingLR(T_max = all iterations, eta_min 1e-6) stepped per iteration, fp16 autocast with a
  GradScaler; the loss is the cross-entropy of 100 · cos(image, text), the text features recomputed every
  step from "a photo of a {}." (dataset.template[0]: every dataset's template file sets that prompt);
- the model after the last iteration is evaluated (no validation: VALIDATION = False).
What we do differently: the update is added to the in-projection our recomposed blocks compute
(`internals.LowRankQKV`: the same sum, B A x instead of their merged (B A) x, each an fp32 product under the
autocast); CLIP's frozen weights stay fp32 under the fp16 autocast (`precision: amp`) where theirs are fp16
(clip.load on CUDA); the test pass runs without autocast; the batches draw from (seed, epoch, shot) as every
method's do. `position` names the authors' 12-layer sets; a tower of another depth takes `all` only.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from dear.errors import DearError
from dear.methods import prompts, towers
from dear.methods.base import MethodModel, Step, cross_entropy
from dear.model import internals

# loralib/utils.py INDEX_POSITIONS_TEXT and INDEX_POSITIONS_VISION['ViT-B/16'] (0-based), the --position choices
POSITIONS = {"bottom": range(0, 4), "mid": range(4, 8), "up": range(8, 12), "half-up": range(6, 12),
             "half-bottom": range(0, 6), "top3": range(9, 12), "all": range(0, 12)}
ENCODERS = {"text": ("text",), "vision": ("image",), "both": ("text", "image")}  # --encoder: the towers adapted


def layers(position: str, depth: int) -> list[int]:
    """The 1-based layers of a `depth`-layer tower that --position names (`all`: every layer of any tower)."""
    if position == "all":
        return list(range(1, depth + 1))
    if depth != 12:
        raise DearError(f"recipe: position {position!r} names layers of a 12-layer tower, not of this {depth}-layer "
                        "one; set train.recipes.clip_lora.position: all")
    return [index + 1 for index in POSITIONS[position]]


class CLIPLoRA(MethodModel):
    TERMS = ("ce",)

    def build(self, roles) -> None:
        recipe = self.recipe
        if recipe.rank < 1 or not 0.0 <= recipe.dropout < 1.0:
            raise DearError(f"recipe: clip_lora needs rank >= 1 and 0 <= dropout < 1 (got {recipe.rank}, "
                            f"{recipe.dropout}); fix train.recipes.clip_lora")
        scaling = recipe.lora_alpha / math.sqrt(recipe.rank)
        adapted = ENCODERS[recipe.encoder]
        self.text_layers = layers(recipe.position, self.text.layers) if "text" in adapted else []
        self.image_layers = layers(recipe.position, self.vision.layers) if "image" in adapted else []

        def updates(tower, chosen) -> nn.ModuleList:
            return nn.ModuleList(internals.LowRankQKV(tower.width, recipe.rank, tuple(recipe.matrices), scaling,
                                                      recipe.dropout) for _ in chosen)

        self.text_updates = updates(self.text, self.text_layers)  # text first, as apply_lora adds them
        self.image_updates = updates(self.vision, self.image_layers)

    @property
    def frozen_depth(self) -> int:
        """Image blocks below the first adapted one (all of them when only the text tower is adapted)."""
        return self.image_layers[0] - 1 if self.image_layers else self.vision.layers

    def _updates(self, tower, chosen: list[int], modules: nn.ModuleList) -> dict:
        return {tower.blocks[layer - 1]: update for layer, update in zip(chosen, modules)}

    def encode(self, prefix: torch.Tensor) -> torch.Tensor:
        """The adapted image tower from the frozen prefix [B, 1+N, D] -> normalized CLS features [B, 1, E]."""
        with internals.low_rank_qkv(self._updates(self.vision, self.image_layers, self.image_updates)):
            x = towers.run_image(self.vision, prefix, first=self.frozen_depth + 1)  # [B, 1, D] (all rows: none ran)
        return F.normalize(internals.image_embedding(self.clip, x[:, 0]), dim=-1)[:, None]

    def prompt_input(self, classnames: list[str], template: str) -> towers.TextInput:
        """The tokenized prompts template.format(name) of a class list (computed once)."""
        def tokenized():
            texts = [prompts.hand_written(template, name).text for name in classnames]
            return towers.text_input(self.clip, self.tokenizer, texts)
        return self.once(("prompt", tuple(classnames), template), tokenized)

    def compute_text_features(self, classnames: list[str], template: str | None) -> torch.Tensor:
        prompt = self.prompt_input(classnames, template)
        with internals.low_rank_qkv(self._updates(self.text, self.text_layers, self.text_updates)):
            x = towers.with_positions(self.clip, prompt.embeddings)
            return towers.run_text(self.clip, self.text, x, prompt.pool)  # [C, E]

    def step(self, prefix, labels, classnames, frozen_image=None) -> Step:
        logits = self.logits(self.encode(prefix), classnames)[:, 0]  # [B, C]: 100 · cos
        ce = cross_entropy(logits, labels)
        return Step(ce, {"ce": ce}, logits)


MODELS = {"clip_lora": CLIPLoRA}
