"""Representation tokens in both towers: MMRL's model (yunncheng/MMRL trainers/mmrl.py, clip/model_mmrl.py),
the block MMRL, MMRL++ and DeAR are built on.

Learnable parts: a bank R [n, rep_dim] of tokens, N(0, 0.02); per token
layer one projection into each tower (`aligners`; MMRL: copies of one
initialized Linear); the representation projection (`build_projection`,
`rep_projection`; MMRL: D^-0.5 N(0, 1)).
- image: from layer `start_layer` on, the projected tokens enter after the
  patches (MMRL puts them after CLS: no position embedding reaches them, so
  the order changes nothing but float rounding), replaced at every layer
  (`_vision_tokens` may mix in the previous layer's outputs); CLS -> ln_post
  -> proj (frozen) is the CLS feature; the tokens' final states -> ln_post
  -> mean -> the representation projection, the representation feature.
- text: from the same layer on, the tokens are inserted after start-of-text
  and replaced at every later layer (`compose_text` may mix them with the
  previous layer's outputs); the pooled end-of-text index moves by n.
- loss: alpha CE(CLS) + (1 - alpha) CE(representation) + reg_weight (1 - cos)
  between the CLS feature and the untouched model's, and between each class's
  feature and the untouched model's with the same prompt (mean over classes).
- logits: 100 x cosine (`logit_scale`); base classes and the transfer source
  are predicted by alpha CLS + (1 - alpha) representation logits, unseen
  classes by the CLS logits alone (MMRL's decoupled inference).
Ours, off in MMRL's recipe: `fade_in_epochs` (the tokens fade in, so the
untrained model is zero-shot CLIP) and `views` (the trainer's view bank).
"""

from __future__ import annotations

import copy

import torch
import torch.nn.functional as F
from torch import nn

from dear.methods import prompts, towers
from dear.methods.base import MethodModel, Step, check_layer, cross_entropy
from dear.methods.layers import half
from dear.model import internals as oc


