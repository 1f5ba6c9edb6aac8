"""The five methods compared side by side, as small configs of one adapted model.

They differ only in which learnable parts exist, how the token outputs become
features, which objective trains them and whether `fuse` may refit their
fusion weights, so one model class (`dear.model.dear.Adapted`) and one
trainer serve all five:
- zeroshot: nothing learnable; the hand-written prompt.
- coop: learnable context before the class name (CoOp), initialized from the
  dataset prompt's words ("a photo of a" -> 4 vectors, the base-to-novel CoOp)
  or random (`train.coop.init: random`, CoOp's few-shot setting); plain CE.
- mmrl: MMRL as its code builds it: `mmrl.tokens` representation tokens from
  layer `mmrl.start_layer` in both towers, replaced at every layer, their
  outputs mean-pooled into one feature with its own randomly initialized
  projection; fixed 0.7 / 0.3 fusion of CLS and representation logits.
- dear_nomask: DeAR's K attribute tokens (one stream each, P_attr from the
  frozen projection, the beta composition), every head Mixed (the ablation).
- dear: DeAR with the Role-Based Attention Mask from `roles.parquet`.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from dear.errors import DearError
from dear.params import Params

METHODS = ("zeroshot", "coop", "mmrl", "dear_nomask", "dear")


@dataclass(frozen=True)
class Method:
    """Everything that shapes the adapted model; stored in model.pt to rebuild it."""

    name: str
    attribute_tokens: int  # K image tokens (DeAR: one per concept; MMRL: its representation tokens)
    concepts: tuple[str, ...]  # concept of attribute token k (DeAR); () for MMRL
    pooling: str  # streams: one feature per token (DeAR) | mean: one mean-pooled feature (MMRL)
    text_tokens: int
    context: str  # CoOp's context: "" (none) | prompt (the prompt's words before {}) | random
    context_tokens: int  # random context vectors (context == random)
    role_masks: bool  # masks from roles.parquet (else every head Mixed)
    objective: str  # ce (CoOp) | mmrl (MMRL's) | fused (ours)
    start_layer: int | None  # 1-based first image layer with tokens; None = the method's default
    text_start_layer: int | None
    beta: float  # share of the freshly aligned tokens (MMRL: 1, tokens replaced at every layer)
    d_r: int
    init_std: float
    init_cls: float  # alpha_0 at init (MMRL: its fixed SCALE)
    projection_init: str  # proj: P_attr starts as the frozen projection (SPEC §6) | random: MMRL's proj_rep
    refit_fusion: bool  # `fuse` may refit alpha (DeAR's task-adaptive fusion); MMRL keeps 0.7 / 0.3

    @property
    def trains(self) -> bool:
        return self.attribute_tokens + self.text_tokens > 0 or bool(self.context)

    @property
    def streams(self) -> int:
        """Attribute streams after pooling: K (DeAR), 1 (MMRL's mean-pooled feature) or 0."""
        if not self.attribute_tokens:
            return 0
        return 1 if self.pooling == "mean" else self.attribute_tokens

    def stream_names(self) -> list[str]:
        """Name of each logit stream, CLS first: cls, then the concepts (DeAR) or rep (MMRL)."""
        if self.pooling == "mean":
            return ["cls"] + (["rep"] if self.attribute_tokens else [])
        return ["cls", *self.concepts]

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> "Method":
        data = dict(data)
        data["concepts"] = tuple(data["concepts"])
        return cls(**data)


def method(name: str, params: Params) -> Method:
    """The config of method `name` from the params file."""
    if name not in METHODS:
        raise DearError(f"--method: unknown method {name!r}; choose one of {', '.join(METHODS)}")
    dear, train = params.dear, params.train
    if dear.attribute_tokens > len(dear.concepts) or len(set(dear.concepts)) != len(dear.concepts):
        raise DearError(f"params: dear.attribute_tokens ({dear.attribute_tokens}) needs as many distinct "
                        f"dear.concepts (got {dear.concepts}); list one concept per token")
    none = dict(attribute_tokens=0, concepts=(), pooling="streams", text_tokens=0, context="", context_tokens=0,
                role_masks=False, objective="ce", start_layer=None, text_start_layer=None, beta=1.0,
                d_r=dear.d_r, init_std=dear.init_std, init_cls=params.fusion.init_cls, projection_init="proj",
                refit_fusion=False)
    if name == "zeroshot":
        return Method(name=name, **none)
    if name == "coop":
        random = train.coop.init == "random"
        return Method(name=name, **{**none, "context": train.coop.init,
                                    "context_tokens": train.coop.random_context if random else 0})
    if name == "mmrl":
        m = params.mmrl
        return Method(name=name, **{**none, "attribute_tokens": m.tokens, "pooling": "mean", "text_tokens": m.tokens,
                                    "objective": "mmrl", "start_layer": m.start_layer,
                                    "text_start_layer": m.start_layer, "d_r": m.d_r, "init_cls": train.scale,
                                    "projection_init": "random"})
    K = dear.attribute_tokens
    return Method(name=name, **{**none, "attribute_tokens": K, "concepts": tuple(dear.concepts[:K]),
                                "text_tokens": dear.text_tokens, "role_masks": name == "dear",
                                "objective": train.objective, "start_layer": dear.start_layer,
                                "text_start_layer": dear.text_start_layer, "beta": dear.beta,
                                "refit_fusion": True})


def default_start(method: Method, layers: int) -> int:
    """First token layer (1-based) when the params leave it null.

    DeAR: the layers after the first two thirds, rounded down (ViT-B/16:
    layers 9-12, the profiled ones; a 4-layer tower: 3-4, so two layers stay
    untouched below); MMRL: the upper half (ViT-B/16: its REP_LAYERS 6-12; a
    3-layer text tower: layers 2-3).
    """
    if method.pooling == "mean":
        return max(1, (layers + 1) // 2)
    return 2 * layers // 3 + 1
