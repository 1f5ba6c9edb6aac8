"""`dear check`: every problem of a params file at once, before any model loads.

Params are checked against each other and against the filesystem: data
root and dataset folders, model architecture, weights present (or what to
run to fetch them), the CUDA device, SVD rank against images, picks and
embedding width, the text bank, prompt templates, token layers. Each
problem is one line; `dear check` prints them all and exits 1, and every
stage runs the checks that concern it before its own work
(`stage_problems`), so a placeholder `data.root` or an impossible rank
fails in a second, not after a model has loaded.

Fast on purpose (well under 2 s): nothing here imports torch or open_clip
(`python -X importtime -c 'import dear.check'`). Architectures are read
from their config JSON files and CUDA is asked of the driver
(`dear.probe`); open_clip weights are looked up in the record
`dear fetch-weights` keeps (`dear.model.weights_record`).
"""

from __future__ import annotations

import json
import os
from collections import Counter
import sys
from pathlib import Path
from typing import Callable

from dear.cpus import available as available_cpus
from dear.data import coop
from dear.data import world as world_data
from dear.errors import DearError, Problems
from dear.model.concepts import CORE_CONCEPTS
from dear.model.textbank import load_bank
from dear.model.textspan import rank_problems
from dear.model.weights_record import lookup
from dear.params import Params, read_yaml, validate
from dear.probe import arch_config, cuda_devices, torch_cuda_build

def check_file(path: str | Path) -> tuple[Params | None, list[str]]:
    """(params, every problem) of a params file: validation problems first, then all the checks."""
    params, found = validate(read_yaml(path), path)
    if params is None:
        return None, found
    return params, problems(params, params_file=str(path))


def problems(params: Params, params_file: str = "params.yaml") -> list[str]:
    """Every problem of valid `params`, one line each (what `dear check` prints)."""
    return [line for check in ALL for line in check(params, params_file)]


def exit_on_problems(config: dict, params_file: str) -> None:
    """Snakemake's `onstart`: print every problem of the config in use, one `error:` line each, and exit 1."""
    params, found = validate(config, params_file)
    found = found or problems(params, params_file)
    for line in found:
        print(f"error: {line}", file=sys.stderr)
    if found:
        print(f"{params_file}: {len(found)} problem(s); no job was started (`dear check --params FILE` lists them "
              "again)", file=sys.stderr)
        raise SystemExit(1)


def stage_problems(params: Params, stage: str, params_file: str = "params.yaml") -> None:
    """Raise `Problems` (every line) when the checks that concern `stage` find any."""
    found = [line for check in STAGES.get(stage, ()) for line in check(params, params_file)]
    if found:
        raise Problems(found)


# --- data ------------------------------------------------------------------------------

def data(params: Params, params_file: str) -> list[str]:
    """CoOp datasets: root, folders, split files and image folders exist (no image is listed)."""
    cfg = params.data
    unknown = [name for name in cfg.datasets if name not in coop.SPECS]
    found = [f"data.datasets: unknown dataset {name!r}; known: {', '.join(sorted(coop.SPECS))}" for name in unknown]
    known = [coop.SPECS[name] for name in cfg.datasets if name in coop.SPECS]
    if cfg.source == "embedded":
        made = set(world_data.dataset_names(params.world))
        return found + [f"data.datasets: {spec.folder} is not drawn by `dear world` (world.attribute_sets); "
                        "add it there or drop it" for spec in known if spec.folder not in made]
    root = Path(cfg.root)
    if not root.is_dir():
        return found + [f"data.root: {root} not found; set it to the folder holding your CoOp-layout datasets "
                        f"(in {params_file})"]
    for spec in known:
        needed = [spec.dataset_dir(root), spec.dataset_dir(root) / spec.split_file, spec.image_root(root)]
        missing = next((path for path in needed if not path.exists()), None)
        if missing is not None:
            found.append(f"{missing}: not found (data.datasets: {spec.folder}); {spec.howto}")
    return found


