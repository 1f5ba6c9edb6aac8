"""DeAR (SPEC §4-7) and its ablation without the role mask, on MMRL's token machinery.

What DeAR changes in MMRL (`dear.methods.mmrl`):
- K attribute tokens, one per concept of `concepts` (color, shape, texture,
  object, position), from the layers after the first two thirds on
  (`start_layer`); each layer's tokens are r^l = beta A^l(R) + (1 - beta)
  r^(l-1) (at the first token layer only beta A^J(R));
- under the Role-Based Attention Mask (`dear.model.masks`, from the roles
  table of `dear profile`): a generalization head never reads a token, an
  attribute head reads only its concept's token (`dear_nomask`: every head
  reads every token, the ablation);
- one stream per token: f_k = P_attr(ln_post(z[attr_k])), P_attr starting as
  the frozen projection, so K attribute logits beside the CLS logits;
- fusion weights alpha = softmax(w) over the K+1 streams, alpha_0 =
  `init_cls` at the start; `dear fuse` refits them on validation shots;
- the loss: MMRL's with the K streams' CEs averaged (`attribute_loss`), or
  our fused objective (`objective: fused`);
- inference: the fused logits on seen classes, on unseen ones the CLS logits
  (`fusion.novel: cls`, MMRL's decoupled inference) or the fused ones.
Its text tokens (`text_tokens`, from `text_start_layer`) come from the same
bank, as MMRL's do; the per-layer aligners are initialized independently.
"""

from __future__ import annotations

from typing import ClassVar

import torch
from torch import nn

from dear.errors import DearError
from dear.methods.base import check_layer, cross_entropy
from dear.methods.layers import two_thirds as default_start
from dear.methods.mmrl import MMRL
from dear.model import internals as oc
from dear.model.masks import HeadRole, layer_masks


