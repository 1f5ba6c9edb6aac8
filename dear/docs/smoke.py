"""configs/smoke.yaml: the demo's study at test size, written from params.yaml so that it cannot drift from it.

The smoke study runs every stage of every protocol of the demo, and few-shot
learning (one dataset, two shot counts), with the demo's methods
(`study.methods`) and linear_probe (EXTRA_METHODS), and the demo's recipes, on the tiny world and
backbone of the tests (`dear.data.world.tiny_params`): one seed, two shots,
three datasets (one base-to-novel set that is also the transfer source, one
cross-dataset target, one domain-shift target). Its report says at the top
that its numbers mean nothing (`dear.stages.report.notes`). Everything but
`SMOKE` and the tiny sections is the demo's value, so `python -m dear.docs`
rewrites the file after params.yaml changes and a test fails while it is stale.
"""

from __future__ import annotations

import copy
from pathlib import Path

import yaml

from dear.data.world import tiny_params

PATH = "configs/smoke.yaml"
SMOKE = {  # dotted key: the smoke study's value (the tiny world has 8 objects of 4 training images each)
    "output_root": "smoke",
    "data.root": "smoke/world",
    "data.datasets": ["world_objects", "world_objects_b", "world_objects_sketch"],
    "data.seeds": [1],
    "data.shots": 2,
    "data.val_shots": 1,
    "data.workers": 1,  # 168 images: a pool of checkers costs more than it saves
    "world.attribute_sets": [],
    "backbone.steps": 100,
    "study.base_to_novel": ["world_objects"],
    "study.transfer": {"source": "world_objects", "cross_dataset": ["world_objects_b"],
                       "domain_generalization": ["world_objects_sketch"]},
    "study.few_shot": {"datasets": ["world_objects"], "shots": [1, 2]},  # the fourth protocol: one set, two K
    "profile.dataset": "world_objects",
    "profile.max_images": 32,
    "profile.batch_size": 32,
    "profile.layers": 2,
    "profile.svd_rank": 8,
    "profile.texts_per_head": 5,
    "compute.workers": 0,
    "evaluate.batch_size": 64,
    "train.recipes.maple.prompt_depth": 2,  # dear-world-tiny: 2 layers in each tower
    "train.recipes.promptsrc.vision_depth": 2,
    "train.recipes.promptsrc.text_depth": 2,
}
EXTRA_METHODS = ("linear_probe",)  # run by the smoke and few-shot studies, not by the demo (its results stay as they are)


def with_extra_methods(raw: dict) -> dict:
    """`raw` with EXTRA_METHODS in study.methods and report.methods (where given), after zeroshot (in place;
    returned)."""
    for section in ("study", "report"):
        methods = raw[section].get("methods")
        for name in EXTRA_METHODS if methods is not None else ():
            if name not in methods:
                methods.insert(methods.index("zeroshot") + 1 if "zeroshot" in methods else 0, name)
    return raw


# The one measurement of the smoke study's time: every page that quotes it (README.md, docs/configs.md) and this
# config's header are written from it (`smoke_time`), so they cannot disagree. Remeasure after the study changes
# (`time make smoke` on a clean clone) and change it here only.
MEASURED = {"date": "2026-12-05", "command": "make smoke", "commit": "7e73dfb", "cores": 2, "jobs": 137,
            "seconds": 275}


def smoke_time(root: Path | None = None) -> str:
    """'Measured 2026-12-05 (`make smoke` at 7e73dfb, 2 cores): 137 jobs in 4 min 35 s.' (a generated block)."""
    minutes, seconds = divmod(MEASURED["seconds"], 60)
    return (f"Measured {MEASURED['date']} (`{MEASURED['command']}` at {MEASURED['commit']}, {MEASURED['cores']} "
            f"cores): {MEASURED['jobs']} jobs in {minutes} min {seconds} s.")


HEADER = f"""\
# The smoke study: every stage of every protocol of the demo, on the tiny world and backbone
# of the tests (`make smoke`). ITS NUMBERS MEAN NOTHING:
# it shows that an install works, end to end, through the same engines as the demo; its
# report says so on top. Outputs go under smoke/ (git-ignored).
# {smoke_time()}
#   snakemake --cores 2 --configfile configs/smoke.yaml        (what `make smoke` runs)
#   python workflow/scripts/dvc_study.py configs/smoke.yaml && dvc repro smoke/dvc.yaml
# Written by `python -m dear.docs` from params.yaml (the demo) and dear/docs/smoke.py: edit those,
# not this file; every value not changed there is the demo's, the methods included (and linear_probe).
"""


def smoke_params(demo: dict) -> dict:
    """The smoke study's params: the demo's (`demo`, params.yaml as read) with the tiny sections and SMOKE."""
    raw = copy.deepcopy(demo)
    raw.update(copy.deepcopy(tiny_params()))
    return with_extra_methods(_changed(raw, SMOKE))


def _changed(raw: dict, changes: dict) -> dict:
    """`raw` with each dotted key of `changes` set (in place; returned)."""
    for key, value in changes.items():
        *parents, leaf = key.split(".")
        node = raw
        for part in parents:
            node = node[part]
        node[leaf] = copy.deepcopy(value)
    return raw


def smoke_text(root: Path) -> str:
    """configs/smoke.yaml as `python -m dear.docs` writes it."""
    demo = yaml.safe_load((root / "params.yaml").read_text())
    return HEADER + yaml.safe_dump(smoke_params(demo), sort_keys=False, width=120)


# --- configs/demo-fewshot.yaml: the demo's few-shot figure (`make demo-fewshot`) ----------------------

DEMO_FEWSHOT_PATH = "configs/demo-fewshot.yaml"
DEMO_FEWSHOT = {  # dotted key: its value; every other key is the demo's (world, backbone, methods, recipes)
    "output_root": "demo-fewshot",
    "data.root": "demo-fewshot/world",
    "data.datasets": ["world_objects", "world_objects_sketch"],  # world_objects: profile.dataset (DeAR's roles)
    "data.seeds": [1],
    "study.base_to_novel": [],
    "study.transfer": None,
    "study.few_shot": {"datasets": ["world_objects_sketch"], "shots": [1, 4, 16]},
}
DEMO_FEWSHOT_HEADER = """\
# The demo's few-shot figure: every method of the demo and linear_probe, trained on 1, 4 and 16 shots of every class of
# world_objects_sketch, one seed, scored on its test split (`make demo-fewshot`; outputs in demo-fewshot/).
# The world and the backbone are the demo's values (the same world, the same pretraining), the base-to-novel
# and transfer protocols are off. Written by `python -m dear.docs` from params.yaml and dear/docs/smoke.py
# (DEMO_FEWSHOT): edit those, not this file.
#   snakemake --cores 2 --scheduler greedy --configfile configs/demo-fewshot.yaml    (what make demo-fewshot runs)
#   python workflow/scripts/dvc_study.py configs/demo-fewshot.yaml && dvc repro demo-fewshot/dvc.yaml
"""


def demo_fewshot_text(root: Path) -> str:
    """configs/demo-fewshot.yaml as `python -m dear.docs` writes it."""
    demo = yaml.safe_load((root / "params.yaml").read_text())
    raw = with_extra_methods(_changed(copy.deepcopy(demo), DEMO_FEWSHOT))
    return DEMO_FEWSHOT_HEADER + yaml.safe_dump(raw, sort_keys=False, width=120)


GENERATED = {PATH: smoke_text, DEMO_FEWSHOT_PATH: demo_fewshot_text}  # the configs `python -m dear.docs` writes
