"""The public method contract: every name a method's module may use, in one place, with its version.

A method, built in or from an installed package (docs/your-method.md), is a
`MethodModel` subclass plus a recipe file. Its module imports what it needs
from here and nothing else of `dear`, so a release of `dear` that keeps
`VERSION` keeps every method written against it working. What each name is:

- `MethodModel`, `Step`: the base class and its hooks (`build`,
  `compute_text_features`, `encode`, `frozen_depth`, `step`, `output`,
  `stream_names`, `alpha`, `can_score`, `zero_effect`, `on_epoch_end`, `for_dataset` with
  `forget_text`, `extra_state`, `load_extra_state`, `half_parameters`; `fit`
  with `fits_features`; `init_passes` with `init_from_passes`;
  `search_validation` with `searches_validation`), and a training step's
  loss. `cross_entropy`, `check_layer`: the loss every method's CE is, and
  the one-line error for a layer outside the tower.
- `towers`: running the text and image towers with prompts or tokens
  inserted (`text_input`, `with_positions`, `prompt_embeddings`, `run_text`
  with an optional `compose`, `run_image`, `encode_texts`,
  `template_features`); `prompts`: the prompt forms (`hand_written`,
  `context`, `with_clusters`, `classname`); `internals`: the open_clip
  internals (blocks, embeddings, projections, logit scale, `LowRankQKV` and
  `low_rank_qkv`: LoRA on the attention projections), the one module that
  touches them.
- `representation`: the representation-token block (`RepresentationTokens`:
  MMRL's model, with hooks for its aligners, its projection and the
  composition of a layer's tokens with the previous layer's; `copies`,
  `one_minus_cos`); `averaging`: a weighted sum of the learnable tensors over
  epochs (`EpochAverage`, `gaussian_weights`: PromptSRC's GPA, TAC's mean).
- `roles`: DeAR's head roles for a method run as `<name>+roles` (its
  declaration says `roles=True`; `build(roles)` then receives the roles
  table's heads, a list of `HeadRole`, and None for the plain method):
  `token_masks` builds the per-head masks of the image layers holding the
  method's tokens (pass them as `towers.run_image(..., masks=)`),
  `adapted_heads` says which heads' weights may change, both by the rule of
  the recipe's roles keys (`role_concepts`, `mixed_heads`: recipes/roles.yaml,
  layered after the method's own recipe). docs/your-method.md#head-roles.
- `Recipe`, `Key`, `PROTOCOLS`, `KINDS`: a resolved recipe (what `build`
  and `step` read: `self.recipe.lr`, `self.recipe.get("template")`) and the
  recipe file's schema (a key's type vocabulary, the protocols, the kinds of
  a value's source).
- `Method`: what a plugin's entry point declares (model class, recipe file,
  title, which classes it scores, the `VERSION` it was written for).
- `DearError`: the one-line error a method raises on bad input.

Torch-heavy names load on first use (PEP 562), so a plugin's entry point
(`Method`) is read by `dear recipe` and `dear check` without loading torch.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from dear.errors import DearError
from dear.methods.plugins import CONTRACT_VERSION, Method
from dear.methods.recipe import KINDS, PROTOCOLS, Key, Recipe

VERSION = CONTRACT_VERSION  # the contract's version: a plugin states the one it was written for (Method.contract)

if TYPE_CHECKING:  # for readers and type checkers; loaded lazily below
    from dear.methods import prompts, representation, towers
    from dear.methods.base import MethodModel, Step, check_layer, cross_entropy
    from dear.model import head_roles as roles
    from dear.model import internals
    from dear.model.masks import HeadRole
    from dear.methods import averaging

__all__ = ["VERSION", "Method", "MethodModel", "Step", "cross_entropy", "check_layer", "towers", "prompts",
           "internals", "representation", "averaging", "roles", "HeadRole", "Recipe", "Key", "PROTOCOLS", "KINDS",
           "DearError"]


def __getattr__(name: str) -> Any:
    """The torch-heavy names, imported when first asked for. Each module is named by a constant: the job code
    fingerprints (dear.pipeline.codegraph) follow a plugin's `from dear.contract import towers` to the module it runs."""
    if name in ("MethodModel", "Step", "cross_entropy", "check_layer"):
        return getattr(importlib.import_module("dear.methods.base"), name)
    if name == "HeadRole":
        return importlib.import_module("dear.model.masks").HeadRole
    modules = {"towers": lambda: importlib.import_module("dear.methods.towers"),
               "prompts": lambda: importlib.import_module("dear.methods.prompts"),
               "internals": lambda: importlib.import_module("dear.model.internals"),
               "representation": lambda: importlib.import_module("dear.methods.representation"),
               "averaging": lambda: importlib.import_module("dear.methods.averaging"),
               "roles": lambda: importlib.import_module("dear.model.head_roles")}
    if name in modules:
        return modules[name]()
    raise AttributeError(f"module 'dear.contract' has no attribute {name!r}")
