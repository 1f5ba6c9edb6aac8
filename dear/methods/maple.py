"""MaPLe (muzairkhattak/multimodal-prompt-learning: trainers/maple.py, clip/model.py): coupled prompts in both towers.

Learnable parts (their MultiModalPromptLearner), for n = n_ctx prompt tokens and depth J = prompt_depth:
- context [n, D_t]: CoOp's, from the first n words of ctx_init ("a photo" of "a photo of a"), replacing positions
  1..n of "a photo of a {class}." ("of a {class}." stays fixed text);
- coupling: Linear(D_t -> D_v) with its own init (`proj`): the image prompts of layer 1 are coupling(context);
- deep_text: J - 1 tensors [n, D_t], N(0, 0.02) (`compound_prompts_text`): the text prompts of layers 2..J;
- deep_coupling: J - 1 copies of one initialized Linear(D_t -> D_v) (`compound_prompt_projections`,
  `_get_clones`): the image prompts of layers 2..J are deep_coupling[i](deep_text[i]).
D_t and D_v are the text and image widths (their code: ctx_dim read from ln_final, 512 and 768 written out for
ViT-B/16). The towers (their ResidualAttentionBlock_MaPLe), through `dear.methods.towers`:
- text: the deep prompts replace positions 1..n at layers 2..J; later layers carry them on; the end-of-text row
  stays where the tokenizer put it;
- image: coupling(context) is appended after the patches before ln_pre, which normalizes each token alone, so
  appending ln_pre(coupling(context)) to the frozen prefix is the same; replaced at layers 2..J; the CLS feature
  (ln_post, proj) is the image feature.
Loss: CE of CLIP's logit scale x cosine; the same forward at test time, on any class list.
Precision: under PREC fp16 (theirs; on CUDA) the context and coupling are half, the deep prompts and their couplings
fp32 (`half_parameters`). Their code casts every prompt to half where it enters (`.half()`) whatever PREC says, so
their fp32 and amp runs see prompts rounded to half; ours do not (CPU always runs fp32).
"""

from __future__ import annotations

import copy

import torch
import torch.nn.functional as F
from torch import nn

from dear.errors import DearError
from dear.methods import towers
from dear.methods.coop import CoOp
from dear.model import internals as oc

MAX_INIT_WORDS = 4  # `if ctx_init and n_ctx <= 4`: words start the context; past 4 their code draws random vectors


class MaPLe(CoOp):
    """CoOp's context and loss, plus deep text prompts and the coupled image prompts (see the module doc)."""

    def build(self, roles) -> None:
        r = self.recipe
        self.depth = _checked_depth(r.prompt_depth, self.vision.layers, self.text.layers)
        _check_context(r.ctx_init, r.n_ctx)
        super().build(roles)  # context [n, D_t]
        text, image = self.text.width, self.vision.width
        self.coupling = nn.Linear(text, image)
        self.deep_text = nn.ParameterList(nn.Parameter(nn.init.normal_(torch.empty(r.n_ctx, text), std=self.INIT_STD))
                                          for _ in range(self.depth - 1))
        one = nn.Linear(text, image)
        self.deep_coupling = nn.ModuleList(copy.deepcopy(one) for _ in range(self.depth - 1))

    def half_parameters(self) -> list[nn.Parameter]:
        """Under PREC fp16 their context (the fp16 token embedding's) and coupling (`proj.half()`) are half; the deep
        prompts and their couplings stay fp32 and are cast to half where they enter a layer."""
        return [self.context, *self.coupling.parameters()]

    # --- image side ---------------------------------------------------------------------

    @property
    def frozen_depth(self) -> int:
        return 0  # the coupled prompts enter the first layer

    def _image_prompts(self, layer: int, previous: torch.Tensor | None) -> torch.Tensor:
        """The prompts entering image layer `layer` [1, n, D_v]."""
        if layer == 1:
            return oc.image_ln_pre(self.clip)(self.coupling(self.context))[None]
        return self.deep_coupling[layer - 2](self.deep_text[layer - 2])[None]

    def encode(self, prefix: torch.Tensor) -> torch.Tensor:
        """[B, 1+N, D_v] patch tokens after ln_pre -> the normalized CLS feature [B, 1, E]."""
        rows = towers.run_image(self.vision, prefix, 1, self._image_prompts, range(1, self.depth + 1),
                                append_at=1)  # [B, 1+n, D_v]
        return F.normalize(oc.image_embedding(self.clip, rows[:, 0]), dim=-1)[:, None]

    # --- text side ----------------------------------------------------------------------

    def compute_text_features(self, classnames: list[str], template: str | None) -> torch.Tensor:
        prompt = self.prompt_input(classnames)
        x = towers.with_positions(self.clip, towers.prompt_embeddings(prompt.embeddings, self.context))
        deep = dict(enumerate(self.deep_text, start=2))  # layer -> [n, D_t]
        return towers.run_text(self.clip, self.text, x, prompt.pool, tokens=deep)  # [C, E]


def _checked_depth(depth: int, image_layers: int, text_layers: int) -> int:
    """prompt_depth fits both towers, or a one-line error naming the key."""
    layers = min(image_layers, text_layers)
    if not 1 <= depth <= layers:
        raise DearError(f"recipe: prompt_depth = {depth} is outside 1..{layers}, the layers of this backbone's "
                        f"shallower tower ({image_layers} image, {text_layers} text); set "
                        "train.recipes.maple.prompt_depth in range")
    return depth


def _check_context(ctx_init: str, n_ctx: int) -> None:
    """n_ctx tokens MaPLe can start from the words of ctx_init (any n_ctx >= 1 of random vectors for ''), or an error."""
    most = min(len(ctx_init.replace("_", " ").split(" ")), MAX_INIT_WORDS) if ctx_init else None
    if n_ctx < 1 or (most is not None and n_ctx > most):
        limit = f"1..{most} with ctx_init {ctx_init!r}" if most else "at least 1"
        raise DearError(f"recipe: n_ctx = {n_ctx} must be {limit} (MaPLe starts the context from up to "
                        f"{MAX_INIT_WORDS} of its words); set train.recipes.maple.n_ctx in range, or ctx_init: '' "
                        "for random vectors")


MODELS = {"maple": MaPLe}
