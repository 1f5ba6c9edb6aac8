"""configs/smoke.yaml: the demo's study at test size, written from params.yaml so that it cannot drift from it.

The smoke study runs every stage of every protocol of the demo, and few-shot
learning (one dataset, two shot counts), with the demo's methods
(`study.methods`), linear_probe, Tip-Adapter-F and CLIP-LoRA (EXTRA_METHODS), MMRL++ and TAC
(METHODS_2026), the `+roles` variants beside their plain methods (ROLE_VARIANTS), and the demo's
recipes, on the tiny world and backbone of the tests (`dear.data.world.tiny_params`): one seed, two shots,
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
    "train.recipes.clip_lora.iterations_per_shot": 10,  # 20 steps at the smoke's 2 shots: it only has to run
    "train.recipes.tac.vision_depth": 2,
    "train.recipes.tac.text_depth": 2,
    "train.recipes.tac.transfer.n_ctx": 5,  # its 10 and 5 cluster tokens: a long class name overflows 24 positions
}
# run by the smoke and few-shot studies, not by the demo (its results stay as they are): the linear probe, and the
# few-shot methods whose authors' code runs nothing else (Tip-Adapter-F, CLIP-LoRA; the smoke study runs them in
# every protocol too, so that each trains and evaluates there)
EXTRA_METHODS = ("linear_probe", "tip_adapter_f", "clip_lora")


# the 2026 table's prompt learners: the smoke and few-shot studies and make demo-2026, not the demo
METHODS_2026 = ("mmrlpp", "tac")


def with_2026_methods(raw: dict) -> dict:
    """`raw` with METHODS_2026 in study.methods and report.methods, after mmrl (in place; returned)."""
    for section in ("study", "report"):
        methods = raw[section].get("methods")
        if methods is None:  # report.methods null: the study's
            continue
        at = methods.index("mmrl") + 1 if "mmrl" in methods else len(methods)
        methods[at:at] = [name for name in METHODS_2026 if name not in methods]
    return raw


def with_extra_methods(raw: dict) -> dict:
    """`raw` with EXTRA_METHODS in study.methods and report.methods (where given), after zeroshot, in their order
    (in place; returned)."""
    for section in ("study", "report"):
        methods = raw[section].get("methods")
        if methods is None:  # report.methods null: the study's
            continue
        at = methods.index("zeroshot") + 1 if "zeroshot" in methods else 0
        for name in EXTRA_METHODS:
            if name not in methods:
                methods.insert(at, name)
            at = methods.index(name) + 1
    return raw


# the baselines with DeAR's head roles (dear/methods/roles.py and a module per variant), each beside its plain
# method: the smoke study and make demo-roles, not the demo
ROLE_VARIANTS = ("maple+roles", "promptsrc+roles", "mmrl+roles", "clip_lora+roles")


def with_role_variants(raw: dict) -> dict:
    """`raw` with each of ROLE_VARIANTS right after its plain method in study.methods and report.methods (where
    given and where the plain method is listed; in place; returned)."""
    for section in ("study", "report"):
        methods = raw[section].get("methods")
        for name in ROLE_VARIANTS if methods is not None else ():
            plain = name.removesuffix("+roles")
            if plain in methods and name not in methods:
                methods.insert(methods.index(plain) + 1, name)
    return raw


# The one measurement of the smoke study's time: every page that quotes it (README.md, docs/configs.md) and this
# config's header are written from it (`smoke_time`), so they cannot disagree. Remeasure after the study changes
# (`time make smoke` on a clean clone) and change it here only.
MEASURED = {"date": "2026-12-07", "command": "make smoke", "commit": "a1df3ff", "cores": 2, "jobs": 239,
            "seconds": 174}  # a fresh clone, the warm server on (afa8587: 182 s); smoke_on_off.sh at be349e9: 194 s on, 533 s off


def smoke_time(root: Path | None = None) -> str:
    """'Measured 2026-12-06 (`make smoke` at 422d5c1, 2 cores): 190 jobs in 10 min 5 s.' (a generated block)."""
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
# not this file; every value not changed there is the demo's, the methods included (and linear_probe,
# tip_adapter_f and clip_lora; MMRL++ and TAC, whose demo values params.yaml holds for make demo-2026;
# maple+roles, promptsrc+roles, mmrl+roles and clip_lora+roles, each beside its plain method).
"""