def split_size(params: Params, dataset: str, split: str) -> int | None:
    """Images in one split of a dataset when that is cheap to know (world params, CoOp split JSON), else None."""
    if params.data.source == "embedded":
        return _world_split_size(params.world, dataset, split)
    spec = coop.SPECS.get(dataset)
    path = spec.dataset_dir(Path(params.data.root)) / spec.split_file if spec else None
    if spec is None or spec.reader is not coop.read_split_json or not path.is_file():
        return None
    try:
        return len(json.loads(path.read_text()).get(split, []))
    except (OSError, json.JSONDecodeError, AttributeError):
        return None  # `dear prepare` names a broken split file


def _world_split_size(world, dataset: str, split: str, per_class: bool = False) -> int | None:
    index = world_data.SPLITS.index(split)
    classes = {"world_objects": world.n_objects, "world_objects_sketch": world.n_objects,
               "world_objects_b": world.n_objects_b, "world_objects_rare": world.n_objects_rare,
               "world_colors": len(world.colors),
               "world_textures": len(world.textures), "world_shapes": len(world.shapes),
               "world_positions": world.grid * world.grid}
    each = {"world_objects_sketch": world.sketch_split}.get(
        dataset, world.objects_split if dataset.startswith("world_objects") else world.attribute_split)
    return None if dataset not in classes else each[index] if per_class else classes[dataset] * each[index]


# --- world, model, weights, device ---------------------------------------------------

def world(params: Params, params_file: str) -> list[str]:
    """The world can be drawn (what `dear world` checks, but the ~1 s emoji count)."""
    if params.data.source != "embedded" and params.model.pretrained != "embedded" and not params.backbone.sanity.enabled:
        return []
    return [line.replace("params.yaml", params_file, 1) for line in world_data.problems(params.world, count_emoji=False)]


def model(params: Params, params_file: str) -> list[str]:
    """The architecture exists; the embedded backbone's image size matches the world's."""
    cfg = params.model
    config = arch_config(cfg.arch)
    if config is None:
        return [f"model.arch: unknown architecture {cfg.arch!r}; use dear-world, an open_clip name (ViT-B-16, ...) "
                "or a config JSON path"]
    size = config.get("vision_cfg", {}).get("image_size")
    if cfg.pretrained == "embedded" and size != params.world.image_size:
        return [f"model.arch: {cfg.arch} takes {size} px images but world.image_size is {params.world.image_size}; "
                "make them equal"]
    return []


def weights_file(params: Params, params_file: str) -> list[str]:
    """A weights file given as model.pretrained exists."""
    pretrained = params.model.pretrained
    if pretrained == "embedded" or not _is_weights_path(pretrained) or Path(pretrained).is_file():
        return []
    return [f"model.pretrained: weights file {pretrained} not found; pass an existing file"]


def weights_fetched(params: Params, params_file: str) -> list[str]:
    """An open_clip tag's weights were fetched (`dear fetch-weights`, or a stage that found them, records them).

    Only `dear check` asks: the backbone stage looks in the cache itself.
    """
    cfg = params.model
    if cfg.pretrained == "embedded" or _is_weights_path(cfg.pretrained):
        return []
    if lookup(arch_name(cfg.arch), cfg.pretrained, cfg.cache_dir) is not None:
        return []
    where = cfg.cache_dir or "open_clip's default cache"
    return [f"model.pretrained: open_clip weights {cfg.pretrained!r} for {cfg.arch} are not fetched into {where}; "
            f"run `dear fetch-weights --params {params_file}` where there is network (e.g. a login node)"]


def arch_name(arch: str) -> str:
    """The name open_clip registers an architecture under (a config file's stem)."""
    return Path(arch).stem if arch.endswith(".json") else arch


def _is_weights_path(pretrained: str) -> bool:
    """The same rule as dear.model.weights.is_weights_path (kept here: that module imports open_clip)."""
    return Path(pretrained).exists() or "/" in pretrained or pretrained.endswith((".pt", ".pth", ".bin", ".safetensors"))