class DeAR(MMRL):
    TERMS = ("cls", "attr", "fused", "img", "txt", "fus")
    refits_fusion = True
    masked: ClassVar[bool] = True

    def build(self, roles: list[HeadRole] | None) -> None:
        r = self.recipe
        K, N = r.attribute_tokens, r.text_tokens
        if K > len(r.concepts) or len(set(r.concepts)) != len(r.concepts):
            raise DearError(f"recipe: attribute_tokens ({K}) needs as many distinct concepts (got {r.concepts}); "
                            "list one concept per token in train.recipes.dear.concepts")
        if self.masked and roles is None:
            raise DearError(f"--roles: method {self.name} needs the roles table from `dear profile`")
        self.roles = roles if self.masked else None
        self.concepts = list(r.concepts[:K])
        self.start = check_layer(r.start_layer or default_start(self.vision.layers), self.vision.layers, "start_layer",
                                 nullable=True)
        self.text_start = check_layer(r.text_start_layer or default_start(self.text.layers), self.text.layers,
                                      "text_start_layer", nullable=True)
        rows = max(K, N)
        self.bank = nn.Parameter(torch.randn(rows, r.rep_dim) * r.init_std) if rows else None  # R [rows, d_r]
        self.vision_aligners = nn.ModuleList(nn.Linear(r.rep_dim, self.vision.width)
                                             for _ in range(self.vision.layers - self.start + 1 if K else 0))
        self.text_aligners = nn.ModuleList(nn.Linear(r.rep_dim, self.text.width)
                                           for _ in range(self.text.layers - self.text_start + 1 if N else 0))
        self.projection = nn.Parameter(oc.image_projection(self.clip).detach().clone()) if K else None  # P_attr
        if K:
            w = torch.tensor([r.init_cls] + [(1.0 - r.init_cls) / K] * K).log()  # alpha = softmax(w)
            self.fusion_w = nn.Parameter(w, requires_grad=r.objective == "fused")  # learned by our fused objective
        else:
            self.fusion_w = None

    @property
    def image_tokens(self) -> int:
        return self.recipe.attribute_tokens

    @property
    def text_tokens(self) -> int:
        return self.recipe.text_tokens

    @property
    def frozen_depth(self) -> int:
        return self.start - 1 if self.image_tokens else self.vision.layers

    def _vision_tokens(self, layer: int, previous: torch.Tensor | None) -> torch.Tensor:
        """r^l = beta A^l(R) + (1 - beta) r^(l-1); at the first token layer only beta A^J(R)."""
        beta = self.recipe.beta
        fresh = beta * self.vision_aligners[layer - self.start](self.bank[: self.image_tokens])  # [K, D]
        return fresh[None] if previous is None else fresh + (1.0 - beta) * previous

    def _masks(self, n_other: int, device: torch.device) -> dict[int, torch.Tensor] | None:
        if self.roles is None or not self.image_tokens:
            return None
        def build():
            masks = layer_masks(self.roles, self.concepts, range(self.start, self.vision.layers + 1),
                                self.vision.heads, n_other)
            return {layer: mask.to(device) for layer, mask in masks.items()}
        return self.once(("masks", n_other), build)

    @torch.no_grad()
    def first_token_layer(self, images: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Input [B, 1+N+K, D] of the first token layer and its mask [H, T, T] (None: all open); for inspection."""
        prefix = self.image_prefix(images)
        tokens = self._vision_tokens(self.start, None).to(prefix.dtype).expand(prefix.shape[0], -1, -1)
        masks = self._masks(prefix.shape[1], prefix.device)
        return torch.cat([prefix, tokens], 1), masks[self.start] if masks else None

    def encode(self, prefix: torch.Tensor) -> torch.Tensor:
        if not self.image_tokens:
            return self.frozen_image(prefix)[:, None]
        return super().encode(prefix)

    def _streams(self, tokens: torch.Tensor) -> torch.Tensor:
        return tokens @ self.projection.to(tokens.dtype)  # [B, K, E]: one stream per token

    def compute_text_features(self, classnames: list[str], template: str | None) -> torch.Tensor:
        if not self.text_tokens:
            return self.frozen_text(classnames, template)
        return super().compute_text_features(classnames, template)

    # --- loss and inference -------------------------------------------------------------

    @property
    def alpha(self) -> torch.Tensor:
        if self.fusion_w is None:
            return torch.ones(1, device=self.device)
        return self.fusion_w.softmax(0)

    def stream_names(self) -> list[str]:
        return ["cls", *self.concepts]

    def _attribute_ce(self, streams: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        """The K streams' CE [B, K, C]: the mean of each stream's CE, or the CE of their mean logits (ours)."""
        if not streams.shape[1]:
            return streams.new_zeros(())
        if self.recipe.attribute_loss == "mean_logits":
            return cross_entropy(streams.mean(1), labels)
        per_stream = torch.nn.functional.cross_entropy(
            streams.float().transpose(1, 2), labels[:, None].expand(-1, streams.shape[1]), reduction="none")  # [B, K]
        return per_stream.mean()

    def _fusion_terms(self, alpha: torch.Tensor) -> dict[str, torch.Tensor]:
        return {"fus": -alpha[0].float().log()}  # the fused objective's pull towards the CLS stream

    def _total(self, terms: dict) -> torch.Tensor:
        r = self.recipe
        regularizers = r.reg_weight * (terms["img"] + terms["txt"])
        if r.objective == "fused":
            return terms["fused"] + regularizers + r.lambda_fus * terms["fus"]
        return r.alpha * terms["cls"] + (1.0 - r.alpha) * terms["attr"] + regularizers

    def output(self, logits: torch.Tensor, alpha: torch.Tensor, seen: bool, novel: str) -> torch.Tensor:
        """Fused on seen classes; on unseen ones `fusion.novel`: the CLS stream alone (cls) or fused."""
        return self.fused(logits, alpha) if seen or novel == "fused" else logits[:, 0]


class DeARNoMask(DeAR):
    masked = False


MODELS = {"dear": DeAR, "dear_nomask": DeARNoMask}
