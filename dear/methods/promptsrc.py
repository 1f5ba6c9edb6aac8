"""PromptSRC (muzairkhattak/PromptSRC: trainers/promptsrc.py, clip/model.py's IVLP blocks) as its authors train it.

Learnable parts, independent in the two towers (no coupling):
- text: CoOp's context (`n_ctx` vectors from the words of `ctx_init`, used
  only when n_ctx <= 4) in "a photo of a {class}.", and N(0, 0.02) deep
  prompts replacing positions 1..n_ctx at text layers 2..text_depth;
- image: `n_ctx_vision` N(0, 0.02) prompts appended after the patches at
  layer 1 and replaced at layers 2..vision_depth. The authors append the
  first ones before ln_pre; ln_pre is per token, so appending ln_pre(v) to
  the frozen embeddings (which end with ln_pre) is the same.
Loss (PromptSRC.forward_backward): CE(CLIP's logit scale x cos) + text_loss_weight
L1(text features, t_zs) + image_loss_weight L1(image features, v_zs) +
logits_loss_weight KL(softmax(s v_zs t_zs^T) || softmax(logits)), summed over
batch x classes and divided by their count. t_zs: the untouched CLIP's text
features of `teacher_templates`, averaged unnormalized, then normalized
(computed in fp32 as theirs, whatever the training precision); v_zs: the
untouched CLIP's image features of the same augmented batch.
After each epoch the learnable tensors enter a Gaussian-weighted sum over the
epochs (`dear.methods.averaging`, GPA); after the last one the sum is the model.
Precision fp16: the context is half (theirs is made in CLIP's dtype), the
prompts stay fp32 and are cast to half where they enter a tower (theirs).
Logits and losses are computed in fp32 (theirs in fp16 under fp16).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from dear.errors import DearError
from dear.methods import towers
from dear.methods.base import Step, cross_entropy
from dear.methods.coop import CoOp
from dear.model import internals as oc
from dear.methods.averaging import EpochAverage, gaussian_weights

AVERAGE = "gpa."  # prefix of the running sums in the extra state (model.pt, checkpoints)
TEACHER_CHUNK = 1000  # teacher prompts per text-tower pass


class PromptSRC(CoOp):
    TERMS = ("ce", "txt", "img", "kl")
    needs_frozen_image = True

    def build(self, roles) -> None:
        r = self.recipe
        if r.ctx_init and r.n_ctx > 4:
            raise DearError(f"recipe: ctx_init {r.ctx_init!r} with n_ctx {r.n_ctx}: PromptSRC initializes from "
                            "words only when n_ctx <= 4; set train.recipes.promptsrc.ctx_init to '' or n_ctx <= 4")
        self.vision_depth = _depth(r.vision_depth, self.vision.layers, "vision_depth", "image", lowest=0)
        self.text_depth = _depth(r.text_depth, self.text.layers, "text_depth", "text", lowest=1)
        super().build(roles)  # the context [n_ctx, Dt]
        shape = (self.vision_depth, r.n_ctx_vision, self.vision.width)
        self.vision_prompts = nn.Parameter(torch.randn(shape) * self.INIT_STD)  # layer l: row l-1
        shape = (self.text_depth - 1, r.n_ctx, self.text.width)
        self.text_prompts = nn.Parameter(torch.randn(shape) * self.INIT_STD)  # layer l >= 2: row l-2
        self.average = EpochAverage(self.epoch_weights(), self._learnable())

    def _learnable(self) -> dict[str, nn.Parameter]:
        return {name: p for name, p in self.named_parameters() if p.requires_grad}

    def half_parameters(self) -> list[nn.Parameter]:
        return [self.context]  # the deep prompts stay fp32 and enter the towers cast to half, as in their code

    def epoch_weights(self) -> list[float]:
        """GPA's weight of each epoch: N(e; mean, std) normalized over e = 1..epochs, mean and std scaled by
        epochs / gpa_epochs (the authors' values when the run has their epochs)."""
        r = self.recipe
        scale = r.epochs / r.gpa_epochs
        return gaussian_weights(r.epochs, r.gpa_mean * scale, r.gpa_std * scale)

    # --- image side ---------------------------------------------------------------------

    @property
    def frozen_depth(self) -> int:
        return 0 if self.vision_depth else self.vision.layers

    def _vision_tokens(self, layer: int, previous: torch.Tensor | None) -> torch.Tensor:
        """[1, n, D] prompts entering image layer `layer`; layer 1's through ln_pre (theirs: before it)."""
        tokens = self.vision_prompts[layer - 1]
        if layer == 1:
            tokens = oc.image_ln_pre(self.clip)(tokens.to(oc.image_dtype(self.clip)))
        return tokens[None]

    def encode(self, prefix: torch.Tensor) -> torch.Tensor:
        """[B, 1+N, D] patch embeddings after ln_pre -> [B, 1, E] normalized CLS feature."""
        if not self.vision_depth:
            return self.frozen_image(prefix)[:, None]
        rows = towers.run_image(self.vision, prefix, 1, self._vision_tokens, range(1, self.vision_depth + 1),
                                append_at=1)  # [B, 1+n, D]
        return F.normalize(oc.image_embedding(self.clip, rows[:, 0]), dim=-1)[:, None]

    # --- text side ----------------------------------------------------------------------

    def compute_text_features(self, classnames: list[str], template: str | None) -> torch.Tensor:
        prompt = self.prompt_input(classnames)
        x = towers.with_positions(self.clip, towers.prompt_embeddings(prompt.embeddings, self.context))
        deep = {layer: tokens for layer, tokens in enumerate(self.text_prompts, start=2)}  # [n, Dt] each
        return towers.run_text(self.clip, self.text, x, prompt.pool, tokens=deep)  # [C, E]

    def teacher_text(self, classnames: list[str]) -> torch.Tensor:
        """t_zs [C, E]: the untouched CLIP's features of every teacher template, mean of unnormalized, normalized."""
        return self.once(("teacher", tuple(classnames)), lambda: self._teacher(classnames))

    def _teacher(self, classnames: list[str]) -> torch.Tensor:
        """Theirs encode one template at a time; the prompts are independent, so chunks of any size give the same
        features (3x faster on CPU in chunks of 1000)."""
        return towers.template_features(self.clip, self.tokenizer, self.recipe.teacher_templates, classnames,
                                        chunk=TEACHER_CHUNK)

    # --- loss and averaging -------------------------------------------------------------

    def step(self, prefix, labels, classnames, frozen_image=None) -> Step:
        image = self.encode(prefix)[:, 0].float()  # [B, E]
        text = self.text_features(classnames).float()  # [C, E]
        scale = self.logit_scale().float()
        logits = scale * image @ text.t()  # [B, C]
        zero_shot = (frozen_image if frozen_image is not None else self.frozen_image(prefix)).float()  # [B, E]
        teacher = self.teacher_text(classnames)  # [C, E]
        zero_shot_logits = scale * zero_shot @ teacher.t()  # [B, C]
        terms = {"ce": cross_entropy(logits, labels), "txt": F.l1_loss(text, teacher),
                 "img": F.l1_loss(image, zero_shot),
                 "kl": F.kl_div(F.log_softmax(logits, 1), F.log_softmax(zero_shot_logits, 1), reduction="sum",
                                log_target=True) / logits.numel()}
        r = self.recipe
        regularizers = r.logits_loss_weight * terms["kl"] + r.text_loss_weight * terms["txt"] \
            + r.image_loss_weight * terms["img"]
        return Step(terms["ce"] + regularizers, terms, logits)

    def on_epoch_end(self, epoch: int, epochs: int) -> None:
        self.average.update(epoch, epochs, self._learnable())

    def extra_state(self) -> dict[str, torch.Tensor]:
        return self.average.state(AVERAGE)

    def load_extra_state(self, state: dict[str, torch.Tensor]) -> None:
        self.average.load_state(state, AVERAGE)


def _depth(depth: int, layers: int, key: str, tower: str, lowest: int) -> int:
    if not lowest <= depth <= layers:
        raise DearError(f"recipe: {key} = {depth} does not fit this backbone's {layers} {tower} layers; "
                        f"set train.recipes.promptsrc.{key} in {lowest}..{layers}")
    return depth


MODELS = {"promptsrc": PromptSRC}
