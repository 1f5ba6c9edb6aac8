"""Blocks of docs/world.md written from the code and files that define the embedded world and its CLIP."""

from __future__ import annotations

import json
from pathlib import Path

from dear.docs.format import table
from dear.config.params import load_params


def world_templates(root: Path) -> str:
    """The prompt of every embedded dataset: the corpus's own caption form (dear.data.world.TEMPLATES)."""
    from dear.data.world import TEMPLATES

    rows = [[f"`{name}`", " · ".join(f"`{t}`" for t in templates)] for name, templates in TEMPLATES.items()]
    return table(["dataset", "prompt"], rows)


def backbone_arch(root: Path) -> str:
    """The embedded architecture params.yaml trains (model.arch, from its config in dear/resources/)."""
    arch = load_params(root / "params.yaml").model.arch
    path = root / "dear" / "resources" / f"{arch}.json"
    if not path.is_file():
        return f"`model.arch` is `{arch}`, not an embedded architecture of `dear/resources/`."
    config = json.loads(path.read_text())
    vision, text = config["vision_cfg"], config["text_cfg"]
    heads = vision["width"] // vision["head_width"]
    return (f"`model.arch: {arch}` (`{path.relative_to(root).as_posix()}`, registered with "
            f"`open_clip.add_model_config`): an open_clip CLIP with a {vision['image_size']} px image tower of "
            f"patch {vision['patch_size']}, width {vision['width']}, {vision['layers']} layers of {heads} heads "
            f"(MLP ratio {vision.get('mlp_ratio', 4.0):g}); a text tower of width {text['width']}, "
            f"{text['layers']} layers of {text['heads']} heads, context {text['context_length']}; embedding "
            f"{config['embed_dim']}; open_clip's standard tokenizer.")

