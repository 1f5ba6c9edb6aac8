"""The methods compared side by side: one module per method, found by name.

The registry below is the only list of methods. Each entry names the module
that builds the method's model (imported only when a model is built: it
needs torch) and the recipe it trains with, plain data in
`dear/methods/recipes/<recipe>.yaml` that `dear recipe`, `dear check`, the
params validation and the engines read without importing torch.

Adding a method: its module (a `MethodModel` subclass, `dear/methods/base.py`),
one line here, and its recipe file.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass

from dear.errors import DearError


@dataclass(frozen=True)
class Entry:
    module: str  # dear.methods.<module>, holding `Model`
    recipe: str  # dear/methods/recipes/<recipe>.yaml
    title: str  # one line for tables and --help
    scores: str = ""  # "" any class list (a prompt names any class); else why it scores only some (shown for "—")


FITTED_CLASSES = ("a linear probe has a classifier only for the classes of its training shots: no novel classes, "
                  "no other dataset's")


REGISTRY: dict[str, Entry] = {
    "zeroshot": Entry("zeroshot", "zeroshot", "zero-shot CLIP with the hand-written prompt"),
    "linear_probe": Entry("linear_probe", "linear_probe", "linear-probe CLIP: a logistic regression on the frozen "
                          "image features (lpclip)", scores=FITTED_CLASSES),
    "coop": Entry("coop", "coop", "CoOp: learned context before the class name"),
    "cocoop": Entry("cocoop", "cocoop", "CoCoOp: CoOp's context shifted per image by a meta-network"),
    "kgcoop": Entry("kgcoop", "kgcoop", "KgCoOp: CoOp's context kept near the hand-written prompt's features"),
    "maple": Entry("maple", "maple", "MaPLe: deep prompts in both towers, the image's coupled to the text's"),
    "promptsrc": Entry("promptsrc", "promptsrc", "PromptSRC: deep prompts in both towers, self-regularized, averaged"),
    "mmrl": Entry("mmrl", "mmrl", "MMRL: representation tokens in both towers"),
    "mmrlpp": Entry("mmrlpp", "mmrlpp", "MMRL++: MMRL's tokens through shared-residual aligners, composed layer to layer"),
    "tac": Entry("tac", "tac", "TAC: PromptSRC-style deep prompts led by task-cluster tokens of the class features"),
    "dear_nomask": Entry("dear", "dear", "DeAR without its role mask (the ablation)"),
    "dear": Entry("dear", "dear", "DeAR: attribute tokens behind a per-head role mask"),
}


def names() -> list[str]:
    """Every registered method, in the order of the papers' tables."""
    return list(REGISTRY)


def entry(name: str) -> Entry:
    if name not in REGISTRY:
        raise DearError(f"unknown method {name!r}; choose one of {', '.join(REGISTRY)}")
    return REGISTRY[name]


def model_class(name: str):
    """The `MethodModel` subclass of method `name` (imports its module, and torch)."""
    module = importlib.import_module(f"dear.methods.{entry(name).module}")
    return module.MODELS[name]


def create(name: str, backbone, recipe, roles=None, seed: int = 0):
    """The model of method `name` on `backbone` (its frozen CLIP and tokenizer), built from its resolved recipe."""
    return model_class(name)(name, backbone.model, backbone.tokenizer, recipe, roles, seed)