class RepresentationTokens(MethodModel):
    """Representation tokens in both towers, MMRL's model; its subclasses change the parts named below."""

    needs_frozen_image = True  # the image regularizer compares with it (logged even when reg_weight is 0)
    TERMS = ("cls", "attr", "fused", "img", "txt")
    INIT_STD = 0.02  # nn.init.normal_(compound_rep_tokens, std=0.02)
    compose_text: towers.ComposeFn | None = None  # text layers after the first take the layer's tokens alone

    # --- learnable parts ----------------------------------------------------------------

    def build(self, roles) -> None:
        r = self.recipe
        self.start = check_layer(r.start_layer or half(self.vision.layers), self.vision.layers, "start_layer")
        self.text_start = check_layer(r.start_layer or half(self.text.layers), self.text.layers, "start_layer")
        self.bank = nn.Parameter(torch.randn(r.tokens, r.rep_dim) * self.INIT_STD)  # R [n, REP_DIM]
        self.vision_aligners = self.aligners(self.vision.width, self.vision.layers - self.start + 1)
        self.text_aligners = self.aligners(self.text.width, self.text.layers - self.text_start + 1)
        self.build_projection()

    def aligners(self, width: int, layers: int) -> nn.Module:
        """One projection R -> tower width per token layer, indexable by layer offset (MMRL: copies of one
        initialized Linear, `_get_clones`)."""
        return copies(nn.Linear(self.recipe.rep_dim, width), layers)

    def build_projection(self) -> None:
        """proj_rep [D, E]: MMRL's D^-0.5 N(0, 1)."""
        frozen = oc.image_projection(self.clip).detach()  # [D, E]
        self.projection = nn.Parameter(torch.randn(frozen.shape) * frozen.shape[0] ** -0.5)  # proj_rep

    def rep_projection(self) -> torch.Tensor:
        """The projection of the representation feature [D, E]."""
        return self.projection

    @property
    def image_tokens(self) -> int:
        return self.bank.shape[0]

    @property
    def text_tokens(self) -> int:
        return self.bank.shape[0]

    # --- image side ---------------------------------------------------------------------

    @property
    def frozen_depth(self) -> int:
        return self.start - 1

    def _vision_tokens(self, layer: int, previous: torch.Tensor | None) -> torch.Tensor:
        """The tokens entering image layer `layer` [1, n, D]: projected afresh at every layer (MMRL)."""
        return self.vision_aligners[layer - self.start](self.bank[: self.image_tokens])[None]

    def _masks(self, n_other: int, device: torch.device) -> dict[int, torch.Tensor] | None:
        return None  # every head reads every token (DeAR masks them)

    def encode(self, prefix: torch.Tensor) -> torch.Tensor:
        """[B, 1+N, D] frozen prefix -> [B, 1+S, E] normalized: CLS, then the token streams."""
        rows = towers.run_image(self.vision, prefix, self.start, self._vision_tokens,
                                range(self.start, self.vision.layers + 1), append_at=self.start,
                                masks=self._masks(prefix.shape[1], prefix.device), fade=self.fade)  # [B, 1+n, D]
        cls = F.normalize(oc.image_embedding(self.clip, rows[:, 0]), dim=-1)[:, None]  # [B, 1, E]
        streams = F.normalize(self._streams(oc.image_ln_post(self.clip)(rows[:, 1:])), dim=-1)  # [B, S, E]
        if self.fade < 1.0:  # ours: each stream moves from the CLS feature (fade 0) to its own (fade 1)
            streams = F.normalize(cls + self.fade * (streams - cls), dim=-1)
        return torch.cat([cls, streams], 1)

    def _streams(self, tokens: torch.Tensor) -> torch.Tensor:
        """The tokens' final states after ln_post [B, n, D] -> stream features [B, S, E] (MMRL: their mean)."""
        return tokens.mean(1, keepdim=True) @ self.rep_projection().to(tokens.dtype)

    # --- text side ----------------------------------------------------------------------

    def _frozen_text_input(self, classnames: list[str], template: str) -> tuple[torch.Tensor, torch.Tensor]:
        """(the input of the first token layer [C, T, D], end-of-text index [C]) of the hand-written prompts."""
        def compute():
            texts = [prompts.hand_written(template, name).text for name in classnames]
            prompt = towers.text_input(self.clip, self.tokenizer, texts)
            x = towers.with_positions(self.clip, prompt.embeddings)
            mask = oc.text_causal_mask(self.clip, x.shape[1]).to(x.device)
            return towers.text_hidden(self.text, x, self.text_start - 1, mask, prompt.pool), prompt.pool
        return self.once(("text-input", tuple(classnames), template), compute)

    def compute_text_features(self, classnames: list[str], template: str | None) -> torch.Tensor:
        x, pool = self._frozen_text_input(classnames, template)
        n = self.text_tokens
        tokens = {self.text_start + i: aligner(self.bank[:n]) for i, aligner in enumerate(self.text_aligners)}
        return towers.run_text(self.clip, self.text, x, pool, self.text_start, tokens, insert_at=self.text_start,
                               fade=self.fade, compose=self.compose_text)  # [C, E]

    def frozen_text(self, classnames: list[str], template: str | None = None) -> torch.Tensor:
        """The untouched model's features [C, E] of the same prompts (the text regularizer's target)."""
        template = template or self.recipe.template
        texts = [prompts.hand_written(template, name).text for name in classnames]
        return self.once(("frozen-text", tuple(classnames), template),
                         lambda: towers.encode_texts(self.clip, self.text, self.tokenizer, texts))

    # --- loss and inference -------------------------------------------------------------

    @property
    def alpha(self) -> torch.Tensor:
        a = self.recipe.alpha
        return torch.tensor([a, 1.0 - a], device=self.device)

    def stream_names(self) -> list[str]:
        return ["cls", "rep"]

    def fused(self, logits: torch.Tensor, alpha: torch.Tensor) -> torch.Tensor:
        """sum_k alpha_k s_k: [B, S+1, C] x [S+1] -> [B, C]."""
        return torch.einsum("bkc,k->bc", logits, alpha.to(logits.dtype))

    def step(self, prefix, labels, classnames, frozen_image=None) -> Step:
        """frozen_image: the untouched CLS feature [B, E] (the trainer's cache); computed here when not given, so the
        image regularizer is never silently 0."""
        if frozen_image is None:
            frozen_image = self.frozen_image(prefix)
        features = self.encode(prefix)  # [B, S+1, E]
        text = self.text_features(classnames)  # [C, E]
        logits = self.logit_scale().float() * torch.einsum("bke,ce->bkc", features.float(), text.float())
        alpha = self.alpha
        fused = self.fused(logits, alpha)  # [B, C]
        terms = {"cls": cross_entropy(logits[:, 0], labels), "attr": self._attribute_ce(logits[:, 1:], labels),
                 "fused": cross_entropy(fused, labels),
                 "img": one_minus_cos(features[:, 0], frozen_image),
                 "txt": one_minus_cos(text, self.frozen_text(classnames)), **self._fusion_terms(alpha)}
        return Step(self._total(terms), terms, fused)

    def _attribute_ce(self, streams: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        """CE of the representation stream(s) [B, S, C] (MMRL: one stream)."""
        return cross_entropy(streams[:, 0], labels) if streams.shape[1] == 1 else cross_entropy(streams.mean(1), labels)

    def _fusion_terms(self, alpha: torch.Tensor) -> dict[str, torch.Tensor]:
        """Terms on the fusion weights (MMRL's are fixed: none)."""
        return {}

    def _total(self, terms: dict) -> torch.Tensor:
        a, reg = self.recipe.alpha, self.recipe.reg_weight
        return a * terms["cls"] + (1.0 - a) * terms["attr"] + reg * (terms["img"] + terms["txt"])

    def output(self, logits: torch.Tensor, alpha: torch.Tensor, seen: bool, novel: str) -> torch.Tensor:
        """MMRL's decoupled inference: fused on seen classes, CLS alone on unseen ones (whatever `novel` says)."""
        return self.fused(logits, alpha) if seen else logits[:, 0]

    # --- state ----------------------------------------------------------------------------

    def extra_state(self) -> dict[str, torch.Tensor]:
        return {"fade": torch.tensor(self.fade)}

    def load_extra_state(self, state: dict[str, torch.Tensor]) -> None:
        self.fade = float(state.get("fade", 1.0))  # model.pt files from before the fade-in: full weight


def _copies(layer: nn.Module, n: int) -> nn.ModuleList:
    """n deep copies of one initialized layer (MMRL's `_get_clones`: every copy starts equal)."""
    return nn.ModuleList(copy.deepcopy(layer) for _ in range(n))


def _one_minus_cos(features: torch.Tensor, reference: torch.Tensor) -> torch.Tensor:
    """mean over rows of 1 - cos; both [R, E] normalized."""
    return (1.0 - (features.float() * reference.float()).sum(-1)).mean()


def copies(layer: nn.Module, n: int) -> nn.ModuleList:
    """n deep copies of one initialized layer (MMRL's `_get_clones`: every copy starts equal)."""
    return nn.ModuleList(copy.deepcopy(layer) for _ in range(n))


def one_minus_cos(features: torch.Tensor, reference: torch.Tensor) -> torch.Tensor:
    """mean over rows of 1 - cos; both [R, E] normalized."""
    return (1.0 - (features.float() * reference.float()).sum(-1)).mean()
