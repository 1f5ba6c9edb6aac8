"""`dear check`: every problem of a params file at once, before any model loads.

Params are checked against each other and against the filesystem: data
root and dataset folders, model architecture, weights present (or what to
run to fetch them), the CUDA device, SVD rank against images, picks and
embedding width, the text bank, prompt templates, token layers. Each
problem is one line naming the key(s) and every way out. All independent
checks run in one pass: every section is validated on its own, and a check
that reads a section with a problem says what it waits on (`CHECKS`: what
each reads). `dear check` prints them all and exits 1; every stage runs the
checks that concern it before its own work (`stage_problems`), and both
engines run them all before they plan (`dear.pipeline.engines`), so a placeholder
`data.root` or an impossible rank fails in a second, not after a model has
loaded. Problems of this machine (data folders, weights, device) are told
apart: a dry run may plan for another machine.

Fast on purpose (well under 2 s): nothing here imports torch or open_clip
(`python -X importtime -c 'import dear.config.check'`). Architectures are read
from their config JSON files and CUDA is asked of the driver
(`dear.compute.probe`); open_clip weights are looked up in the record
`dear fetch-weights` keeps (`dear.model.weights_record`).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from collections import Counter
from pathlib import Path
from types import SimpleNamespace
from typing import Callable, Sequence

from pydantic import BaseModel, ValidationError

from dear.config import strict_yaml
from dear.compute.cpus import available as available_cpus
from dear.data import coop
from dear.data import custom as custom_data
from dear.data import world as world_data
from dear.errors import DearError, Problems
from dear.methods import descriptions
from dear.methods.layers import resolve as resolve_layers
from dear.model.concepts import CORE_CONCEPTS
from dear.model.textbank import load_bank
from dear.model.textspan import rank_problems
from dear.model.weights_record import lookup
from dear.config.params import Params, apply_overrides, error_line, report_problems, unprepared, world_needed
from dear.compute.probe import arch_config, cuda_devices, torch_cuda_build


@dataclass(frozen=True)
class Finding:
    """One line of `dear check`: a problem of the values (`config`), of this machine's files or devices
    (`machine`: a dry run may plan on another machine, so engines show these as warnings there), or a check
    that did not run because a section it reads is invalid (`waits`)."""

    text: str
    kind: str  # config | machine | waits

    @property
    def is_problem(self) -> bool:
        return self.kind != "waits"


def check_file(path: str | Path, overrides: Sequence[str] = ()) -> tuple[Params | None, list[Finding]]:
    """(params, every finding) of a params file with `--set` overrides: all independent checks run in one pass.

    What the YAML versions read differently (or a key given twice) is reported and the rest is checked on
    as PyYAML reads it; only a syntax error stops the check.
    """
    try:
        raw, troubles = strict_yaml.read_all(path)
        if not isinstance(raw, dict):
            raise DearError(f"{path}: expected a mapping of sections at the top level")
        apply_overrides(raw, overrides)
    except DearError as err:
        return None, [Finding(line, "config") for line in getattr(err, "lines", [str(err)])]
    params, found = check_raw(raw, str(path))
    said = [key for key, _ in troubles]
    found = [item for item in found if not any(f"'{key}'" in item.text for key in said)]  # said once, not twice
    return (None if troubles else params), [Finding(line, "config") for _, line in troubles] + found


def check_raw(raw: dict, params_file: str) -> tuple[Params | None, list[Finding]]:
    """Validate every section on its own, then run each check whose sections are valid; name the ones waiting.

    A bad key in one section never hides a problem of another: the sections that validate are checked
    against each other and the filesystem, and a check that reads a bad section says so instead.
    """
    params, found, sections = validate_sections(raw, params_file)
    for check in CHECKS:
        waiting = [name for name in check.reads if name not in sections]
        if waiting:
            found.append(Finding(f"{check.what}: not checked until {', '.join(waiting)} above "
                                 f"{'is' if len(waiting) == 1 else 'are'} fixed", "waits"))
            continue
        found += [Finding(line, check.kind) for line in check.run(SimpleNamespace(**sections), params_file)]
    return params, found


def validate_sections(raw: dict, params_file: str) -> tuple[Params | None, list[Finding], dict]:
    """(params or None, one finding per validation problem, {section: its valid value})."""
    try:
        params = Params.model_validate(raw)
        return params, [], {name: getattr(params, name) for name in Params.model_fields}
    except ValidationError as err:
        problems = [problem for problem in err.errors() if problem["loc"]]  # rules across sections: CHECKS
        bad = {problem["loc"][0] for problem in problems}
        found = [Finding(error_line(problem, Path(params_file)), "config") for problem in problems]
    sections = {}
    for name, field in Params.model_fields.items():
        if name in bad or name not in raw:
            continue
        annotation = field.annotation
        sections[name] = annotation.model_validate(raw[name]) if isinstance(annotation, type) and \
            issubclass(annotation, BaseModel) else raw[name]
    return None, found, sections


def stage_problems(params: Params, stage: str, params_file: str = "params.yaml") -> None:
    """Raise `Problems` (every line) when the checks that concern `stage` find any."""
    found = [line for check in CHECKS if stage in check.stages for line in check.run(params, params_file)]
    if found:
        raise Problems(found)


# --- data ------------------------------------------------------------------------------

def dataset_names(params, params_file: str) -> list[str]:
    """Every dataset of data.datasets is one this pipeline knows, and (embedded) one `dear world` draws."""
    cfg = params.data
    found = [f"data.datasets: unknown dataset {name!r}; fix its name (known: {', '.join(sorted(coop.SPECS))}), "
             f"declare a dataset of your own under data.custom.{name} (format, path: docs/your-data.md), or remove it"
             for name in cfg.datasets if name not in coop.SPECS and name not in cfg.custom]
    if cfg.source == "embedded":
        made = set(world_data.dataset_names(params.world))
        attribute = {f"world_{name}": name for name in ("colors", "textures", "shapes", "positions")}
        found += [f"data.datasets: {name} is not drawn by `dear world`; "
                  + (f"add {attribute[name]} to world.attribute_sets or " if name in attribute else "")
                  + "remove it from data.datasets" for name in cfg.datasets if name in coop.SPECS and name not in made]
    return found


def datasets_used(params, params_file: str) -> list[str]:
    """Every dataset the study or the profile uses is one `prepare` makes (listed in data.datasets)."""
    return unprepared(params.data, params.study, params.profile)


def report_methods(params, params_file: str) -> list[str]:
    """report.methods and report.compare name methods the study runs (`dear.config.params.report_problems`)."""
    return report_problems(params.study, params.report)


def study_runs(params, params_file: str) -> list[str]:
    """The study trains something: a protocol is on (study.methods holds at least one method: a rule of its own)."""
    if params.study.base_to_novel or params.study.transfer_on is not None or params.study.few_shot_on is not None:
        return []
    return ["study.base_to_novel is empty and the transfer and few-shot protocols are off (study.transfer, "
            "study.few_shot): nothing would be trained; list datasets in study.base_to_novel, or switch study.transfer "
            "or study.few_shot on"]


def few_shot_sets(params, params_file: str) -> list[str]:
    """Few-shot learning draws K shots of every class from a training split: a test-only set (a domain-shift
    target such as imagenet-sketch) has none."""
    few = params.study.few_shot_on
    return [f"study.few_shot.datasets: {name} has a test split only (a domain-shift target), so no shot can be "
            f"drawn from it; remove it from study.few_shot.datasets"
            for name in (few.datasets if few is not None else []) if name in coop.SPECS and coop.SPECS[name].test_only]


def data_folders(params, params_file: str) -> list[str]:
    """CoOp datasets on this machine: root, folders, split files and image folders exist (no image is listed)."""
    cfg = params.data
    found = [line for name in cfg.datasets if name in cfg.custom
             for line in custom_data.problems(name, cfg.custom[name])]
    if cfg.source == "embedded" or all(name in cfg.custom for name in cfg.datasets):
        return found
    root = Path(cfg.root)
    if not root.is_dir():
        return found + [f"data.root: {root} not found (in {params_file}); set data.root to the folder holding your "
                        "CoOp-layout datasets, or use data.source: embedded for the packaged emoji world"]
    for spec in (coop.SPECS[name] for name in cfg.datasets if name in coop.SPECS):
        needed = [spec.dataset_dir(root), spec.dataset_dir(root) / spec.split_file, spec.image_root(root)]
        missing = next((path for path in needed if not path.exists()), None)
        if missing is not None:
            found.append(f"{missing}: not found (data.datasets: {spec.folder}); {spec.howto}, or remove "
                         f"{spec.folder} from data.datasets and the study")
    return found


def shifted_classes(params, params_file: str) -> list[str]:
    """A domain-generalisation target of one's own holds the source's classes (its names, via `classnames`)."""
    transfer = params.study.transfer_on
    if transfer is None:
        return []
    from dear.data.names import all_names

    found = []
    for target in (name for name in transfer.domain_generalization if name in params.data.custom):
        source, names = all_names(params, transfer.source), all_names(params, target)
        if source is None or names is None:
            continue  # not readable here: `prepare` says why
        foreign = [name for name in names if name not in source]
        if foreign:
            found.append(f"data.custom.{target}: class {foreign[0]!r} ({len(foreign)} such) is not a class of the "
                         f"source {transfer.source}, but a domain-generalisation target holds the source's classes; "
                         f"map each class to one of {transfer.source}'s names in data.custom.{target}.classnames "
                         "(e.g. {folder: source class name}), or list it under study.transfer.cross_dataset")
    return found


def split_size(params: Params, dataset: str, split: str) -> int | None:
    """Images in one split of a dataset when that is cheap to know (world params, CoOp split JSON), else None."""
    if params.data.source == "embedded":
        return _world_split_size(params.world, dataset, split)
    spec = coop.SPECS.get(dataset)
    path = spec.dataset_dir(Path(params.data.root)) / spec.split_file if spec else None
    if spec is None or spec.format != "coop-json" or not path.is_file():
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

def world(params, params_file: str) -> list[str]:
    """The world can be drawn, when some job reads it (what `dear world` checks, but the ~1 s emoji count)."""
    if not world_needed(params):
        return []
    return [line.replace("params.yaml", params_file, 1) for line in world_data.problems(params.world, count_emoji=False)]


def model(params, params_file: str) -> list[str]:
    """The architecture exists; the embedded backbone's image size matches the world's."""
    cfg = params.model
    config = arch_config(cfg.arch)
    if config is None:
        return [f"model.arch: unknown architecture {cfg.arch!r}; use dear-world, an open_clip name (ViT-B-16, ...) "
                "or a config JSON path"]
    refused = unsupported(cfg.arch, config)
    if refused:
        return [refused]
    size = config.get("vision_cfg", {}).get("image_size")
    if cfg.pretrained == "embedded" and size != params.world.image_size:
        return [f"model.arch: {cfg.arch} takes {size} px images but world.image_size is {params.world.image_size}; "
                f"set world.image_size to {size}, or choose a model.arch that takes {params.world.image_size} px"]
    return []


def unsupported(arch: str, config: dict) -> str | None:
    """Why DeAR cannot serve an architecture, from its config (what `dear.model.internals` refuses once built)."""
    vision, text = config.get("vision_cfg", {}), config.get("text_cfg", {})
    use = "; use a CLS-token open_clip ViT (e.g. ViT-B-16)"
    if vision.get("timm_model_name") or not isinstance(vision.get("layers", 12), int):
        return f"model.arch: {arch}'s image tower is not an open_clip ViT (a timm or ResNet tower){use}"
    if vision.get("attentional_pool") or vision.get("final_ln_after_pool"):
        return f"model.arch: {arch} pools its image tower attentionally (or normalizes after pooling){use}"
    if vision.get("pool_type", "tok") != "tok":
        return f"model.arch: {arch} pools its image tower by '{vision['pool_type']}', without a CLS token{use}"
    if text.get("hf_model_name") or text.get("embed_cls") or text.get("no_causal_mask"):
        return f"model.arch: {arch}'s text tower is not CLIP's causal one (Hugging Face, CoCa's CLS or no causal mask){use}"
    return None


def weights_file(params, params_file: str) -> list[str]:
    """A weights file given as model.pretrained exists."""
    pretrained = params.model.pretrained
    if pretrained == "embedded" or not _is_weights_path(pretrained) or Path(pretrained).is_file():
        return []
    return [f"model.pretrained: weights file {pretrained} not found; point model.pretrained to an existing file, "
            "or use an open_clip tag (openai, ...) or embedded"]


def weights_fetched(params, params_file: str) -> list[str]:
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
            f"run `dear fetch-weights --params {params_file}` where there is network (e.g. a login node), or set "
            "model.cache_dir to a cache that holds them"]


def arch_name(arch: str) -> str:
    """The name open_clip registers an architecture under (a config file's stem)."""
    return Path(arch).stem if arch.endswith(".json") else arch


def _is_weights_path(pretrained: str) -> bool:
    """The same rule as dear.model.weights.is_weights_path (kept here: that module imports open_clip)."""
    return Path(pretrained).exists() or "/" in pretrained or pretrained.endswith((".pt", ".pth", ".bin", ".safetensors"))


def device(params, params_file: str) -> list[str]:
    """compute.device: cuda needs a CUDA build of torch and a visible device (asked of the driver, not torch)."""
    if params.compute.device != "cuda":
        return []
    build = torch_cuda_build()
    if build is None:
        return ["compute.device: cuda, but the installed torch is a CPU-only build; install a CUDA build "
                "(docs/install.md), or set compute.device to auto or cpu"]
    if not cuda_devices():
        return [f"compute.device: cuda, but no CUDA device is visible here (torch built for CUDA {build}; "
                f"CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES', 'unset')}); "
                "run on a GPU node, or set compute.device to auto or cpu"]
    return []


# --- profile, train -------------------------------------------------------------------

def profile(params, params_file: str) -> list[str]:
    """Roles thresholds, the text bank, profiled layers, and SVD rank vs images, picks and embedding width."""
    cfg = params.profile
    found = []
    if not cfg.roles.low < cfg.roles.high:
        found.append(f"profile.roles: low ({cfg.roles.low}) must be below high ({cfg.roles.high}); lower "
                     "profile.roles.low or raise profile.roles.high")
    if cfg.roles.mode == "quantile" and cfg.roles.high > 1.0:
        found.append(f"profile.roles.high: {cfg.roles.high} is not a quantile; use 0..1 or mode: absolute")
    missing = [c for c in CORE_CONCEPTS if c not in cfg.concepts.allowed]
    if missing:
        found.append(f"profile.concepts.allowed: the core attributes {missing} are missing; add them")
    n_texts = None
    if cfg.text_bank == "world":  # its size and concepts follow from the world's params (the emoji draw takes ~1 s)
        n_texts = world_data.text_bank_size(params.world)
        unknown = sorted(set(world_data.TEXT_BANK_CONCEPTS) - set(cfg.concepts.allowed))
        if unknown:
            found.append(f"profile.text_bank: the world's text bank labels texts {unknown}, which "
                         "profile.concepts.allowed does not list; add them there, or use another profile.text_bank")
    else:
        try:
            n_texts = len(load_bank(cfg.text_bank, cfg.concepts.allowed, params.world))
        except DearError as err:
            found.append(str(err))
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


def train(params, params_file: str) -> list[str]:
    """Every training job's recipe: prompts hold one {}, DeAR's tokens have concepts, token layers exist.

    A bad value is reported once, by the key it comes from, with the jobs it would break.
    """
    from dear.methods import entry
    from dear.methods.recipe import problems as recipe_problems

    found = recipe_problems(params.train.recipes)
    if found:
        return found
    config = arch_config(params.model.arch) or {}
    depth = tower_depths(config)
    broken: dict[tuple, list] = {}  # (key, value, problem) -> [where it comes from, jobs]
    from dear.methods.recipe import loads

    for method, dataset, protocol, shots in training_jobs(params):
        if not loads(entry(method).recipe):
            continue  # a plugin's broken recipe file: `study_plugins` names it
        recipe = params.train.recipe(method, dataset, protocol, shots)
        for key, problem in _recipe_problems(recipe, depth, params.model.arch):
            setting = recipe.settings[key]
            ours = setting.kind == "ours" and setting.source.startswith("train.recipes.")
            where = setting.source if ours else f"train.recipes.{recipe.recipe}.{key}"
            whose = {"authors": "the authors'", "paper": "the paper's"}.get(setting.kind, "the recipe file's")
            origin = "" if ours else f" ({whose} value, {setting.source})"
            broken.setdefault((where, repr(setting.value), problem), [origin, []])[1].append(
                f"{method} on {dataset}" + (f" ({shots} shots)" if shots is not None else ""))
    return [f"{where}: {value}{origin} {problem}; {_jobs(jobs)}"
            for (where, value, problem), (origin, jobs) in broken.items()]


def study_plugins(params, params_file: str) -> list[str]:
    """Every plugin method the study uses loads, its recipe resolves, its class has its hooks.

    Imports the model module of each (and torch); a study of built-in methods only asks nothing.
    """
    from dear.methods import REGISTRY, entry

    found = []
    for name in dict.fromkeys([*params.study.methods, params.train.method]):
        plugin = entry(name).plugin if name not in REGISTRY else None  # an unusable name: a validation error
        if plugin is not None:
            found += plugin_problems(plugin)
    return found


def plugin_problems(plugin) -> list[str]:
    """What stops a plugin method from running, one line each: its recipe file, its model class, its hooks.

    Imports the model's module (and torch): `dear check` asks this of the plugins a study uses only.
    """
    from dear.methods import model_class, plugins
    from dear.methods.recipe import REQUIRED, load, resolve

    found = []
    try:
        spec = load(plugin.name)
        resolve({}, plugin.name, "any", "base_to_novel")  # every key has a default
    except DearError as error:
        found.append(f"{plugin.label}: {error}")
        spec = None
    lacking = [key for key in REQUIRED if spec is not None and key not in spec.keys]
    if lacking:
        found.append(f"{plugin.label}: its recipe has no key {', '.join(lacking)}, which the stages read of every "
                     "method; declare it and give it a value (`base: dassl` brings it; docs/your-method.md#the-recipe)")
    try:
        cls = model_class(plugin.name)
    except Exception as error:  # the plugin's code: whatever it raises is its problem, in one line
        return [*found, f"{plugin.label}: its model {plugin.method.model} cannot be imported "
                        f"({type(error).__name__}: {error}); fix `model=` of its Method declaration or the module"]
    from dear.methods.base import MethodModel

    if not (isinstance(cls, type) and issubclass(cls, MethodModel)):
        return [*found, f"{plugin.label}: its model {plugin.method.model} is not a dear.contract.MethodModel "
                        "subclass; derive it from MethodModel (docs/your-method.md#hooks)"]
    missing = [hook for hook in plugins.required_hooks(cls, trains=spec.trains if spec else False)
               if getattr(cls, hook, None) is getattr(MethodModel, hook, None)]
    found += [f"{plugin.label}: {cls.__name__} does not define the hook {hook}, which "
              f"{'every method needs' if hook != plugins.TRAIN_HOOK else 'a method whose recipe trains (base: dassl) needs'}; "
              "write it (docs/your-method.md#hooks)" for hook in missing]
    return found


def plugin_names(params, params_file: str) -> list[str]:
    """No installed plugin takes a built-in method's name (such a plugin can never run: the built-in one wins).
    `dear check` only: it reads every installed package's entry points."""
    from dear.methods import RESERVED, plugins

    return [plugins.shadows(item, item.name) for item in plugins.discovered()
            if isinstance(item, plugins.Plugin) and item.name in RESERVED]


def _recipe_problems(recipe, depth: dict, arch: str) -> list[tuple[str, str]]:
    """(key, what is wrong) of one resolved recipe."""
    found = []
    template = recipe.get("template")
    if template is not None and template.count("{}") != 1:
        found.append(("template", "is a prompt without exactly one {} for the class name; write one"))
    if recipe.get("attribute_tokens", 0) > len(set(recipe.get("concepts", []))):
        found.append(("attribute_tokens", f"needs as many distinct concepts (got {recipe.concepts}); "
                                          "list one concept per token"))
    if "descriptions" in recipe.settings and recipe.descriptions is None:
        found.append(("descriptions", f"names no class descriptions ({descriptions.REPOSITORY} has none for this "
                                      "dataset); set it to a JSON file {class name: [texts]} of your own, or to "
                                      f"'{descriptions.TEMPLATES}' (PromptSRC's 60 templates, ours)"))
    found += [(layer.key, layer.problem.replace("this model", arch, 1))
              for layer in resolve_layers(recipe.recipe, recipe.values, depth) if layer.problem]
    return found


def class_descriptions(params, params_file: str) -> list[str]:
    """The class descriptions every training job's recipe names are on this machine (TAC's: the authors'
    descriptions/<dataset>_prompt.json, fetched by `dear fetch-weights`, or a file of one's own)."""
    recipes = [recipe for recipe in job_recipes(params) if recipe.get("descriptions") is not None]
    return descriptions.missing(recipes, params_file)


def job_recipes(params) -> list:
    """The resolved recipe of every training job whose recipe file loads (a plugin's broken one: `study_plugins`)."""
    from dear.methods import entry
    from dear.methods.recipe import loads

    return [params.train.recipe(*job) for job in training_jobs(params) if loads(entry(job[0]).recipe)]


def _jobs(jobs: list[str]) -> str:
    jobs = list(dict.fromkeys(jobs))
    return "jobs " + ", ".join(jobs[:3]) + (f" and {len(jobs) - 3} more" if len(jobs) > 3 else "")


def tower_depths(config: dict) -> dict[str, int | None]:
    """{'image': layers, 'text': layers} of an architecture's config (None where it does not say)."""
    return {"image": config.get("vision_cfg", {}).get("layers"), "text": config.get("text_cfg", {}).get("layers")}


def training_jobs(params: Params) -> list[tuple[str, str, str, int | None]]:
    """(method, dataset, protocol, shots) of every training job the study runs; shots: the few_shot protocol's K."""
    methods = params.study.methods
    jobs = [(method, dataset, "base_to_novel", None) for method in methods for dataset in params.study.base_to_novel]
    transfer = params.study.transfer_on
    jobs += [(method, transfer.source, "transfer", None) for method in methods] if transfer else []
    return jobs + [(method, dataset, "few_shot", k) for method in methods for dataset, k in params.study.few_shot_runs()]


@dataclass(frozen=True)
class Check:
    """One independent check: the sections it reads (it waits while one is invalid) and the stages that run it."""

    run: Callable[[Params, str], list[str]]
    reads: tuple[str, ...]
    what: str  # what it checks, for the line saying it waits
    kind: str = "config"  # config | machine (this machine's files and devices)
    stages: tuple[str, ...] = ()


CHECKS: tuple[Check, ...] = (
    Check(dataset_names, ("data", "world"), "data.datasets against the known datasets"),
    Check(datasets_used, ("data", "study", "profile"), "the datasets the study and the profile use"),
    Check(study_runs, ("study",), "the study's protocols"),
    Check(report_methods, ("study", "report"), "the report's methods against the study's"),
    Check(few_shot_sets, ("study",), "the few-shot datasets"),
    Check(data_folders, ("data",), "the data folders", "machine"),
    Check(shifted_classes, ("data", "study", "world"), "the classes of domain-generalisation targets", "machine"),
    Check(world, ("data", "model", "backbone", "world"), "the world", stages=("world", "backbone")),
    Check(model, ("model", "world"), "model.arch", stages=("backbone",)),
    Check(weights_file, ("model",), "model.pretrained", "machine", stages=("backbone",)),
    Check(weights_fetched, ("model",), "the weights in the cache", "machine"),
    Check(device, ("compute",), "compute.device", "machine",
          stages=("backbone", "profile", "train", "fuse", "evaluate", "predict")),
    Check(profile, ("profile", "model", "data", "world"), "the profile's roles, bank, layers and SVD rank",
          stages=("profile",)),
    Check(train, ("train", "model", "study"), "train.recipes and every training job's recipe", stages=("train",)),
    Check(class_descriptions, ("train", "model", "study"), "the recipes' class descriptions", "machine",
          stages=("train",)),
    Check(study_plugins, ("train", "study"), "the study's plugin methods", stages=("train",)),
    Check(plugin_names, (), "the installed plugin methods' names"),
)

# --- warnings: what runs, but not as the config reads -------------------------------

def warnings(params: Params, params_file: str) -> list[str]:
    """Fewer training images than data.shots in a class; more worker processes than this machine's CPUs."""
    from dear.methods import plugins

    found = [f"data.custom.{name}: declared but data.datasets does not list it, so it is not prepared; add it there "
             "to use it" for name in params.data.custom if name not in params.data.datasets]
    unusable = [item.problem if isinstance(item, plugins.Broken) else plugins.wrong_contract(item)
                for item in plugins.discovered() if item.name not in params.study.methods and
                (isinstance(item, plugins.Broken) or item.method.contract != plugins.CONTRACT_VERSION)]
    found += [f"{line} (installed, not used by this study)" for line in unusable]
    trained_on = dict.fromkeys(dataset for _, dataset, protocol, _ in training_jobs(params)  # targets draw no shots
                               if protocol != "few_shot")
    few = params.study.few_shot_on
    for name in few.datasets if few is not None else []:
        fewest = _fewest_train_images(params, name)
        if fewest is not None and fewest < max(few.shots):
            found.append(f"study.few_shot.shots: {max(few.shots)}, but a class of {name} has only {fewest} training "
                         "images: it gets fewer shots at the larger shot counts (the report states the shots used)")
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
    if spec is None or spec.test_only or spec.format != "coop-json" or not path.is_file():
        return None
    try:
        labels = [item[1] for item in json.loads(path.read_text()).get("train", [])]
    except (OSError, json.JSONDecodeError, AttributeError, IndexError, TypeError):
        return None  # `dear prepare` names a broken split file
    return min(Counter(labels).values()) if labels else None

