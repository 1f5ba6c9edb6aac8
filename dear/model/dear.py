"""The adapted CLIP shared by all five methods (SPEC §4-7).

One frozen open_clip model, reused in place, plus the learnable parts a
`Method` asks for:
- a shared token bank R [rows, d_r]; image tokens (K = rows used) enter image
  layer J = `start_layer` through per-layer aligners with the β composition
  (MMRL: β = 1, replaced at every layer), layout [CLS, patches..., tok_1..tok_K],
  under the role masks (dear);
- text tokens from the same bank, inserted after start-of-text from text layer
  `text_start_layer` on (the causal mask stays causal, the pooling index moves);
- CoOp's context vectors in front of the class name (initialized from the
  prompt's own words, so that the untrained prompt is the hand-written one);
- the token features: one per token through P_attr (DeAR; P_attr starts as
  the frozen projection) or their mean through MMRL's randomly initialized
  projection, and the fusion weights w (α = softmax(w));
- the fade-in weight `fade` (a float the trainer sets; 1 = off): the frozen
  positions read the tokens with weight `fade` in their softmax and each token
  feature is `fade` of the way from the CLS feature to its own, so at 0 the
  model is the untouched one (`train.fade_in_epochs`, ours).

Why it is fast: image layers below J run under `torch.no_grad` (nothing there
depends on a learnable token), and for each class list the text tower's part
that does not depend on learnable tokens (token embeddings, and for text
tokens every layer below the start) is computed once and cached, as are the
frozen reference features of the losses. Padding after the end-of-text token
is cut off: under a causal mask it never reaches the pooled token.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from dear.errors import DearError
from dear.model import internals as oc
from dear.model.masks import HeadRole, fade_in, layer_masks
from dear.model.methods import Method, default_start


@dataclass
class TextPrefix:
    """What the text side computes once per class list (never depends on learnable tokens)."""

    hidden: torch.Tensor  # [C, T, D] input of the first adapted text layer (CoOp: token embeddings, no positions)
    pool: torch.Tensor  # [C] end-of-text index in `hidden`
    frozen: torch.Tensor  # [C, E] normalized features of the untouched model with the hand-written prompt


@dataclass
class ImageOutput:
    features: torch.Tensor  # [B, S+1, E] normalized; stream 0 = CLS, then the S attribute streams
    frozen_cls: torch.Tensor | None  # [B, E] normalized CLS feature of the untouched model


class Adapted(nn.Module):
    """CLIP plus a method's learnable parts; one forward path for every method."""

    def __init__(self, model: nn.Module, tokenizer, method: Method, template: str,
                 roles: list[HeadRole] | None = None, seed: int = 0):
        super().__init__()
        self.clip = model.eval().requires_grad_(False)
        self.tokenizer, self.method, self.template = tokenizer, method, template
        self.vision, self.text = oc.vision_tower(model), oc.text_tower(model)
        section = "mmrl" if method.pooling == "mean" else "dear"
        self.start = _check_start(method.start_layer or default_start(method, self.vision.layers), self.vision.layers,
                                  f"{section}.start_layer")
        self.text_start = _check_start(method.text_start_layer or default_start(method, self.text.layers),
                                       self.text.layers, f"{section}.text_start_layer")
        if method.role_masks and roles is None:
            raise DearError(f"--roles: method {method.name} needs the roles table from `dear profile`")
        self.roles = roles if method.role_masks else None
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            self._build(method)
        self.fade = 1.0  # the tokens' weight, 0 = invisible (see masks.fade_in); saved with the learnable state
        self._masks: dict = {}
        self._prefixes: dict = {}
        self._features: dict = {}

    def _build(self, m: Method) -> None:
        """Create the learnable parts (under a fixed seed: the same init on every run)."""
        K, N = m.attribute_tokens, m.text_tokens
        rows = max(K, N)
        self.bank = nn.Parameter(torch.randn(rows, m.d_r) * m.init_std) if rows else None  # R [rows, d_r]
        vision_layers = self.vision.layers - self.start + 1
        text_layers = self.text.layers - self.text_start + 1
        self.vision_aligners = nn.ModuleList(nn.Linear(m.d_r, self.vision.width) for _ in range(vision_layers if K else 0))
        self.text_aligners = nn.ModuleList(nn.Linear(m.d_r, self.text.width) for _ in range(text_layers if N else 0))
        self.p_attr = nn.Parameter(self._initial_projection(m)) if K else None  # [D, E]
        self.context = nn.Parameter(self._initial_context(m)) if m.context else None  # [M, D_text]
        if m.streams:
            rest = (1.0 - m.init_cls) / m.streams
            w = torch.tensor([m.init_cls] + [rest] * m.streams).log()  # α = softmax(w)
            self.fusion_w = nn.Parameter(w, requires_grad=m.objective == "fused")  # learned by our fused objective only
        else:
            self.fusion_w = None

    def _initial_projection(self, m: Method) -> torch.Tensor:
        """P_attr = the frozen projection (SPEC §6), or MMRL's proj_rep: width^-0.5 N(0, 1)."""
        frozen = oc.image_projection(self.clip).detach()  # [D, E]
        if m.projection_init == "proj":
            return frozen.clone()
        return torch.randn(frozen.shape) * frozen.shape[0] ** -0.5

    def _initial_context(self, m: Method) -> torch.Tensor:
        """CoOp's context [M, D]: random N(0, init_std), or the embeddings of the prompt's words before {}."""
        if m.context == "random":
            return torch.randn(m.context_tokens, self.text.width) * m.init_std
        prefix, _ = coop_prompt(self.template)
        tokens = self.tokenizer([prefix])  # [1, T]: SOT, the prefix's words, EOT
        n_words = int(oc.text_pool_index(self.clip, tokens)[0]) - 1
        return oc.text_token_embeddings(self.clip, tokens)[0, 1:1 + n_words].detach().clone()

    # --- state -----------------------------------------------------------------------

    def train(self, mode: bool = True) -> "Adapted":
        super().train(mode)
        self.clip.eval()  # the frozen model never switches to training behaviour
        return self

    def _apply(self, fn, *args, **kwargs):
        self._masks, self._prefixes, self._features = {}, {}, {}
        return super()._apply(fn, *args, **kwargs)

    def trainable_state(self) -> dict[str, torch.Tensor]:
        """Only the learnable tensors and the fade-in weight (what model.pt stores), on CPU."""
        state = {name: p.detach().cpu().clone() for name, p in self.named_parameters() if p.requires_grad}
        return {**state, "fade": torch.tensor(self.fade)} if self.has_tokens else state

    @property
    def has_tokens(self) -> bool:
        return bool(self.method.attribute_tokens or self.method.text_tokens)

    def load_trainable(self, state: dict[str, torch.Tensor], source: str) -> None:
        state = dict(state)
        self.fade = float(state.pop("fade", 1.0))  # model.pt files from before the fade-in: tokens at full weight
        own = dict((name, p) for name, p in self.named_parameters() if p.requires_grad)
        if set(own) != set(state) or any(own[k].shape != state[k].shape for k in own):
            raise DearError(f"{source}: learnable tensors do not match method {self.method.name} on this backbone; "
                            "retrain with `dear train`")
        with torch.no_grad():
            for name, value in state.items():
                own[name].copy_(value)

    @property
    def device(self) -> torch.device:
        return oc.text_positions(self.clip).device

    @property
    def alpha(self) -> torch.Tensor:
        """Fusion weights α = softmax(w): [S+1], α_0 for the CLS stream."""
        if self.fusion_w is None:
            return torch.ones(1, device=self.device)
        return self.fusion_w.softmax(0)

    # --- image side --------------------------------------------------------------------

    @property
    def frozen_depth(self) -> int:
        """Image blocks that never depend on a learnable tensor: those below the first token layer (all without tokens)."""
        return self.start - 1 if self.method.attribute_tokens else self.vision.layers

    @torch.no_grad()
    def image_prefix(self, images: torch.Tensor) -> torch.Tensor:
        """[B, 3, S, S] -> [B, 1+N, D]: the output of the frozen blocks (the same for every step's parameters)."""
        x = oc.image_tokens(self.clip, images)  # [B, 1+N, D]
        for block in self.vision.blocks[: self.frozen_depth]:
            x = oc.block_forward(block, x)
        return x

    def image_forward(self, images: torch.Tensor, with_frozen: bool = False) -> ImageOutput:
        """Adapted image features and, for the λ_img term, the untouched model's CLS feature."""
        return self.forward_from_prefix(self.image_prefix(images), with_frozen)

    def forward_from_prefix(self, x: torch.Tensor, with_frozen: bool = False,
                            frozen_cls: torch.Tensor | None = None) -> ImageOutput:
        """`image_forward` from the frozen blocks' output x [B, 1+N, D] (e.g. cached per augmented view).

        The untouched model's CLS feature is `frozen_cls` when given (cached), else computed when asked.
        """
        K, n_other = self.method.attribute_tokens, x.shape[1]
        start, fade = x, self.fade
        masks = self._layer_masks(n_other, x.device)
        positions = torch.arange(n_other + K, device=x.device)
        is_token = positions >= n_other  # [T]
        read = positions[(positions == 0) | is_token]  # [1+K] CLS and the tokens: all the last block must output
        blocks = self.vision.blocks[self.frozen_depth:]
        for i, block in enumerate(blocks):
            mask = masks.get(self.start + i) if masks else None
            if K:
                x = self._with_attribute_tokens(x, i, n_other)  # [B, 1+N+K, D]
                mask = fade_in(mask, is_token, fade)
            x = oc.block_forward(block, x, mask, rows=_in_last(read, i, blocks))  # last: [B, 1+K, D]
        features = F.normalize(oc.image_embedding(self.clip, x[:, 0])[:, None], dim=-1)  # [B, 1, E]
        if K:
            tokens = oc.image_ln_post(self.clip)(x[:, x.shape[1] - K:])  # [B, K, D]
            if self.method.pooling == "mean":  # MMRL: one representation feature
                tokens = tokens.mean(1, keepdim=True)  # [B, 1, D]
            streams = F.normalize(tokens @ self.p_attr, dim=-1)  # [B, S, E]
            if fade < 1.0:  # from the CLS feature (fade 0) to the stream's own (fade 1)
                streams = F.normalize(features + fade * (streams - features), dim=-1)
            features = torch.cat([features, streams], 1)
        if frozen_cls is None and with_frozen:
            frozen_cls = self.frozen_cls(start)
        return ImageOutput(features, frozen_cls)

    def _with_attribute_tokens(self, x: torch.Tensor, i: int, n_other: int) -> torch.Tensor:
        """r^l = β A^l(R) + (1-β) r̃^{l-1}; at the first token layer only β A^J(R)."""
        K, beta = self.method.attribute_tokens, self.method.beta
        fresh = beta * self.vision_aligners[i](self.bank[:K])  # [K, D]
        if i == 0:
            tokens = fresh.to(x.dtype).expand(x.shape[0], K, -1)
        else:
            tokens = fresh + (1.0 - beta) * x[:, n_other:]
        return torch.cat([x[:, :n_other], tokens.to(x.dtype)], 1)

    @torch.no_grad()
    def first_token_layer(self, images: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Input [B, 1+N+K, D] of the first token layer and its mask [H, T, T] (None: all open); for inspection.

        Methods with image tokens only (the others have no token layer).
        """
        x = self.image_prefix(images)
        n_other = x.shape[1]
        masks = self._layer_masks(n_other, x.device)
        return self._with_attribute_tokens(x, 0, n_other), masks[self.start] if masks else None

    @torch.no_grad()
    def frozen_cls(self, prefix: torch.Tensor) -> torch.Tensor:
        """The untouched model's normalized CLS feature [B, E] from the frozen blocks' output [B, 1+N, D]."""
        x = prefix
        blocks = self.vision.blocks[self.frozen_depth:]
        cls = torch.zeros(1, dtype=torch.long, device=x.device)
        for i, block in enumerate(blocks):
            x = oc.block_forward(block, x, rows=_in_last(cls, i, blocks))  # last: [B, 1, D]
        return F.normalize(oc.image_embedding(self.clip, x[:, 0]), dim=-1)

    def _layer_masks(self, n_other: int, device: torch.device) -> dict[int, torch.Tensor] | None:
        if self.roles is None or not self.method.attribute_tokens:
            return None
        key = (n_other, str(device))
        if key not in self._masks:
            layers = range(self.start, self.vision.layers + 1)
            masks = layer_masks(self.roles, list(self.method.concepts), layers, self.vision.heads, n_other)
            self._masks[key] = {layer: mask.to(device) for layer, mask in masks.items()}
        return self._masks[key]

    def image_features(self, images: torch.Tensor) -> torch.Tensor:
        """[B, 3, S, S] preprocessed images -> [B, S+1, E] normalized (stream 0 = CLS)."""
        return self.image_forward(images).features

    # --- text side ---------------------------------------------------------------------

    def text_features(self, classnames: list[str]) -> torch.Tensor:
        """[C, E] normalized class features; without autograd the result is cached per class list."""
        if torch.is_grad_enabled():
            return self._text_forward(self.prefix(classnames))
        key = (tuple(classnames), str(self.device), self.fade,
               tuple(p._version for p in self.parameters() if p.requires_grad))
        if key not in self._features:
            self._features = {key: self._text_forward(self.prefix(classnames))}
        return self._features[key]

    def frozen_text_features(self, classnames: list[str]) -> torch.Tensor:
        return self.prefix(classnames).frozen

    def prefix(self, classnames: list[str]) -> TextPrefix:
        key = (tuple(classnames), str(self.device))
        if key not in self._prefixes:
            self._prefixes = {key: self._text_prefix(list(classnames))}
        return self._prefixes[key]

    @torch.no_grad()
    def _text_prefix(self, classnames: list[str]) -> TextPrefix:
        device = self.device
        tokens = self.tokenizer([self.template.format(name) for name in classnames]).to(device)  # [C, T]
        pool = oc.text_pool_index(self.clip, tokens)
        length = int(pool.max()) + 1  # positions after the last end-of-text never reach it (causal)
        x = oc.text_token_embeddings(self.clip, tokens[:, :length]) + oc.text_positions(self.clip)[:length]
        mask = oc.text_causal_mask(self.clip, length).to(device)
        for i, block in enumerate(self.text.blocks):
            if i == self.text_start - 1:
                hidden = x
            x = oc.block_forward(block, x, mask, rows=_in_last(pool[:, None], i, self.text.blocks))
        frozen = F.normalize(oc.text_embedding(self.clip, x, torch.zeros_like(pool)), dim=-1)  # x: [C, 1, D]
        if self.context is not None:
            return self._coop_prefix(classnames, frozen)
        return TextPrefix(hidden=hidden, pool=pool, frozen=frozen)

    def _coop_prefix(self, classnames: list[str], frozen: torch.Tensor) -> TextPrefix:
        """CoOp's prompt: [SOT, ctx_1..ctx_M, class name tokens, suffix, EOT]; cache the token embeddings.

        The suffix is what the prompt holds after {} ("." for "a photo of a {}."; CoOp's own with random context).
        """
        suffix = coop_prompt(self.template)[1] if self.method.context == "prompt" else "."
        tokens = self.tokenizer([f"{name}{suffix}" for name in classnames]).to(self.device)  # [C, T]
        pool = oc.text_pool_index(self.clip, tokens)
        length = int(pool.max()) + 1
        room = oc.text_context_length(self.clip)
        if length + len(self.context) > room:
            raise DearError(f"train.coop: {len(self.context)} context vectors plus the longest class name "
                            f"({length} tokens) exceed the text context of {room}; use fewer context vectors")
        return TextPrefix(hidden=oc.text_token_embeddings(self.clip, tokens[:, :length]), pool=pool, frozen=frozen)

    def _text_forward(self, prefix: TextPrefix) -> torch.Tensor:
        if self.context is not None:
            return self._coop_forward(prefix)
        if not self.method.text_tokens:
            return prefix.frozen
        x, N = prefix.hidden, self.method.text_tokens
        mask = oc.text_causal_mask(self.clip, x.shape[1] + N).to(x.device)
        positions = torch.arange(x.shape[1] + N, device=x.device)
        mask = fade_in(mask, (positions >= 1) & (positions <= N), self.fade)  # layout [SOT, tok_1..N, rest]
        blocks = self.text.blocks[self.text_start - 1:]
        for i, block in enumerate(blocks):
            tokens = self.text_aligners[i](self.bank[:N]).to(x.dtype).expand(x.shape[0], N, -1)  # [C, N, D]
            rest = x[:, 1:] if i == 0 else x[:, 1 + N:]
            x = oc.block_forward(block, torch.cat([x[:, :1], tokens, rest], 1), mask,
                                 rows=_in_last((prefix.pool + N)[:, None], i, blocks))
        return F.normalize(oc.text_embedding(self.clip, x, torch.zeros_like(prefix.pool)), dim=-1)  # x: [C, 1, D]

    def _coop_forward(self, prefix: TextPrefix) -> torch.Tensor:
        emb, M = prefix.hidden, len(self.context)
        C, length = emb.shape[0], emb.shape[1] + M
        context = self.context.to(emb.dtype).expand(C, M, -1)
        x = torch.cat([emb[:, :1], context, emb[:, 1:]], 1) + oc.text_positions(self.clip)[:length]  # [C, T+M, D]
        mask = oc.text_causal_mask(self.clip, length).to(x.device)
        for i, block in enumerate(self.text.blocks):
            x = oc.block_forward(block, x, mask, rows=_in_last((prefix.pool + M)[:, None], i, self.text.blocks))
        return F.normalize(oc.text_embedding(self.clip, x, torch.zeros_like(prefix.pool)), dim=-1)  # x: [C, 1, D]

    # --- logits --------------------------------------------------------------------------

    def logit_scale(self) -> torch.Tensor:
        return oc.logit_scale(self.clip)

    def stream_logits(self, images: torch.Tensor, text_features: torch.Tensor) -> torch.Tensor:
        """τ · cos per stream: [B, S+1, C]."""
        return self.logits_from(self.image_features(images), text_features)

    def logits_from(self, image_features: torch.Tensor, text_features: torch.Tensor) -> torch.Tensor:
        """[B, S+1, E] x [C, E] -> [B, S+1, C]."""
        return self.logit_scale() * torch.einsum("bke,ce->bkc", image_features, text_features.to(image_features.dtype))

    @staticmethod
    def fused_logits(stream_logits: torch.Tensor, alpha: torch.Tensor) -> torch.Tensor:
        """Σ_k α_k s_k: [B, S+1, C] x [S+1] -> [B, C]."""
        return torch.einsum("bkc,k->bc", stream_logits, alpha.to(stream_logits.dtype))


def _in_last(rows: torch.Tensor, i: int, blocks: list) -> torch.Tensor | None:
    """`rows` for block i if it is the tower's last (nothing reads its other outputs: `oc.block_forward`), else all."""
    return rows if i == len(blocks) - 1 else None


def _check_start(layer: int, layers: int, key: str) -> int:
    if not 1 <= layer <= layers:
        raise DearError(f"params: {key} = {layer} is outside this backbone's layers 1..{layers}; pick one in range or null")
    return layer


COOP_DEFAULT_CONTEXT = "a photo of a"  # CoOp's ctx_init, for prompts with no words before {}


def coop_prompt(template: str) -> tuple[str, str]:
    """(context words, suffix) of a prompt: the words before {} become CoOp's context, the rest follows the name.

    "a photo of a {}." -> ("a photo of a", "."); "{} texture." -> CoOp's "a photo of a" and " texture.".
    """
    prefix, _, suffix = template.partition("{}")
    return (prefix.strip() or COOP_DEFAULT_CONTEXT), suffix
