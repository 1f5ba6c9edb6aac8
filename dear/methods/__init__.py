"""The methods compared side by side: one module per method, found by name.

The registry below is the list of built-in methods. Each entry names the
module that builds the method's model (imported only when a model is built:
it needs torch) and the recipe it trains with, plain data in
`dear/methods/recipes/<recipe>.yaml` that `dear recipe`, `dear check`, the
params validation and the engines read without importing torch.

Adding a built-in method: its module (a `MethodModel` subclass,
`dear/methods/base.py`), one line here, and its recipe file. A `+roles`
entry is a method run with DeAR's head roles (`dear.methods.roles`, a module
per variant): the
plain method's recipe, then `recipes/roles.yaml`, and the roles table of
`dear profile`; an installed method has one when its declaration says
`roles=True` (docs/your-method.md#head-roles). A method of
one's own needs no edit of `dear`: an installed package declares it under the
`dear.methods` entry-point group (`dear.methods.plugins`,
docs/your-method.md), and `entry` finds it by name like a built-in one.
"""

from __future__ import annotations

import dataclasses
import importlib
from dataclasses import dataclass

from dear.errors import DearError
from dear.methods import plugins


@dataclass(frozen=True)
class Entry:
    module: str  # dear.methods.<module>, holding `MODELS` (a plugin's: its model's module)
    recipe: str  # dear/methods/recipes/<recipe>.yaml (a plugin's: its method's name, file in its package)
    title: str  # one line for tables and --help
    scores: str = ""  # "" any class list (a prompt names any class); else why it scores only some (shown for "—")
    plugin: plugins.Plugin | None = None  # the installed package that declares it; None: built into dear
    protocols: tuple[str, ...] = plugins.PROTOCOLS  # those it runs in (what dear.testing exercises)
    reads_roles: bool = False  # trains with the roles table of `dear profile` (dear; every `+roles` variant)
    plain: str = ""  # a `+roles` variant: the plain method it runs with DeAR's head roles (else "")

    @property
    def module_name(self) -> str:
        """The module that holds the method's model class."""
        return self.plugin.module if self.plugin else f"dear.methods.{self.module}"


FITTED_CLASSES = ("a linear probe has a classifier only for the classes of its training shots: no novel classes, "
                  "no other dataset's")


ROLES = "+roles"  # the suffix of a method run with DeAR's head roles (dear.methods.roles)
ROLES_RECIPE = "roles"  # recipes/roles.yaml: the roles' keys, layered after the plain method's recipe
FEW_SHOT_ONLY = ("few_shot",)  # the protocol their authors' code runs (the studies may run them in others too)

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
    "dear": Entry("dear", "dear", "DeAR: attribute tokens behind a per-head role mask", reads_roles=True),
    "tip_adapter_f": Entry("tip_adapter_f", "tip_adapter_f", "Tip-Adapter-F: a cache of the shots' features beside "
                           "CLIP's classifier, its keys fine-tuned", protocols=FEW_SHOT_ONLY),
    "clip_lora": Entry("clip_lora", "clip_lora", "CLIP-LoRA: low-rank updates of q, k, v in both towers",
                       protocols=FEW_SHOT_ONLY),
    # the baselines with DeAR's head roles: the Generalization heads never read what the method learns
    "maple+roles": Entry("maple_roles", "maple", "MaPLe + head roles: its image prompts behind DeAR's role mask",
                         reads_roles=True, plain="maple"),
    "promptsrc+roles": Entry("promptsrc_roles", "promptsrc", "PromptSRC + head roles: its image prompts behind DeAR's "
                             "role mask", reads_roles=True, plain="promptsrc"),
    "mmrl+roles": Entry("mmrl_roles", "mmrl", "MMRL + head roles: its image tokens behind DeAR's role mask",
                        reads_roles=True, plain="mmrl"),
    "clip_lora+roles": Entry("clip_lora_roles", "clip_lora", "CLIP-LoRA + head roles: no update of a Generalization "
                             "head's q, k, v", protocols=FEW_SHOT_ONLY, reads_roles=True, plain="clip_lora"),
}
# names a plugin may not take: the built-in methods' and the recipe files' (a plugin's recipe is named after it)
RESERVED = frozenset({*REGISTRY, "dassl", ROLES_RECIPE, *(e.recipe for e in REGISTRY.values())})


def names() -> list[str]:
    """Every built-in method, in the order of the papers' tables."""
    return list(REGISTRY)


def available() -> list[str]:
    """The built-in methods, then every method an installed package declares that can be used (by name)."""
    usable = [found for found in plugins.discovered() if isinstance(found, plugins.Plugin)
              and found.name not in RESERVED and found.method.contract == plugins.CONTRACT_VERSION]
    return [*REGISTRY, *(name for found in usable for name in (found.name, *([found.name + ROLES]
                                                                            if found.method.roles else [])))]


def entry(name: str) -> Entry:
    """The registry's entry of `name`, or the entry of the installed plugin that declares it."""
    if name in REGISTRY:
        return REGISTRY[name]
    if name.endswith(ROLES):
        return _with_roles(name.removesuffix(ROLES))
    found = next((item for item in plugins.discovered() if item.name == name), None)
    if found is None:
        raise DearError(f"unknown method {name!r}; choose one of {', '.join(available())}, or install a package "
                        "that declares it (docs/your-method.md)")
    if isinstance(found, plugins.Broken):
        raise DearError(found.problem)
    if name in RESERVED:
        raise DearError(plugins.shadows(found, name))
    if found.method.contract != plugins.CONTRACT_VERSION:
        raise DearError(plugins.wrong_contract(found))
    method = found.method
    return Entry(found.module, found.name, method.title, method.scores, plugin=found, protocols=method.protocols)


def _with_roles(plain: str) -> Entry:
    """The `+roles` variant of an installed method whose declaration says `roles=True`."""
    found = entry(plain)
    if found.plugin is None or not found.plugin.method.roles:
        having = [name for name in REGISTRY if name.endswith(ROLES)]
        raise DearError(f"unknown method {plain + ROLES!r}: {plain} has no variant with DeAR's head roles; those that "
                        f"do: {', '.join(having)}, and installed methods declared with roles=True "
                        "(docs/your-method.md#head-roles)")
    return dataclasses.replace(found, title=f"{found.title}, with DeAR's head roles", reads_roles=True, plain=plain)


def model_class(name: str):
    """The `MethodModel` subclass of method `name` (imports its module, and torch)."""
    found = entry(name)
    module = importlib.import_module(found.module_name)
    return getattr(module, found.plugin.class_name) if found.plugin else module.MODELS[name]


def create(name: str, backbone, recipe, roles=None, seed: int = 0):
    """The model of method `name` on `backbone` (its frozen CLIP and tokenizer), built from its resolved recipe."""
    return model_class(name)(name, backbone.model, backbone.tokenizer, recipe, roles, seed)
