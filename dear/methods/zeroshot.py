"""Zero-shot CLIP (CoOp's trainers/zsclip.py, ZeroshotCLIP): the hand-written prompt of each dataset.

Nothing learns. Class features are the untouched model's features of
`template.format(name)` (names with "_" read as spaces), image features its
CLS features, logits CLIP's logit scale times their cosine.
"""

from __future__ import annotations

import torch

from dear.methods import prompts, towers
from dear.methods.base import MethodModel


class ZeroShot(MethodModel):
    def compute_text_features(self, classnames: list[str], template: str | None) -> torch.Tensor:
        texts = [prompts.hand_written(template, name).text for name in classnames]
        return towers.encode_texts(self.clip, self.text, self.tokenizer, texts)  # [C, E]


MODELS = {"zeroshot": ZeroShot}
