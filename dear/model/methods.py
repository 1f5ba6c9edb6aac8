"""The four methods compared side by side, as small configs of one adapted model.

They differ only in which learnable parts exist and which losses apply, so
one model class (`dear.model.dear.Adapted`) and one trainer serve all four:
- zeroshot: nothing learnable; the hand-written prompt.
- coop: `train.coop_context` context vectors before the class name (CoOp).
- dear_nomask: DeAR's attribute and text tokens, every head Mixed (the ablation).
- dear: DeAR with the Role-Based Attention Mask from `roles.parquet`.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from dear.errors import DearError
from dear.params import Dear, Train

METHODS = ("zeroshot", "coop", "dear_nomask", "dear")


@dataclass(frozen=True)
class Method:
    """Everything that shapes the adapted model; stored in model.pt to rebuild it."""

    name: str
    attribute_tokens: int  # K
    concepts: tuple[str, ...]  # concept of attribute token k
    text_tokens: int
    context_tokens: int  # CoOp's learnable context
    role_masks: bool  # masks from roles.parquet (else every head Mixed)
    regularized: bool  # the λ_img, λ_txt, λ_fus terms of SPEC §7 (else plain CE)
    start_layer: int | None  # 1-based; None = last four
    text_start_layer: int | None
    beta: float
    d_r: int
    init_std: float
    init_cls: float  # α_0 at init

    @property
    def trains(self) -> bool:
        return self.attribute_tokens + self.text_tokens + self.context_tokens > 0

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> "Method":
        data = dict(data)
        data["concepts"] = tuple(data["concepts"])
        return cls(**data)


def method(name: str, dear: Dear, train: Train, init_cls: float) -> Method:
    """The config of method `name` from the params sections."""
    if name not in METHODS:
        raise DearError(f"--method: unknown method {name!r}; choose one of {', '.join(METHODS)}")
    if dear.attribute_tokens > len(dear.concepts) or len(set(dear.concepts)) != len(dear.concepts):
        raise DearError(f"params: dear.attribute_tokens ({dear.attribute_tokens}) needs as many distinct "
                        f"dear.concepts (got {dear.concepts}); list one concept per token")
    is_dear = name in ("dear", "dear_nomask")
    K = dear.attribute_tokens if is_dear else 0
    return Method(
        name=name,
        attribute_tokens=K,
        concepts=tuple(dear.concepts[:K]),
        text_tokens=dear.text_tokens if is_dear else 0,
        context_tokens=train.coop_context if name == "coop" else 0,
        role_masks=name == "dear",
        regularized=is_dear,
        start_layer=dear.start_layer,
        text_start_layer=dear.text_start_layer,
        beta=dear.beta,
        d_r=dear.d_r,
        init_std=dear.init_std,
        init_cls=init_cls,
    )
