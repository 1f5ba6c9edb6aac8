"""DeAR as a library: head roles, the role mask and attribute tokens in your own training loop.

Everything here works on any open_clip CLIP with a CLS-token ViT image tower
(the models `dear check` accepts), without a params file or the pipeline:

- `load_clip`: an open_clip model by name or config JSON, with random weights
  or a local weights file (every key and shape checked);
- `head_roles`: each image head's concept, Concept Entropy and role (SPEC §1-3)
  from your images and a concept bank, as the table `dear profile` writes;
- `role_masks`: the Role-Based Attention Mask of the token layers (SPEC §5);
- `encode_image`: image features with your own tokens behind such masks;
- `attribute_tokens`: your CLIP with DeAR's attribute and text tokens behind
  that mask, an `nn.Module` you train with your own optimizer (`DeARModel`);
- `fuse_logits`: the Task-Adaptive Fusion of stream logits (SPEC §6);
- `load_trained`: a `model.pt` of any method trained by the pipeline.

Layers are 1-based everywhere (layer 1 is the first block), heads 0-based,
as in `roles.parquet`. Only the names in `__all__` are public; the modules
behind them may change. Settings not given take the SPEC's defaults.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Callable, Iterable, Iterator, Literal, Sequence

import pyarrow as pa
import torch
from torch import nn

from dear.errors import DearError

__all__ = ["RoleSettings", "DeARModel", "load_clip", "head_roles", "role_masks", "encode_image", "attribute_tokens",
           "fuse_logits", "load_trained", "CORE_CONCEPTS"]

CORE_CONCEPTS: tuple[str, ...] = ("color", "shape", "texture", "object", "position")  # SPEC §3-4, token order
ROLE_COLUMNS = ("layer", "head", "entropy_bits", "role", "concept", "concept_share", "mask_role", "n_images")
RolesLike = Any  # a pyarrow Table, a pandas DataFrame, a list of row dicts, or the path of a roles.parquet


@dataclass(frozen=True)
class RoleSettings:
    """How `head_roles` profiles the heads (SPEC §1-3); None means the SPEC default, cut to what the data allow."""

    layers: int | None = None  # the last this many image layers; None: 4, or all of a shallower tower
    svd_rank: int | None = None  # TextSpan's r; None: 80, at most (images - 1) and the embedding width
    texts_per_head: int | None = None  # TextSpan's N; None: 20, at most r and the bank's size
    weighting: Literal["uniform", "variance"] = "uniform"  # P over concepts: count picks (paper) | by variance
    contributions: Literal["embedding", "normalized"] = "embedding"  # terms of the raw embedding (SPEC §1)
    roles_mode: Literal["absolute", "quantile"] = "quantile"  # low/high in bits, or quantiles of all heads
    low: float = 0.25  # H <= low: attribute head
    high: float = 0.75  # H >= high: generalization head
    concepts: tuple[str, ...] = (*CORE_CONCEPTS, "scene", "count", "style", "material", "action", "lighting",
                                 "weather", "size")  # the concepts a bank file may use


def load_clip(arch: str, pretrained: str | Path | None = None, quick_gelu: bool = False,
              ) -> tuple[nn.Module, Callable[[list[str]], torch.Tensor], Callable]:
    """(model in eval mode, tokenizer, eval transform) of an open_clip architecture.

    arch: an open_clip name (ViT-B-16, dear-world-tiny, ...) or a config JSON; pretrained: None (random weights)
    or a local weights file (state dict, open_clip checkpoint or .safetensors; OpenAI weights need quick_gelu).
    The image tower is checked to be one DeAR serves (a CLS-token ViT).
    """
    from dear.model import clip as oc_clip
    from dear.model import internals

    model = oc_clip.create_model(arch, None if pretrained is None else str(pretrained), quick_gelu=quick_gelu).eval()
    internals.vision_tower(model)
    internals.text_tower(model)
    return model, oc_clip.tokenizer(arch), oc_clip.eval_transform(model)


@torch.no_grad()
def head_roles(model: nn.Module, tokenizer: Callable[[list[str]], torch.Tensor],
               images: torch.Tensor | Iterable[torch.Tensor],
               bank: Sequence[tuple[str, str]] | str | Path | None = None,
               settings: RoleSettings | None = None, batch_size: int = 64) -> pa.Table:
    """The roles table of the last image layers' heads: one row per (layer, head), columns `ROLE_COLUMNS`.

    images: preprocessed images [M, 3, S, S], or an iterable of such batches (moved to the model's device);
    bank: (text, concept) pairs, a TSV/Parquet file of text and concept, or None for the packaged bank.
    `mask_role` is what `role_masks` uses (a non-core attribute head is isolated like a generalization head).
    """
    from dear.model import internals
    from dear.model.decompose import check_layers, head_statistics
    from dear.model.textspan import check_rank
    from dear.stages.profile import embed_texts, explain_heads

    settings = settings or RoleSettings()
    depth = internals.vision_tower(model).layers
    layers = settings.layers if settings.layers is not None else min(4, depth)
    _settings_errors(check_layers, model, layers)
    text_bank = _bank(bank, settings.concepts)
    texts = embed_texts(model, tokenizer, text_bank.texts, batch_size).cpu().numpy()  # [K, E]
    device = internals.text_positions(model).device
    batches = (batch.to(device) for batch in _batches(images, batch_size))
    stats = head_statistics(model, batches, layers, settings.contributions)
    n_images, dim = stats.count, texts.shape[1]
    rank = settings.svd_rank if settings.svd_rank is not None else min(80, n_images - 1, dim)
    picks = settings.texts_per_head if settings.texts_per_head is not None else min(20, rank, len(text_bank))
    _settings_errors(check_rank, rank, picks, n_images, dim, len(text_bank))
    cfg = _profile_config(settings, layers, rank, picks, sorted(set(text_bank.concepts)))
    results = explain_heads(stats.covariance.cpu().numpy(), texts, text_bank, cfg, first_layer=depth - layers + 1)
    rows = [{"layer": r.layer, "head": r.head, "entropy_bits": r.entropy, "role": r.role, "concept": r.concept,
             "concept_share": r.distribution[r.concept], "mask_role": r.mask_role, "n_images": n_images}
            for r in results]
    return pa.Table.from_pylist(rows, schema=_roles_schema())


def role_masks(model: nn.Module, roles: RolesLike, concepts: Sequence[str] = CORE_CONCEPTS,
               layers: Iterable[int] | None = None) -> dict[int, torch.Tensor]:
    """The additive role masks {1-based layer: [H, T, T]} of the token layers (SPEC §5), T = 1 + patches + K.

    Positions: [CLS, patches..., one attribute token per concept of `concepts` (K = len)]; 0 = may attend,
    -inf = blocked. layers: default DeAR's token layers (after the first two thirds; ViT-B/16: 9-12). Heads the
    roles table does not list are mixed. `attribute_tokens` builds them for DeAR's tokens; `encode_image` runs
    the image tower under them with tokens of your own.
    """
    from dear.methods.layers import two_thirds as default_start
    from dear.model import internals
    from dear.model.masks import layer_masks

    tower = internals.vision_tower(model)
    chosen = range(default_start(tower.layers), tower.layers + 1) if layers is None else sorted(set(layers))
    outside = [layer for layer in chosen if not 1 <= layer <= tower.layers]
    if outside:
        raise DearError(f"layers: {outside[0]} is outside this image tower's layers 1..{tower.layers} (1-based)")
    return layer_masks(_head_roles(model, roles), list(concepts), chosen, tower.heads,
                       internals.image_positions(model))


def encode_image(model: nn.Module, images: torch.Tensor, masks: dict[int, torch.Tensor] | None = None,
                 tokens: torch.Tensor | None = None) -> torch.Tensor:
    """Image features [B, 1+K, E] (CLS, then each token; projected, not normalized) under per-head masks.

    masks: {1-based layer: [H, T, T]} additive, as `role_masks` builds them; tokens: [K, D] or [B, K, D], your
    own tokens appended after the patches at the first masked layer (T = 1 + patches + K), after which they
    evolve through the blocks. Without masks or tokens it is `model.encode_image` ([B, 1, E]). Use it to put
    the role mask into your own token method; `attribute_tokens` is DeAR's.
    """
    from dear.methods import towers
    from dear.model import internals

    tower = internals.vision_tower(model)
    masks = dict(masks or {})
    first = min(masks, default=tower.layers + 1)
    if masks and not (1 <= first and max(masks) <= tower.layers):
        raise DearError(f"masks: layers {sorted(masks)} are outside this image tower's layers 1..{tower.layers}")
    if tokens is not None and not masks:
        raise DearError("tokens: give the masks of the layers they enter (role_masks), from the first of which "
                        "they are appended")
    x = internals.image_tokens(model, images)  # [B, 1+N, D]
    for block in tower.blocks[: min(first, tower.layers + 1) - 1]:
        x = internals.block_forward(block, x)
    if first > tower.layers:
        return internals.image_embedding(model, x[:, 0])[:, None]
    added = None if tokens is None else (lambda layer, previous: tokens if tokens.dim() == 3 else tokens[None])
    rows = towers.run_image(tower, x, first, added, range(first, first + 1) if added else None, append_at=first,
                            masks={layer: mask.to(x.device) for layer, mask in masks.items()})  # [B, 1+K, D]
    return internals.image_embedding(model, rows)  # ln_post and projection per row


class DeARModel(nn.Module):
    """A frozen CLIP plus one method's learnable parts (DeAR's tokens, or those of a `model.pt`).

    Train it with your own optimizer over `learnable_parameters()`; the CLIP's own weights stay frozen.
    Images are preprocessed pixels [B, 3, S, S]; class names are plain strings, written into the method's
    prompt (`template`). `forward` gives the prediction logits [B, C]; `loss` the method's training loss.
    """

    def __init__(self, method: nn.Module, classnames: Sequence[str] = (), novel: Literal["cls", "fused"] = "cls"):
        super().__init__()
        self.method = method
        self.classnames = list(classnames)  # the classes it was trained on (load_trained), else empty
        self.novel = novel  # unseen classes: the CLS stream alone (SPEC §6 default) or the fused logits
        self.refitted_alpha: torch.Tensor | None = None  # `dear fuse`'s alpha, which then replaces the method's

    @property
    def name(self) -> str:
        return self.method.name

    @property
    def stream_names(self) -> list[str]:
        """The streams of `stream_logits`: 'cls', then one per attribute token (DeAR) or 'rep' (MMRL)."""
        return self.method.stream_names()

    @property
    def alpha(self) -> torch.Tensor:
        """The fusion weights over the streams [S+1] (sum 1; alpha[0] is the CLS stream's)."""
        if self.refitted_alpha is not None:
            return self.refitted_alpha.to(self.method.device)
        return self.method.alpha

    @property
    def transform(self) -> Callable:
        """PIL image -> pixels [3, S, S] as `dear evaluate` reads test images (the backbone's size, normalization
        and the method's resize filter)."""
        from dear.scoring.evaluation import eval_transform

        return eval_transform(self.method)

    def learnable_parameters(self) -> list[nn.Parameter]:
        return [p for p in self.parameters() if p.requires_grad]

    def stream_logits(self, images: torch.Tensor, classnames: Sequence[str]) -> torch.Tensor:
        """[B, 3, S, S] -> each stream's logits [B, S+1, C] (stream 0: CLS)."""
        features = self.method.encode(self.method.image_prefix(images))  # [B, S+1, E]
        return self.method.logits(features, list(classnames))

    def forward(self, images: torch.Tensor, classnames: Sequence[str], seen: bool = True) -> torch.Tensor:
        """Prediction logits [B, C]; seen: the classes were trained on (else the method's rule for unseen ones)."""
        return self.method.output(self.stream_logits(images, classnames), self.alpha, seen, self.novel)

    def loss(self, images: torch.Tensor, labels: torch.Tensor, classnames: Sequence[str]) -> torch.Tensor:
        """The method's training loss on one batch (every term, the regularizers included)."""
        return self.terms(images, labels, classnames)["total"]

    def terms(self, images: torch.Tensor, labels: torch.Tensor, classnames: Sequence[str]) -> dict[str, torch.Tensor]:
        """The loss and each of its terms ('total', then the method's own: cls, attr, img, txt, ...)."""
        step = self.method.step(self.method.image_prefix(images), labels, list(classnames))
        return {"total": step.total, **step.terms}

    def learnable_state(self) -> dict[str, torch.Tensor]:
        """The learned tensors (what a `model.pt` holds of a method), on CPU."""
        return self.method.trainable_state()

    def load_learnable_state(self, state: dict[str, torch.Tensor]) -> None:
        self.method.load_trainable(state, "state")


def attribute_tokens(model: nn.Module, tokenizer: Callable[[list[str]], torch.Tensor], roles: RolesLike | None,
                     recipe: dict[str, Any] | None = None, dataset: str | None = None, seed: int = 0) -> DeARModel:
    """`model` with DeAR's attribute tokens behind the role mask of `roles` (roles None: the ablation, no mask).

    recipe: changes to DeAR's recipe (`dear recipe --method dear` lists the keys; e.g. {"attribute_tokens": 3,
    "start_layer": 2}); a key it lacks is an error. dataset: a built-in dataset whose recipe layer applies
    (MMRL's per-dataset values), or None. The CLIP is frozen in place; `seed` fixes the tokens' initial values.
    """
    from dear.methods import create
    from dear.methods.recipe import resolve

    name = "dear" if roles is not None else "dear_nomask"
    resolved = resolve({"dear": dict(recipe or {})}, name, dataset or "custom", "base_to_novel")
    heads = _head_roles(model, roles) if roles is not None else None
    method = create(name, SimpleNamespace(model=model, tokenizer=tokenizer), resolved, heads, seed)
    return DeARModel(method)


def fuse_logits(stream_logits: torch.Tensor, alpha: torch.Tensor) -> torch.Tensor:
    """The Task-Adaptive Fusion sum_k alpha_k s_k: [B, S+1, C] x [S+1] -> [B, C]."""
    if stream_logits.shape[-2] != alpha.shape[-1]:
        raise DearError(f"alpha: {alpha.shape[-1]} weights for {stream_logits.shape[-2]} streams")
    return torch.einsum("bkc,k->bc", stream_logits, alpha.to(stream_logits.dtype))


def load_trained(model_pt: str | Path, backbone: str | Path, roles: str | Path | None = None,
                 fusion: str | Path | None = None, novel: Literal["cls", "fused"] = "cls") -> DeARModel:
    """A `model.pt` of `dear train` (any method) on the backbone folder of `dear backbone`, in eval mode.

    roles: the roles.parquet it was trained with (method dear); fusion: the fusion.json of `dear fuse`, whose
    refitted alpha then replaces the trained one. `classnames` holds the classes it was trained on.
    """
    from dear.runtime.io import read_json
    from dear.methods import trained
    from dear.model.clip import load_backbone

    record = trained.read_trained(Path(model_pt))
    if roles is None and record.get("roles_sha256"):  # the pipeline's own message names its flag, --roles
        raise DearError(f"{model_pt}: method {record.get('method')} needs the roles table it was trained with; pass "
                        "it: load_trained(model_pt, backbone, roles='roles/<dataset>/roles.parquet')")
    method = trained.load_trained(Path(model_pt), load_backbone(backbone), None if roles is None else Path(roles))
    adapted = DeARModel(method, record.get("classnames", []), novel)
    if fusion is not None:
        alpha = read_json(Path(fusion)).get("alpha")
        if alpha is None or len(alpha) != len(method.alpha):
            raise DearError(f"{fusion}: no alpha of {len(method.alpha)} streams for {method.name}; pass the "
                            "fusion.json of this model's `dear fuse`")
        adapted.refitted_alpha = torch.tensor(alpha, dtype=torch.float32)
    return adapted


# --- helpers -----------------------------------------------------------------------

def _settings_errors(check, *args) -> None:
    """Run a pipeline check, naming the `RoleSettings` field instead of the params key."""
    try:
        check(*args)
    except DearError as err:
        raise DearError(str(err).replace("profile.", "RoleSettings.")) from None


PIXELS = ("head_roles takes preprocessed pixels [M, 3, S, S] or batches of them: "
          "torch.stack([preprocess(image) for image in images]), with the preprocess of load_clip")


def _batches(images: torch.Tensor | Iterable[torch.Tensor], batch_size: int) -> Iterable[torch.Tensor]:
    """Batches [B, 3, S, S] of `images`; anything else (PIL images, one image [3, S, S]) is a one-line error."""
    if isinstance(images, torch.Tensor):
        if images.dim() != 4:
            raise DearError(f"images: expected preprocessed pixels [M, 3, S, S], got shape {tuple(images.shape)}")
        return images.split(batch_size)
    if not isinstance(images, Iterable) or isinstance(images, (str, bytes, Path)):
        raise DearError(f"images: got {_kind(images)}; {PIXELS}")
    return _checked(images)


def _checked(batches: Iterable) -> Iterator[torch.Tensor]:
    """Each batch of an iterable, checked as it comes (a generator is read once)."""
    for batch in batches:
        if not isinstance(batch, torch.Tensor) or batch.dim() != 4:
            raise DearError(f"images: an item is {_kind(batch)}; {PIXELS}")
        yield batch


def _kind(value: Any) -> str:
    """'a PIL.Image.Image', 'a tensor of shape (3, 32, 32)': what was given instead of pixels."""
    if isinstance(value, torch.Tensor):
        return f"a tensor of shape {tuple(value.shape)}"
    kind = type(value)
    return f"a {kind.__qualname__}" if kind.__module__ == "builtins" else f"a {kind.__module__}.{kind.__qualname__}"


def _bank(bank, allowed: Sequence[str]):
    from dear.model.textbank import DEFAULT, TextBank, load_bank

    if bank is None or isinstance(bank, (str, Path)):
        return load_bank(DEFAULT if bank is None else str(bank), allowed)
    pairs = [(str(text), str(concept)) for text, concept in bank]
    if not pairs:
        raise DearError("bank: no (text, concept) pairs; give some, a bank file, or None for the packaged bank")
    data = "\n".join(f"{text}\t{concept}" for text, concept in pairs).encode()
    return TextBank(tuple(t for t, _ in pairs), tuple(c for _, c in pairs), hashlib.sha256(data).hexdigest(), "bank")


def _profile_config(settings: RoleSettings, layers: int, rank: int, picks: int, allowed: list[str]):
    """The pipeline's `Profile` section for these settings (the stage's functions read it)."""
    from dear.config.params import Profile

    return Profile.model_validate({
        "dataset": "api", "split": "train", "max_images": 2, "seed": 0, "batch_size": 1, "text_batch_size": 1,
        "layers": layers, "svd_rank": rank, "texts_per_head": picks, "text_bank": "api",
        "contributions": settings.contributions, "weighting": settings.weighting,
        "concepts": {"source": "bank", "allowed": allowed, "min_cluster_size": 2, "min_samples": 1},
        "roles": {"mode": settings.roles_mode, "low": settings.low, "high": settings.high},
        "ablation": {"enabled": False, "split": "val", "max_images": 2, "random_sets": 1}})


def _roles_schema() -> pa.Schema:
    from dear.stages.profile import ROLES_SCHEMA

    return pa.schema([ROLES_SCHEMA.field(name) for name in ROLE_COLUMNS])


def _head_roles(model: nn.Module, roles: RolesLike):
    """Rows of a roles table (any of `RolesLike`), checked against the model's image tower."""
    from dear.model import internals
    from dear.model.masks import roles_from_rows

    source = "roles"
    if isinstance(roles, (str, Path)):
        import pyarrow.parquet as pq

        source = str(roles)
        if not Path(roles).is_file():
            raise DearError(f"{roles}: roles table not found; give the roles.parquet of `dear profile`")
        rows = pq.read_table(roles).to_pylist()
    elif isinstance(roles, pa.Table):
        rows = roles.to_pylist()
    elif hasattr(roles, "to_dict"):
        rows = roles.to_dict("records")
    else:
        rows = list(roles)
    tower = internals.vision_tower(model)
    return roles_from_rows(rows, tower.layers, tower.heads, source)
