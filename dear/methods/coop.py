"""CoOp (KaiyangZhou/CoOp, trainers/coop.py) as CoCoOp's base-to-novel comparison runs it.

Learnable parts: M context vectors shared by all classes, initialized from
the token embeddings of `ctx_init` ("a photo of a": M = 4), or N(0, 0.02)
when ctx_init is empty (`n_ctx` of them). The prompt is "<ctx_init> <name>."
with its first M token embeddings after start-of-text replaced by the
context (`dear.methods.prompts.context`); the class token stays at the end.
Both encoders are frozen; the loss is the cross-entropy of CLIP's logit scale
times the cosine of image and class features.
"""

from __future__ import annotations

import torch
from torch import nn

from dear.methods import prompts, towers
from dear.methods.base import MethodModel, Step, cross_entropy
from dear.model import internals as oc


class CoOp(MethodModel):
    TERMS = ("ce",)
    INIT_STD = 0.02  # nn.init.normal_(ctx_vectors, std=0.02)

    def build(self, roles) -> None:
        self.context = nn.Parameter(self._initial_context())  # [M, D]

    def _initial_context(self) -> torch.Tensor:
        """The token embeddings of the context words, or random vectors (CoOp's PromptLearner)."""
        words = prompts.context_words(self.recipe.ctx_init, self.recipe.n_ctx)
        if not words:
            return torch.randn(self.recipe.n_ctx, self.text.width) * self.INIT_STD
        n = prompts.context(self.recipe.ctx_init, self.recipe.n_ctx, "x").learnable
        tokens = self.tokenizer([self.recipe.ctx_init.replace("_", " ")])  # [1, T]: SOT, the words, EOT
        return oc.text_token_embeddings(self.clip, tokens)[0, 1:1 + n].detach().clone().float()

    def prompt_input(self, classnames: list[str]) -> towers.TextInput:
        """The tokenized prompts "<ctx_init> <name>." of a class list (computed once)."""
        def tokenized():
            texts = [prompts.context(self.recipe.ctx_init, self.recipe.n_ctx, name).text for name in classnames]
            return towers.text_input(self.clip, self.tokenizer, texts)
        return self.once(("prompt", tuple(classnames)), tokenized)

    def compute_text_features(self, classnames: list[str], template: str | None) -> torch.Tensor:
        prompt = self.prompt_input(classnames)
        x = towers.with_positions(self.clip, towers.prompt_embeddings(prompt.embeddings, self.context))
        return towers.run_text(self.clip, self.text, x, prompt.pool)  # [C, E]

    def step(self, prefix, labels, classnames, frozen_image=None) -> Step:
        logits = self.logits(self.encode(prefix), classnames)[:, 0]  # [B, C]
        ce = cross_entropy(logits, labels)
        return Step(ce, {"ce": ce}, logits)


MODELS = {"coop": CoOp}