def device(params: Params, params_file: str) -> list[str]:
    """compute.device: cuda needs a CUDA build of torch and a visible device (asked of the driver, not torch)."""
    if params.compute.device != "cuda":
        return []
    build = torch_cuda_build()
    if build is None:
        return ["compute.device: cuda, but the installed torch is a CPU-only build; install a CUDA build "
                "(docs/install.md) or use auto/cpu"]
    if not cuda_devices():
        return [f"compute.device: cuda, but no CUDA device is visible here (torch built for CUDA {build}; "
                f"CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES', 'unset')}); "
                "run on a GPU node or use auto/cpu"]
    return []


# --- profile, train -------------------------------------------------------------------

def profile(params: Params, params_file: str) -> list[str]:
    """Roles thresholds, the text bank, profiled layers, and SVD rank vs images, picks and embedding width."""
    cfg = params.profile
    found = []
    if not cfg.roles.low < cfg.roles.high:
        found.append(f"profile.roles: low ({cfg.roles.low}) must be below high ({cfg.roles.high})")
    if cfg.roles.mode == "quantile" and cfg.roles.high > 1.0:
        found.append(f"profile.roles.high: {cfg.roles.high} is not a quantile; use 0..1 or mode: absolute")
    missing = [c for c in CORE_CONCEPTS if c not in cfg.concepts.allowed]
    if missing:
        found.append(f"profile.concepts.allowed: the core attributes {missing} are missing; add them")
    try:
        n_texts = len(load_bank(cfg.text_bank, cfg.concepts.allowed, params.world))
    except DearError as err:
        found.append(str(err))
        n_texts = None
    config = arch_config(params.model.arch) or {}
    vision = config.get("vision_cfg", {})
    if isinstance(vision.get("layers"), int) and not 1 <= cfg.layers <= vision["layers"]:
        found.append(f"profile.layers: asked for the last {cfg.layers} layers but {params.model.arch}'s image tower "
                     f"has {vision['layers']}; set profile.layers between 1 and {vision['layers']}")
    size = split_size(params, cfg.dataset, cfg.split)
    n_images = min(cfg.max_images, size) if size is not None else cfg.max_images
    images_from = f"{n_images} images ({cfg.dataset} {cfg.split}{'' if size is not None else ', at most'})"
    return found + rank_problems(cfg.svd_rank, cfg.texts_per_head, n_images, config.get("embed_dim"), n_texts,
                                 images_from)


def train(params: Params, params_file: str) -> list[str]:
    """Every training job's recipe: prompts hold one {}, DeAR's tokens have concepts, token layers exist.

    A bad value is reported once, by the key it comes from, with the jobs it would break.
    """
    from dear.methods.recipe import problems as recipe_problems

    found = recipe_problems(params.train.recipes)
    if found:
        return found
    config = arch_config(params.model.arch) or {}
    depth = {"vision": config.get("vision_cfg", {}).get("layers"), "text": config.get("text_cfg", {}).get("layers")}
    broken: dict[tuple, list] = {}  # (key, value, problem) -> [where it comes from, jobs]
    for method, dataset, protocol in training_jobs(params):
        recipe = params.train.recipe(method, dataset, protocol)
        for key, problem in _recipe_problems(recipe, depth, params.model.arch):
            setting = recipe.settings[key]
            ours = setting.kind == "ours" and setting.source.startswith("train.recipes.")
            where = setting.source if ours else f"train.recipes.{recipe.recipe}.{key}"
            origin = "" if ours else f" (the {setting.kind}' value, {setting.source})"
            broken.setdefault((where, repr(setting.value), problem), [origin, []])[1].append(f"{method} on {dataset}")
    return [f"{where}: {value}{origin} {problem}; {_jobs(jobs)}"
            for (where, value, problem), (origin, jobs) in broken.items()]


