"""Building method models on a tiny CLIP for tests: a recipe from the project's params, changed per test."""

from __future__ import annotations

import open_clip
import yaml

from dear.methods import create
from dear.methods.recipe import load, resolve
from dear.model.masks import HeadRole
from tests import fake_run

TEMPLATE = "a photo of a {}."
CLASSES = ["dog", "red car", "tree"]
CONCEPTS = ["color", "shape", "texture", "object", "position"]


def norm(x):
    return x / x.norm(dim=-1, keepdim=True)


def tokenize(texts):
    return open_clip.tokenize(texts, context_length=16)


class Backbone:
    """What `create` needs of a backbone: the frozen CLIP and its tokenizer (and a card for load_trained)."""

    def __init__(self, model, sha: str = "abc"):
        self.model, self.tokenizer, self.card = model, tokenize, {"sha256": sha}


def demo_recipes() -> dict:
    return yaml.safe_load((fake_run.ROOT / "params.yaml").read_text())["train"]["recipes"]


def recipe(name: str, dataset: str = "world_objects", protocol: str = "base_to_novel", demo: bool = True, **changes):
    """The recipe of `name` (the demo's, or its authors' with demo=False) with a small token bank, prompts as deep as
    a tiny CLIP's text tower, and `changes`."""
    from dear.methods import entry

    recipes = demo_recipes() if demo else {}
    key = entry(name).recipe
    recipes.setdefault("all", {})["rep_dim"] = 16
    depths = ("prompt_depth", "vision_depth", "text_depth")  # MaPLe's, PromptSRC's: a tiny CLIP's towers hold 2 layers
    tiny = {depth: 2 for depth in depths if depth in load(key).keys}
    recipes[key] = {**(recipes.get(key) or {}), **tiny, **changes}
    return resolve(recipes, name, dataset, protocol)


def build(clip, name: str = "dear", roles=None, seed: int = 0, demo: bool = True, **changes):
    return create(name, Backbone(clip), recipe(name, demo=demo, **changes), roles, seed)


def layer_roles(kinds, layers=(1, 2, 3)):
    """kinds[h] = (mask_role, concept) for head h of every listed layer."""
    return [HeadRole(layer, h, kind, concept) for layer in layers for h, (kind, concept) in enumerate(kinds)]


MIXED_ROLES = layer_roles([("attribute", "color"), ("attribute", "object"), ("generalization", "other"), ("mixed", None)])
