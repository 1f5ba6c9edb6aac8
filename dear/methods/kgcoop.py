"""KgCoOp (htyao89/KgCoOp, KgCoOp/trainers/kgcoop.py): CoOp pulled towards the hand-written prompt.

Learnable parts: CoOp's context alone (`dear.methods.coop`; their code sets
requires_grad on the parameters named "ctx" only: the meta-net, bias vectors
and adapter it also builds never train nor enter the logits). With CTX_INIT
set, their code initializes from "a photo of a" whatever the value.
Loss: CE(CoOp's logits) + W (1 - mean_c cos(t_c, t_c^clip)) over the training
classes, t_c the learned prompt's class feature and t_c^clip the frozen CLIP's
feature of KgCoOp's own hand-written prompt for the dataset (its
CUSTOM_TEMPLATES, the recipe's `template`; DTD differs from zero-shot CLIP's),
computed once per class list. Inference: CoOp's logits (the template plays no
part in it).
"""

from __future__ import annotations

import torch

from dear.methods import prompts, towers
from dear.methods.base import Step, cross_entropy
from dear.methods.coop import CoOp


class KgCoOp(CoOp):
    TERMS = ("ce", "kg")

    def frozen_text(self, classnames: list[str]) -> torch.Tensor:
        """t^clip [C, E]: the untouched model's normalized features of the hand-written prompts."""
        texts = [prompts.hand_written(self.recipe.template, name).text for name in classnames]
        return self.once(("frozen-text", tuple(classnames), self.recipe.template),
                         lambda: towers.encode_texts(self.clip, self.text, self.tokenizer, texts))

    def step(self, prefix, labels, classnames, frozen_image=None) -> Step:
        text = self.text_features(classnames)  # [C, E], learned prompts
        image = self.encode(prefix)[:, 0]  # [B, E]
        logits = self.logit_scale().float() * image.float() @ text.float().t()  # [B, C]
        ce = cross_entropy(logits, labels)
        kg = 1.0 - (text.float() * self.frozen_text(classnames).float()).sum(-1).mean()
        return Step(ce + self.recipe.kg_weight * kg, {"ce": ce, "kg": kg}, logits)


MODELS = {"kgcoop": KgCoOp}
