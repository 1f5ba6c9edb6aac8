"""`dear recipe`: the resolved recipe of every training job a config runs, with the source of every value.

It reads the same objects the trainer reads (`Train.recipe`, `dear.methods.prompts`)
and never imports torch, so it answers in about a second even for the paper
config's 100-odd jobs. Values of ours that replace the authors' are marked
and show the authors' value beside them.
"""

from __future__ import annotations

import json
from pathlib import Path

from dear.errors import DearError
from dear.methods import entry
from dear.methods import prompts as prompt_forms
from dear.methods.layers import Resolved
from dear.methods.layers import resolve as resolve_layers
from dear.methods.recipe import Recipe, lengthened, load, steps_per_epoch
from dear.config.params import Params

EXAMPLES = ["golden_retriever", "sea_lion"]  # when the dataset's classes cannot be read (not on this machine)


def jobs(params: Params, method: str | None, dataset: str | None, protocol: str | None) -> list[Recipe]:
    """The recipes of the study's training jobs (method x dataset x protocol), filtered."""
    from dear.config.check import training_jobs

    if method is not None:
        entry(method)
    picked = [(m, d, p, k) for m, d, p, k in training_jobs(params)
              if (method is None or m == method) and (dataset is None or d == dataset)
              and (protocol is None or p == protocol)]
    if not picked:
        raise DearError(f"no training job of this config matches --method {method} --dataset {dataset} "
                        f"--protocol {protocol}; `dear recipe` without filters lists them all")
    return [params.train.recipe(m, d, p, k) for m, d, p, k in picked]


def example_classes(params: Params, dataset: str) -> tuple[list[str], bool]:
    """Two of `dataset`'s own base classes, and whether they are its own (else two example names).

    From its manifest when prepared, else from what defines its classes (`dear.data.names`).
    """
    manifest = Path(params.output_root) / "data" / dataset / "manifest.parquet"
    if manifest.is_file():
        import pyarrow.parquet as pq

        table = pq.read_table(manifest, columns=["subset", "subset_label", "classname"]).to_pylist()
        names = dict(sorted((row["subset_label"], row["classname"]) for row in table if row["subset"] == "base"))
        return [names[k] for k in sorted(names)[:2]], True
    from dear.data.names import base_names

    names = base_names(params, dataset)
    return (names[:2], True) if names else (EXAMPLES, False)


def resolved_layers(params: Params, recipe: Recipe) -> list[Resolved]:
    """The recipe's layer keys on the config's model (`dear.methods.layers`): which layers each covers."""
    from dear.config.check import tower_depths
    from dear.compute.probe import arch_config

    return resolve_layers(recipe.recipe, recipe.values, tower_depths(arch_config(params.model.arch) or {}))


def trained_length(params: Params, recipe: Recipe) -> str | None:
    """What `min_steps` makes of the epochs: on the prepared shots of the config's first seed (`dear train` raises
    them, `dear.methods.recipe.lengthened`), else the rule; None without min_steps."""
    if recipe.get("min_steps") is None or recipe.get("epochs") is None:
        return None
    rule = (f"min_steps {recipe.min_steps}: the epochs are raised until a run takes at least {recipe.min_steps} "
            "optimizer steps")
    images = prepared_shots(params, recipe)
    if images is None:
        return f"{rule} (how many: once `dear prepare` has picked the shots)"
    longer = lengthened(recipe, images)
    steps = longer.epochs * steps_per_epoch(images, recipe.batch_size)
    return (f"{rule}: on its {images} prepared training shots (seed {params.data.seeds[0]}), {longer.epochs} epochs "
            f"of {steps_per_epoch(images, recipe.batch_size)} step(s), {steps} steps")


def prepared_shots(params: Params, recipe: Recipe) -> int | None:
    """The training shots a run of `recipe` reads on the config's first seed, when `prepare` wrote them."""
    import pyarrow.parquet as pq

    seed = params.data.seeds[0]
    name = f"fewshot-shots{recipe.shots}-seed{seed}" if recipe.shots is not None else f"fewshot-seed{seed}"
    path = Path(params.output_root) / "data" / recipe.dataset / f"{name}.parquet"
    if not path.is_file():
        return None
    rows = pq.read_table(path, columns=["subset", "fewshot_split"]).to_pylist()
    base_only = recipe.protocol == "base_to_novel"
    return sum(row["fewshot_split"] == "train" and (not base_only or row["subset"] == "base") for row in rows)


def prompts_of(recipe: Recipe, classes: list[str]) -> list[str]:
    form = load(recipe.recipe).prompt
    built = [prompt_forms.of_recipe(form, recipe.values, name) for name in classes]
    return [prompt.shown for prompt in built if prompt is not None]


def as_text(params: Params, recipes: list[Recipe], source: str) -> str:
    lines = [f"{source}: {len(recipes)} training job(s). Source of each value: the authors' file, the paper, or "
             "ours (a config key, or our choice); '*' marks a value of ours replacing the authors'."]
    for recipe in recipes:
        spec = load(recipe.recipe)
        shots = f", {recipe.shots} shot{'s' if recipe.shots != 1 else ''}" if recipe.shots is not None else ""
        roles = " + DeAR's head roles (dear/methods/recipes/roles.yaml)" if entry(recipe.method).plain else ""
        lines += ["", f"{recipe.method} on {recipe.dataset} ({recipe.protocol.replace('_', '-')}{shots}): {spec.title}"
                      f"{roles}"]
        width = max(len(key) for key in recipe.settings)
        for key, setting in recipe.settings.items():
            value = json.dumps(setting.value)
            mark = "*" if setting.differs else " "
            note = f" (authors: {json.dumps(setting.authors)})" if setting.differs else ""
            lines.append(f"  {mark}{key:<{width}}  {value:<24} {setting.kind}: {setting.source}{note}")
        trained = trained_length(params, recipe)
        if trained:
            lines.append(f"   {trained}")
        layers = resolved_layers(params, recipe)
        if layers:
            lines.append(f"   layers on {params.model.arch}: " + "; ".join(
                layer.shown() + (f" ({layer.problem})" if layer.problem else "") for layer in layers))
        classes, own = example_classes(params, recipe.dataset)
        shown = prompts_of(recipe, classes)
        if shown:
            lines.append(f"   prompt{'' if own else ' (example names)'}: " + "  |  ".join(shown))
    return "\n".join(lines)


def as_json(params: Params, recipes: list[Recipe]) -> str:
    rows = []
    for recipe in recipes:
        classes, own = example_classes(params, recipe.dataset)
        layers = {layer.key: {"value": layer.value, "problem": layer.problem,
                              "layers": {tower: list(span) for tower, span in layer.layers.items()}}
                  for layer in resolved_layers(params, recipe)}
        rows.append({**recipe.to_dict(), "prompts": prompts_of(recipe, classes), "example_classes_own": own,
                     "layers": layers})
    return json.dumps(rows, indent=1, default=str)
