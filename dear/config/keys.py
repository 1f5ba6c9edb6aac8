"""What each job reads: the resolved values of the config that shape its outputs, key by key.

Every output records the values its job read (`dear.runtime.io.provenance`: `job.reads`,
a flat {dotted key: value}), and both engines compare that record with what the
config in use says (`dear.pipeline.stale`), so a job reruns when, and only when, a value
it reads changed, and the plan names the key. A training job reads the keys its
method's recipe took from the config (`dear.methods.recipe.resolve(...).keys_read`:
`train.recipes.all.*`, `train.recipes.<recipe>.*`, their `datasets.<dataset>` and
`transfer` blocks), so raising `train.recipes.mmrl.lr` reruns `mmrl` and nothing
else; the recipes' own defaults are package files, covered by the stage's code
hash (`dear.pipeline.jobs.code`).

Left out on purpose, as they never change an output: workers, checkpoint spacing
(`train.checkpoint_every`), the default method of `dear train` (`train.method`),
`evaluate.reuse_mb`, `data.max_listed`, `model.cache_dir` (where, not what).
`compute.reproducible` is read wherever `compute.device` is: it picks the kernels, so the floats.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from dear.runtime.io import sha256_file
from dear.config.params import Params, sanity_on


def flat(params: Params) -> dict[str, Any]:
    """{dotted key: value} of every leaf of the config (mappings flattened, lists kept whole)."""
    out: dict[str, Any] = {}

    def walk(node: Any, prefix: str) -> None:
        if isinstance(node, dict) and node:
            for key, value in node.items():
                walk(value, f"{prefix}{key}.")
        else:
            out[prefix.rstrip(".")] = node

    walk(params.model_dump(mode="json"), "")
    return out


def reads(params: Params, stage: str, method: str | None = None, dataset: str | None = None,
          classes: str = "base", shots: int | None = None) -> dict[str, Any]:
    """The values job `stage` (method x dataset x classes x shots where it has them) reads, resolved, by key."""
    values = flat(params)
    keys = STAGES[stage](params, values, method, dataset, classes)
    if shots is not None and stage == "train":  # a few-shot run: its recipe's few_shot layers for K
        recipe = params.train.recipe(method, dataset, "few_shot", shots)
        keys = ["data.seeds", "compute.device", "compute.reproducible", *recipe.keys_read]
    if shots is not None and stage == "evaluate":  # its own dataset only, with the model's own prompt
        keys = [*SCORING, "fusion.novel"]
    read = {key: values.get(key) for key in sorted(dict.fromkeys(keys))}
    return {**read, **_files_read(params, dataset)} if stage == "prepare" else read


FILE_VALUED = ("classnames", "base_classes")  # data.custom.<name>.<key>: a mapping or list, or a file holding it


def _files_read(params: Params, dataset: str | None) -> dict[str, str | None]:
    """{"data.custom.<dataset>.<key>#sha256": the file's sha256} for each FILE_VALUED key given as a file: the
    config names the file, its lines are the values, so an edited file reruns `prepare` (None: no such file)."""
    entry = params.data.custom.get(dataset) if dataset else None
    found = {}
    for key in FILE_VALUED:
        value = getattr(entry, key, None)
        if isinstance(value, str):
            found[f"data.custom.{dataset}.{key}#sha256"] = sha256_file(value) if Path(value).is_file() else None
    return found


def _under(values: dict, *prefixes: str) -> list[str]:
    return [key for key in values if any(key == p or key.startswith(p + ".") for p in prefixes)]


def _world(params, values, method, dataset, classes) -> list[str]:
    return _under(values, "world")


def _backbone(params, values, method, dataset, classes) -> list[str]:
    keys = ["model.arch", "model.pretrained", "compute.device", "compute.precision", "compute.reproducible"]
    if params.model.pretrained == "embedded":  # trained here: on the world's corpus
        keys += [key for key in _under(values, "backbone") if not key.startswith("backbone.sanity")
                 and key != "backbone.eval_batch_size"] + _under(values, "world")
    keys.append("backbone.sanity.enabled")
    if sanity_on(params):
        keys += ["backbone.sanity.max_images_per_set", "backbone.eval_batch_size", *_under(values, "world")]
    return keys


def _prepare(params, values, method, dataset, classes) -> list[str]:
    keys = [f"data.{key}" for key in ("source", "root", "seeds", "shots", "val_shots", "verify", "skip_bad",
                                      "hash_content")] + _under(values, f"data.custom.{dataset}")
    few = params.study.few_shot_on
    return keys + (["study.few_shot.shots"] if few is not None and dataset in few.datasets else [])


def _profile(params, values, method, dataset, classes) -> list[str]:
    keys = [key for key in _under(values, "profile") if not key.startswith("profile.ablation")]
    keys += ["compute.device", "compute.reproducible", "data.source", "profile.ablation.enabled"]
    ablation = params.profile.ablation.enabled and params.data.source == "embedded"
    if ablation:
        keys += ["data.root", *_under(values, "profile.ablation")]
    if ablation or params.profile.text_bank == "world":  # the world's own vocabulary
        keys += _under(values, "world")
    return keys


def _train(params, values, method, dataset, classes) -> list[str]:
    recipe = params.train.recipe(method, dataset, "transfer" if classes == "all" else "base_to_novel")
    return ["data.seeds", "compute.device", "compute.reproducible", *recipe.keys_read]


SCORING = ["data.seeds", "compute.device", "compute.reproducible", "evaluate.batch_size"]  # fuse and evaluate (transform, precision: the model's)


def _fuse(params, values, method, dataset, classes) -> list[str]:
    return [*SCORING, "fusion.mode", "fusion.refit_iterations"]


def _evaluate(params, values, method, dataset, classes) -> list[str]:
    keys = [*SCORING, "fusion.novel"]
    if classes == "all":  # the targets, and the prompts the method writes for their classes (any recipe's)
        transfer = params.study.transfer_on
        targets = [*transfer.cross_dataset, *transfer.domain_generalization] if transfer else []
        keys += ["study.transfer.source", "study.transfer.cross_dataset", "study.transfer.domain_generalization"]
        keys += [key for key in values if key.startswith("train.recipes.") and key.endswith(".template")
                 and (key.count(".") == 3 or any(f".datasets.{target}." in key for target in targets))]
    return keys


def _predict(params, values, method, dataset, classes) -> list[str]:
    return ["compute.device", "evaluate.batch_size", "fusion.novel"]


def _report(params, values, method, dataset, classes) -> list[str]:
    defaults = params.report.methods is None or params.report.compare is None  # the study's methods stand in
    return ["data.seeds", *_under(values, "report"), *(["study.methods"] if defaults else [])]


def _collect(params, values, method, dataset, classes) -> list[str]:
    """Which runs of the method the study has: its protocols' datasets and the seeds (not the other methods)."""
    return ["data.seeds", *_under(values, "study.base_to_novel", "study.transfer", "study.few_shot")]


STAGES = {"world": _world, "backbone": _backbone, "prepare": _prepare, "profile": _profile, "train": _train,
          "fuse": _fuse, "evaluate": _evaluate, "collect": _collect, "report": _report, "predict": _predict}