def _recipe_problems(recipe, depth: dict, arch: str) -> list[tuple[str, str]]:
    """(key, what is wrong) of one resolved recipe."""
    found = []
    template = recipe.get("template")
    if template is not None and template.count("{}") != 1:
        found.append(("template", "is a prompt without exactly one {} for the class name; write one"))
    if recipe.get("attribute_tokens", 0) > len(set(recipe.get("concepts", []))):
        found.append(("attribute_tokens", f"needs as many distinct concepts (got {recipe.concepts}); "
                                          "list one concept per token"))
    towers = {"start_layer": ["vision"], "text_start_layer": ["text"]}
    if "text_start_layer" not in recipe.settings:  # MMRL: one start for both towers
        towers["start_layer"].append("text")
    for key, names in towers.items():
        start = recipe.get(key)
        layers = [depth[name] for name in names if isinstance(depth[name], int)]
        if start is not None and layers and start > min(layers):
            shape = " and ".join(f"{depth[name]} {name}" for name in names)
            found.append((key, f"is past the last layer of {arch} ({shape} layers); set it in 1..{min(layers)}, "
                               "or null"))
    return found


def _jobs(jobs: list[str]) -> str:
    jobs = list(dict.fromkeys(jobs))
    return "jobs " + ", ".join(jobs[:3]) + (f" and {len(jobs) - 3} more" if len(jobs) > 3 else "")


def training_jobs(params: Params) -> list[tuple[str, str, str]]:
    """(method, dataset, protocol) of every training job the study runs."""
    jobs = [(method, dataset, "base_to_novel") for method in params.study.methods for dataset in params.study.base_to_novel]
    source = params.study.transfer.source
    return jobs + [(method, source, "transfer") for method in params.study.methods]


# --- warnings: what runs, but not as the config reads -------------------------------

def warnings(params: Params, params_file: str) -> list[str]:
    """Fewer training images than data.shots in a class; more worker processes than this machine's CPUs."""
    found = []
    trained_on = dict.fromkeys([*params.study.base_to_novel, params.study.transfer.source])  # targets draw no shots
    for name in trained_on:
        fewest = _fewest_train_images(params, name)
        if fewest is not None and fewest < params.data.shots:
            found.append(f"data.shots: {params.data.shots}, but a class of {name} has only {fewest} training images: "
                         "it gets fewer shots (the report states the shots used); lower data.shots to compare "
                         "at equal shots")
    cpus = available_cpus()
    for key, workers, needed, what in (
            ("compute.workers", params.compute.workers, 1 + params.compute.workers, "image-loading processes"),
            ("data.workers", params.data.workers, params.data.workers, "image-checking processes of prepare")):
        if needed > cpus:
            found.append(f"{key}: {workers} {what} need {needed} CPUs, but this machine has {cpus}: a job never uses "
                         f"more CPUs than it has, so fewer start here; lower {key} (or keep it for nodes with more CPUs)")
    return found


def _fewest_train_images(params: Params, dataset: str) -> int | None:
    """Training images of the smallest class, when cheap to know (world params, CoOp split JSON); else None."""
    if params.data.source == "embedded":
        return _world_split_size(params.world, dataset, "train", per_class=True)
    spec = coop.SPECS.get(dataset)
    path = spec.dataset_dir(Path(params.data.root)) / spec.split_file if spec else None
    if spec is None or spec.test_only or spec.reader is not coop.read_split_json or not path.is_file():
        return None
    try:
        labels = [item[1] for item in json.loads(path.read_text()).get("train", [])]
    except (OSError, json.JSONDecodeError, AttributeError, IndexError, TypeError):
        return None  # `dear prepare` names a broken split file
    return min(Counter(labels).values()) if labels else None


Check = Callable[[Params, str], list[str]]
ALL: tuple[Check, ...] = (data, world, model, weights_file, weights_fetched, device, profile, train)
STAGES: dict[str, tuple[Check, ...]] = {
    "world": (world,),
    "backbone": (world, model, weights_file, device),
    "profile": (profile, device),
    "train": (train, device),
    "fuse": (device,),
    "evaluate": (device,),
}