def smoke_params(demo: dict) -> dict:
    """The smoke study's params: the demo's (`demo`, params.yaml as read) with the tiny sections and SMOKE."""
    raw = copy.deepcopy(demo)
    raw.update(copy.deepcopy(tiny_params()))
    return with_role_variants(with_2026_methods(with_extra_methods(_changed(raw, SMOKE))))


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
    return _written(root, HEADER, smoke_params)


def _written(root: Path, header: str, from_demo) -> str:
    """A config written from params.yaml: its header, then `from_demo(the demo's params)` as YAML."""
    demo = yaml.safe_load((root / "params.yaml").read_text())
    return header + yaml.safe_dump(from_demo(demo), sort_keys=False, width=120)


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
# The demo's few-shot figure: every method of the demo, linear_probe, tip_adapter_f, clip_lora, mmrlpp and tac (every
# built-in method), trained on 1, 4 and 16 shots of every class of world_objects_sketch, one seed, scored on its test
# split (`make demo-fewshot`; outputs in demo-fewshot/).
# The world and the backbone are the demo's values (the same world, the same pretraining), the base-to-novel
# and transfer protocols are off. Written by `python -m dear.docs` from params.yaml and dear/docs/smoke.py
# (DEMO_FEWSHOT): edit those, not this file.
#   snakemake --cores 2 --scheduler greedy --configfile configs/demo-fewshot.yaml    (what make demo-fewshot runs)
#   python workflow/scripts/dvc_study.py configs/demo-fewshot.yaml && dvc repro demo-fewshot/dvc.yaml
"""


def demo_fewshot_text(root: Path) -> str:
    """configs/demo-fewshot.yaml as `python -m dear.docs` writes it."""
    return _written(root, DEMO_FEWSHOT_HEADER,
                    lambda demo: with_2026_methods(with_extra_methods(_changed(demo, DEMO_FEWSHOT))))


# --- configs/demo-2026.yaml: the demo with MMRL++ and TAC beside MMRL (`make demo-2026`) -----------------------

DEMO_2026_PATH = "configs/demo-2026.yaml"
DEMO_2026 = {  # dotted key: its value; every other key is the demo's (world, backbone, protocols, recipes)
    "output_root": "demo-2026",
    "data.root": "demo-2026/world",
}
DEMO_2026_HEADER = """\
# The demo with the 2026 table's prompt learners: the demo's study (methods, seeds, protocols, recipes, world and
# backbone) with MMRL++ and TAC beside MMRL (`make demo-2026`; outputs in demo-2026/). Two more methods cost the
# demo about two ninths more training, so `make demo` stays as it is. Their demo values (train.recipes.mmrlpp, .tac)
# are in params.yaml beside MMRL's and PromptSRC's. Written by `python -m dear.docs` from params.yaml and
# dear/docs/smoke.py (DEMO_2026): edit those, not this file.
#   snakemake --cores 2 --scheduler greedy --configfile configs/demo-2026.yaml    (what make demo-2026 runs)
#   python workflow/scripts/dvc_study.py configs/demo-2026.yaml && dvc repro demo-2026/dvc.yaml
"""


def demo_2026_text(root: Path) -> str:
    """configs/demo-2026.yaml as `python -m dear.docs` writes it."""
    return _written(root, DEMO_2026_HEADER, lambda demo: with_2026_methods(_changed(demo, DEMO_2026)))


# --- configs/demo-roles.yaml: the baselines with and without DeAR's head roles (`make demo-roles`) -------------------

DEMO_ROLES_PATH = "configs/demo-roles.yaml"
DEMO_ROLES = {  # dotted key: its value; every other key is the demo's (world, backbone, protocols, recipes, profile)
    "output_root": "demo-roles",
    "data.root": "demo-roles/world",
    "study.methods": ["zeroshot", "maple", "promptsrc", "mmrl", "clip_lora", "dear"],  # + each one's variant
}
DEMO_ROLES_HEADER = """\
# Does DeAR's head-role split help other methods? MaPLe, PromptSRC, MMRL and CLIP-LoRA each beside its `+roles`
# variant (the same recipe, picks and seeds, with the Generalization heads of the demo's roles table isolated from
# what the method learns), zero-shot CLIP and DeAR for reference, in the demo's three protocols (`make demo-roles`;
# outputs in demo-roles/). The world, backbone, profile and recipes are the demo's values; its report's "What the
# roles change" table gives each variant's paired difference against its plain method. Written by
# `python -m dear.docs` from params.yaml and dear/docs/smoke.py (DEMO_ROLES): edit those, not this file.
#   snakemake --cores 2 --scheduler greedy --configfile configs/demo-roles.yaml    (what make demo-roles runs)
#   python workflow/scripts/dvc_study.py configs/demo-roles.yaml && dvc repro demo-roles/dvc.yaml
"""


def demo_roles_text(root: Path) -> str:
    """configs/demo-roles.yaml as `python -m dear.docs` writes it."""
    return _written(root, DEMO_ROLES_HEADER, lambda demo: with_role_variants(_changed(demo, DEMO_ROLES)))


# --- examples/<package>/smoke.yaml: the smoke study with an example's plugin method (docs/your-method.md) ----------

EXAMPLES = {  # package folder under examples/: its method, its name in words, its keys for the 2-layer smoke towers
    "clip-adapter": ("clip_adapter", "CLIP-Adapter", {}),
    "vpt-deep": ("vpt_deep", "VPT-deep", {"prompt_depth_vision": 2}),  # its 12 layers of ViT-B/16: 2 here
}
EXAMPLE_SMOKE_HEADER = """\
# The smoke study (configs/smoke.yaml) with {title}, the method of the package examples/{folder}, beside
# zero-shot CLIP and CoOp: docs/your-method.md runs it. Install the package first (pip install -e
# examples/{folder}), then, outputs in {folder}-smoke/ (its numbers mean nothing, as the smoke study's):
#   snakemake --cores 2 --configfile examples/{folder}/smoke.yaml
#   python workflow/scripts/dvc_study.py examples/{folder}/smoke.yaml && dvc repro {folder}-smoke/dvc.yaml
# A copy for a method of your own is yours to edit: name your method in study.methods, give the copy its own
# output_root and data.root, and set your recipe's layer keys for the smoke backbone's 2 layers a tower (a depth
# of 12 for ViT-B/16 is 2 here: train.recipes.vpt_deep.prompt_depth_vision: 2 in examples/vpt-deep/smoke.yaml;
# `dear check` names any that does not fit). In dear's repository this file is written by `python -m dear.docs`
# from params.yaml and dear/docs/smoke.py (EXAMPLES).
"""


def example_smoke_text(folder: str):
    """examples/<folder>/smoke.yaml as `python -m dear.docs` writes it: the smoke study with the example's method."""
    method, title, keys = EXAMPLES[folder]
    changes = {"output_root": f"{folder}-smoke", "data.root": f"{folder}-smoke/world",
               "study.methods": ["zeroshot", "coop", method]}  # the report's methods and compare: the study's

    def with_method(demo: dict) -> dict:
        raw = _changed(smoke_params(demo), changes)
        if keys:
            raw["train"]["recipes"][method] = dict(keys)
        return raw

    return lambda root: _written(root, EXAMPLE_SMOKE_HEADER.format(title=title, folder=folder), with_method)


GENERATED = {PATH: smoke_text, DEMO_FEWSHOT_PATH: demo_fewshot_text,  # the configs `python -m dear.docs` writes
             DEMO_2026_PATH: demo_2026_text, DEMO_ROLES_PATH: demo_roles_text,
             **{f"examples/{folder}/smoke.yaml": example_smoke_text(folder) for folder in EXAMPLES}}
