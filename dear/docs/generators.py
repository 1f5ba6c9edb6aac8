"""Which generator writes which block: the first word of a block's spec names it, the rest are its arguments."""

from __future__ import annotations

from pathlib import Path

from dear.docs import architecture, configs, datasets, demo, smoke, world
from dear.errors import DearError

GENERATORS = {
    "params": configs.params_table,            # params SECTION: every key, its value per config file
    "config-diff": configs.config_diff,        # config-diff FILE: keys where FILE differs from params.yaml
    "recipe": configs.recipe_table,            # recipe METHOD: every value of its recipe, its source, the demo's
    "study": configs.study,                    # study [FILE]: what the pipeline runs, one sentence
    "fewshot-recipes": configs.few_shot_recipes,  # every method's few-shot values per shot count, their sources
    "world-datasets": configs.world_datasets,  # the embedded datasets params.yaml draws
    "slurm-resources": configs.slurm_resources,  # what the slurm profile asks for per rule
    "coop-datasets": datasets.coop_datasets,   # every dataset `dear prepare` reads (dear.data.coop.SPECS)
    "text-bank": datasets.text_bank,           # the packaged text bank's size per concept
    "profiles": configs.profiles,
    "world-templates": world.world_templates,  # the embedded datasets' prompts (dear.data.world.TEMPLATES)
    "backbone-arch": world.backbone_arch,      # the embedded architecture params.yaml trains
    "demo-results": demo.demo_results,         # the snapshot's result table (README)
    "demo-card": demo.demo_card,               # the snapshot's backbone sanity numbers
    "demo-picture": demo.demo_picture,         # the README's picture and which run it shows
    "roles-change": demo.roles_change,         # roles-change [FOLDER]: a demo-roles snapshot's "what the roles change"
    "layers": architecture.layers_table,       # the package's layers and what each imports (docs/architecture.md)
    "smoke-time": smoke.smoke_time,            # the one measurement of `make smoke` (dear/docs/smoke.py MEASURED)
}


def generate(root: Path, spec: str) -> str:
    """The body of the block `spec` (e.g. 'params train'), from the files under `root`."""
    name, *args = spec.split()
    if name not in GENERATORS:
        raise DearError(f"docs: no generator {name!r} (block '{spec}'); one of {', '.join(GENERATORS)}")
    return GENERATORS[name](root, *args)
