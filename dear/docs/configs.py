"""Blocks written from the config files: params.yaml, configs/*.yaml and the Snakemake profiles.

Every value a page shows of these files comes from here, so a changed default
changes the page (after `python -m dear.docs`) instead of leaving it wrong.
"""

from __future__ import annotations

import json

import re
import typing
from pathlib import Path
from typing import Iterator

import yaml
from pydantic import BaseModel

from dear.docs.format import code, minutes, table, value
from dear.errors import DearError
from dear.config.params import Params, load_params, read_yaml

DEMO = "params.yaml"


def config_files(root: Path) -> list[str]:
    """params.yaml (the demo) first, then every config beside it (configs/*.yaml), relative to `root`.

    Not the smoke study nor the demo's few-shot figure: they are the demo with a few keys changed, written from
    params.yaml (dear/docs/smoke.py says how).
    """
    from dear.docs.smoke import GENERATED

    configs = sorted(str(path.relative_to(root)) for path in (root / "configs").glob("*.yaml"))
    return [DEMO, *(name for name in configs if name not in GENERATED)]


def leaves(model: type[BaseModel], prefix: str) -> Iterator[tuple[str, str]]:
    """(dotted key, description) of every value under `model`; sections (null-able ones too) are walked into."""
    for name, field in model.model_fields.items():
        section = _section(field.annotation)
        if section is not None and typing.get_origin(field.annotation) is dict:  # a mapping of name -> section
            absent = code(field.get_default(call_default_factory=True))
            yield f"{prefix}{name}", f"{field.description or ''} (default when absent: {absent})"
            yield from leaves(section, f"{prefix}{name}.<name>.")
        elif section is not None:
            yield from leaves(section, f"{prefix}{name}.")
        else:
            default = "" if field.is_required() else f" (default when absent: {code(field.default)})"
            yield f"{prefix}{name}", (field.description or "") + default


def _section(annotation) -> type[BaseModel] | None:
    """The section model of a field's annotation (`Transfer` or `Transfer | None`), None for a plain value."""
    for candidate in (annotation, *typing.get_args(annotation)):
        if isinstance(candidate, type) and issubclass(candidate, BaseModel):
            return candidate
    return None


def lookup(raw: dict, key: str):
    """The value at a dotted key of a parsed YAML file; KeyError when absent."""
    node = raw
    for part in key.split("."):
        if not isinstance(node, dict):  # under a section that is null (study.transfer: null)
            raise KeyError(key)
        node = node[part]
    return node


def _keys(section: str) -> list[tuple[str, str]]:
    """(dotted key, description) of every value of a top-level key: a section's leaves, or the key itself."""
    if section not in Params.model_fields:
        raise DearError(f"docs: no params section {section!r}; one of {', '.join(Params.model_fields)}")
    field = Params.model_fields[section]
    model = _section(field.annotation)
    if model is not None:
        return list(leaves(model, f"{section}."))
    return [(section, field.description or "")]


def _shown(raw: dict, key: str) -> str:
    try:
        return code(lookup(raw, key))
    except KeyError:
        return "—"


def params_table(root: Path, section: str) -> str:
    """Every key of one section: its value in each config file and what it does."""
    files = config_files(root)
    raw = {name: read_yaml(root / name) for name in files}
    rows = [[f"`{key}`", *[_shown(raw[name], key) for name in files], text]
            for key, text in _keys(section)]
    return table(["key", *[f"`{name}`" for name in files], "what it does"], rows)


def config_diff(root: Path, config: str) -> str:
    """The keys where `config` differs from params.yaml, with both values."""
    demo, other = read_yaml(root / DEMO), read_yaml(root / config)
    rows = []
    for key, _ in leaves(Params, ""):
        mine, theirs = _shown(demo, key), _shown(other, key)
        if mine != theirs:
            rows.append([f"`{key}`", mine, theirs])
    return table(["key", f"`{DEMO}`", f"`{config}`"], rows)


