"""VPT-deep on CLIP (Jia et al., ECCV 2022), as muzairkhattak/multimodal-prompt-learning runs it (trainers/vpt.py,
the VPT design of clip/model.py: VisionTransformer and ResidualAttentionBlock_IVLP).

What their code does, and this module with it, for n = n_ctx_vision tokens and depth J = prompt_depth_vision:
- layer 1: n learnable tokens [n, D], N(0, 0.02) (`VPT`), appended after the patches before ln_pre. ln_pre
  normalizes each token alone, so appending ln_pre(tokens) to the frozen prefix (which has been through
  ln_pre) is the same;
- layers 2..J: the last n positions are replaced by that layer's own tokens [n, D], N(0, 0.02) (`VPT_shallow`
  of blocks 1..J-1), raw (no ln_pre); later layers carry the outputs of layer J's tokens on;
- the image feature is the CLS row after ln_post and the projection, normalized;
- the class features are the frozen CLIP's of "a photo of a {class}." (FixedEmbeddings; "_" read as spaces),
  whatever the dataset; logits are CLIP's logit scale times the cosine; the loss is the cross-entropy.
Their code casts the tokens to half where they enter (`.half()`) whatever PREC says; under their PREC fp16 CLIP
is half too. Ours follow the run's precision (CPU: fp32).
Shapes: B images, C classes, E embedding width, D image tower width, N patches, n tokens.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from dear.contract import MethodModel, Step, check_layer, cross_entropy, internals, prompts, towers

INIT_STD = 0.02  # nn.init.normal_(ctx_vectors, std=0.02), for every layer's tokens


class VPTDeep(MethodModel):
    TERMS = ("ce",)

    def build(self, roles) -> None:
        r = self.recipe
        self.depth = check_layer(r.prompt_depth_vision, self.vision.layers, "prompt_depth_vision")
        width = self.vision.width  # D
        self.tokens = nn.ParameterList(nn.Parameter(nn.init.normal_(torch.empty(r.n_ctx_vision, width), std=INIT_STD))
                                       for _ in range(self.depth))  # layer l's tokens: tokens[l - 1], [n, D]

    @property
    def frozen_depth(self) -> int:
        return 0  # the tokens enter layer 1: no image block is frozen (else encode would run them twice)

    def _layer_tokens(self, layer: int, previous: torch.Tensor | None) -> torch.Tensor:
        """The tokens entering image layer `layer` [1, n, D]: layer 1's through ln_pre, the deeper ones raw."""
        own = self.tokens[layer - 1]
        return (internals.image_ln_pre(self.clip)(own) if layer == 1 else own)[None]

    def encode(self, prefix: torch.Tensor) -> torch.Tensor:
        """[B, 1+N, D] patch tokens after ln_pre -> the normalized CLS feature [B, 1, E]."""
        rows = towers.run_image(self.vision, prefix, 1, self._layer_tokens, range(1, self.depth + 1),
                                append_at=1)  # [B, 1+n, D]: the CLS row and the tokens' rows
        return F.normalize(internals.image_embedding(self.clip, rows[:, 0]), dim=-1)[:, None]

    def compute_text_features(self, classnames: list[str], template: str | None) -> torch.Tensor:
        """[C, E]: the frozen CLIP's features of the hand-written prompt of each class (FixedEmbeddings)."""
        texts = [prompts.hand_written(template, name).text for name in classnames]
        return towers.encode_texts(self.clip, self.text, self.tokenizer, texts)

    def step(self, prefix, labels, classnames, frozen_image=None) -> Step:
        logits = self.logits(self.encode(prefix), classnames)[:, 0]  # [B, C]
        ce = cross_entropy(logits, labels)
        return Step(ce, {"ce": ce}, logits)