def recipe_table(root: Path, method: str, source: str = "imagenet", demo_dataset: str = "world_objects") -> str:
    """One method's recipe: every key, its authors' value and where it comes from, its per-dataset and
    transfer-source variants (each with its file), and the demo's value where params.yaml changes it."""
    from dear.methods import entry
    from dear.methods.recipe import load, resolve

    spec = load(entry(method).recipe)
    base = resolve({}, method, "", "base_to_novel")  # no dataset layer
    transfer = resolve({}, method, source, "transfer")
    demo = resolve(load_params(root / DEMO).train.recipes, method, demo_dataset, "base_to_novel")
    rows = []
    for key, setting in base.settings.items():
        variants = []
        for dataset in spec.datasets:
            own = resolve({}, method, dataset, "base_to_novel").settings[key]
            if own.value != setting.value:
                variants.append(f"{dataset}: {_value(own.value)} ({_file(own.source)})")
        moved = transfer.settings[key]
        if moved.value != resolve({}, method, source, "base_to_novel").settings[key].value:
            variants.append(f"transfer source: {_value(moved.value)} ({_file(moved.source)})")
        scored = {ds: resolve({}, method, ds, "transfer").settings[key] for ds in spec.transfer_datasets if ds != source}
        targets = {ds: s for ds, s in scored.items() if s.value != moved.value}
        if targets:  # values a target is scored with (MMRL++'s BETA): `dear evaluate` hands the model its recipe there
            variants.append("transfer targets: " + ", ".join(f"{ds} {_value(s.value)}" for ds, s in targets.items())
                            + f" ({_file(next(iter(targets.values())).source)})")
        yours = resolve({}, method, "", "base_to_novel", own=True).settings[key]
        if yours.value != setting.value:
            variants.append(f"a dataset of your own: {_value(yours.value)} ({yours.kind}: "
                            "[docs/your-data.md](your-data.md#training-lengths))")
        mine = demo.settings[key]
        rows.append([f"`{key}`", _value(setting.value), f"{setting.kind}: {_file(setting.source)}",
                     "; ".join(variants) or "—", _value(mine.value) if mine.differs or mine.kind == "ours" else "="])
    return table(["key", "value", "source", "per dataset / protocol", f"`{DEMO}` ({demo_dataset})"], rows)


def _value(value) -> str:
    return f"`{json.dumps(value)}`"


def _file(source: str) -> str:
    """A source without its repository prefix when it names one (`owner/repo@commit path ...` -> `path ...`)."""
    head, _, rest = source.partition(" ")
    return f"{head.split('@')[0].split('/')[-1]}: {rest}" if "@" in head and rest else source


def study(root: Path, name: str = DEMO) -> str:
    """One sentence: what the pipeline runs with this config file."""
    params = load_params(root / name)
    s, transfer = params.study, params.study.transfer_on
    parts = [f"{len(s.methods)} methods ({', '.join(s.methods)}) × {len(params.data.seeds)} seeds "
             f"({', '.join(map(str, params.data.seeds))}), {params.data.shots} shots per class: "
             + (f"base-to-novel on {', '.join(s.base_to_novel)}" if s.base_to_novel else "no base-to-novel")]
    if transfer is not None and transfer.cross_dataset:
        parts.append(f"cross-dataset from {transfer.source} to {', '.join(transfer.cross_dataset)}")
    if transfer is not None and transfer.domain_generalization:
        parts.append(f"domain generalization from {transfer.source} to {', '.join(transfer.domain_generalization)}")
    few = s.few_shot_on
    if few is not None:
        parts.append(f"few-shot learning on all classes of {', '.join(few.datasets)} with "
                     f"{', '.join(map(str, few.shots))} shots")
    model = f"`{params.model.arch}` (weights: `{params.model.pretrained}`)"
    return f"`{name}` adapts {model} with " + "; ".join(parts) + "."


FEW_SHOT_COUNTS = (1, 2, 4, 8, 16)


def few_shot_recipes(root: Path) -> str:
    """Every training method's few-shot recipe: the values its few_shot layers set per shot count, their source,
    and the datasets where they differ (as its recipe file gives them, before any config's changes)."""
    from dear.methods import REGISTRY, entry
    from dear.methods.recipe import load, resolve

    rows = []
    for method in REGISTRY:
        spec = load(entry(method).recipe)
        if not spec.trains or entry(method).plain:  # a `+roles` variant: its plain method's recipe
            continue
        few = spec.few_shot
        layers = [*few.recipe, *(layer for k in sorted(few.shots) for layer in few.shots[k])]
        keys = list(dict.fromkeys(key for layer in layers for key in layer.values))
        runs = {k: resolve({}, method, "", "few_shot", k) for k in FEW_SHOT_COUNTS}
        values = []
        for key in keys:
            per_k = [runs[k].settings[key].value for k in FEW_SHOT_COUNTS]
            values.append(f"{key} {_value(per_k[0])}" if len(set(map(json.dumps, per_k))) == 1 else
                          f"{key} " + " / ".join(_value(v) for v in per_k) + " (1 / 2 / 4 / 8 / 16 shots)")
        kinds = sorted({layer.kind for layer in layers})
        sources = list(dict.fromkeys(_file(layer.source) for layer in layers))
        datasets = [f"{ds}: " + ", ".join(f"{k} {_value(v)}" for layer in layers_ for k, v in layer.values.items())
                    for ds, layers_ in few.datasets.items()]
        rows.append([f"**{method}**", "; ".join(values) or "its base-to-novel recipe",
                     f"{'/'.join(kinds)}: " + "; ".join(sources) if sources else "—", "; ".join(datasets) or "—"])
    return table(["method", "few-shot values (the rest: its base-to-novel recipe)", "source", "per dataset"], rows)


WHAT = {"object": "the object", "color": "background colour", "texture": "background texture",
        "shape": "the outlined shape next to the object", "position": "grid cell of the object"}


def world_datasets(root: Path) -> str:
    """The embedded datasets params.yaml's world draws: classes, what a class is, images per split."""
    from dear.data.world import RARE_SET, dataset_names, dataset_specs

    params = load_params(root / DEMO)
    world = params.world
    drawn = set(dataset_names(world))
    rows = []
    for spec in dataset_specs(world, every_attribute_set=True):
        what = WHAT[spec.label_attribute] + (", drawn as grey line art" if spec.style == "sketch" else "")
        if spec.name == RARE_SET:
            what += ", rarely named in the captions"
        rows.append(_world_row(spec.name, len(spec.classnames), what, spec.per_class, spec.name in drawn, params))
    if RARE_SET not in drawn:
        rows.insert(3, _world_row(RARE_SET, 0, "the object, rarely named in the captions",
                                  tuple(world.objects_split), False, params))
    from dear.data.world_emoji import catalog

    header = ["dataset", "classes", "a class is", "train / val / test per class", "drawn", "in the demo study"]
    return (table(header, rows) + f"\n\nThe object classes are a seeded draw from the {len(catalog()):,} usable "
            "OpenMoji emoji, disjoint between `world_objects`, `world_objects_b` and `world_objects_rare`.")


def _world_row(name: str, classes: int, what: str, split: tuple, drawn: bool, params: Params) -> list[str]:
    return [f"`{name}`", str(classes) if classes else "—", what, " / ".join(map(str, split)),
            "yes" if drawn else "no", _role(name, params)]


def _role(name: str, params: Params) -> str:
    transfer = params.study.transfer_on
    roles = [label for label, used in (
        ("base-to-novel", name in params.study.base_to_novel),
        ("transfer source", transfer is not None and name == transfer.source),
        ("cross-dataset target", transfer is not None and name in transfer.cross_dataset),
        ("domain-generalization target", transfer is not None and name in transfer.domain_generalization),
        ("profiled (head roles)", name == params.profile.dataset),
    ) if used]
    return ", ".join(roles) or "—"


PROFILES = "workflow/profiles"
ATTEMPT = re.compile(r"^\s*(\d+)\s*\*\s*attempt\s*$")


def _profile(root: Path, name: str) -> dict:
    return yaml.safe_load((root / PROFILES / name / "config.yaml").read_text())


def slurm_resources(root: Path) -> str:
    """What the slurm profile asks for per rule at attempt 1, and how a resubmission grows."""
    resources = _profile(root, "slurm")["set-resources"]
    rows, grows = [], set()
    for rule, asks in resources.items():
        memory, mem_grows = _attempt_1(asks.get("mem_mb"))
        runtime, time_grows = _attempt_1(asks.get("runtime"))
        grows |= {"memory"} if mem_grows else set()
        grows |= {"time limit"} if time_grows else set()
        rows.append([rule, str(asks.get("gpu", "—")), f"{memory / 1000:g} GB" if memory else "—",
                     minutes(runtime) if runtime else "—", str(asks.get("cpus_per_task", "—"))])
    text = table(["rule", "GPU", "memory", "time limit", "CPUs"], rows)
    if grows:
        text += (f"\n\nAttempt *n* of a job asks *n* times the {' and the '.join(sorted(grows))} of attempt 1 "
                 f"(`{PROFILES}/slurm/config.yaml`).")
    return text


def _attempt_1(expression) -> tuple[int | None, bool]:
    """(value at attempt 1, grows with the attempt) of a resource: 120, or '120 * attempt'."""
    if expression is None:
        return None, False
    if isinstance(expression, int):
        return expression, False
    match = ATTEMPT.match(str(expression))
    if not match:
        raise DearError(f"docs: resource {expression!r} of the slurm profile is not N or 'N * attempt'; "
                        "teach dear/docs/configs.py to show it")
    return int(match[1]), True


def profiles(root: Path) -> str:
    """The Snakemake profiles side by side: where jobs run, how many, retries, on failure."""
    rows = []
    for folder in sorted((root / PROFILES).iterdir()):
        config = _profile(root, folder.name)
        rows.append([f"`{folder.name}`", config.get("executor", "local"),
                     str(config.get("jobs", config.get("cores", "—"))), str(config.get("retries", 0)),
                     value(config.get("keep-going", False)), value(config.get("rerun-incomplete", False))])
    return table(["profile", "executor", "jobs (or cores) at once", "retries", "keep-going", "rerun-incomplete"],
                 rows)
