"""What each job reads: the resolved values of the config that shape its outputs, key by key.

Every output records the values its job read (`dear.io.provenance`: `job.reads`,
a flat {dotted key: value}), and both engines compare that record with what the
config in use says (`dear.stale`), so a job reruns when, and only when, a value
it reads changed, and the plan names the key. "Resolved": a job reads the key a
value came from, so training `mmrl` on `world_objects_sketch` reads
`train.recipes.mmrl.dataset_epochs.world_objects_sketch` (its override) and not
`train.recipes.mmrl.epochs`; a key that is null where null means "fall back"
(`transfer_epochs: null`) is read as well, since setting it changes the run.

Left out on purpose, as they never change an output: workers, checkpoint spacing
(`train.checkpoint_every`), the default method of `dear train` (`train.method`),
`evaluate.reuse_mb`, `data.max_listed`, `model.cache_dir` (where, not what).

One function per stage. Training is the one the methods refactor replaces:
`_recipe` and `_method` become `dear.methods.recipe.resolve(params, method,
dataset, protocol).keys_read` (the keys) read from `flat(params)` (the values).
"""

from __future__ import annotations

from typing import Any

from dear.params import Params

TOKEN_METHODS = ("mmrl", "dear_nomask", "dear")


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
          classes: str = "base") -> dict[str, Any]:
    """The values job `stage` (method x dataset x classes where it has them) reads, resolved, by key."""
    values = flat(params)
    keys = STAGES[stage](params, values, method, dataset, classes)
    return {key: values.get(key) for key in sorted(dict.fromkeys(keys))}


def _under(values: dict, *prefixes: str) -> list[str]:
    return [key for key in values if any(key == p or key.startswith(p + ".") for p in prefixes)]


def _either(values: dict, override: str, base: str) -> str:
    """The key a value comes from: the override when the config has it, else the base key."""
    return override if override in values else base


def _world(params, values, method, dataset, classes) -> list[str]:
    return _under(values, "world")


def _backbone(params, values, method, dataset, classes) -> list[str]:
    keys = ["model.arch", "model.pretrained", "compute.device", "compute.precision"]
    if params.model.pretrained == "embedded":  # trained here: on the world's corpus
        keys += [key for key in _under(values, "backbone") if not key.startswith("backbone.sanity")
                 and key != "backbone.eval_batch_size"] + _under(values, "world")
    keys.append("backbone.sanity.enabled")
    if params.backbone.sanity.enabled:
        keys += ["backbone.sanity.max_images_per_set", "backbone.eval_batch_size", *_under(values, "world")]
    return keys


def _prepare(params, values, method, dataset, classes) -> list[str]:
    return [f"data.{key}" for key in ("source", "root", "seeds", "shots", "val_shots", "verify", "skip_bad",
                                      "hash_content")]


def _profile(params, values, method, dataset, classes) -> list[str]:
    keys = [key for key in _under(values, "profile") if not key.startswith("profile.ablation")]
    keys += ["compute.device", "data.source", "profile.ablation.enabled"]
    ablation = params.profile.ablation.enabled and params.data.source == "embedded"
    if ablation:
        keys += ["data.root", *_under(values, "profile.ablation")]
    if ablation or params.profile.text_bank == "world":  # the world's own vocabulary
        keys += _under(values, "world")
    return keys


def _train(params, values, method, dataset, classes) -> list[str]:
    keys = ["data.seeds", "compute.device", "compute.precision",
            _either(values, f"train.dataset_templates.{dataset}", "train.template"), *_method(params, values, method)]
    if method != "zeroshot":
        keys += _recipe(params, values, method, dataset, classes == "all")
    return keys


def _method(params, values, method) -> list[str]:
    """The keys that shape the adapted model of `method` (dear.model.methods.method)."""
    if method == "mmrl":
        return ["mmrl.tokens", "mmrl.start_layer", "mmrl.d_r", "dear.init_std", "train.scale"]
    keys = ["dear.d_r", "dear.init_std", "fusion.init_cls"]
    if method == "coop":
        keys.append("train.coop.init")
        if params.train.coop.init == "random":
            keys.append("train.coop.random_context")
    if method in ("dear_nomask", "dear"):
        keys += ["dear.attribute_tokens", "dear.concepts", "dear.text_tokens", "dear.start_layer",
                 "dear.text_start_layer", "dear.beta", "train.objective"]
    return keys


def _recipe(params, values, method, dataset, transfer: bool) -> list[str]:
    """The keys a training run of `method` reads: its recipe resolved for the dataset and protocol, the
    objective's weights, the augmentation and the views (dear.stages.train, dear.train.trainer)."""
    recipe, at = params.train.recipe(method), f"train.recipes.{'coop' if method == 'coop' else 'mmrl'}"
    keys = [f"{at}.{key}" for key in ("optimizer", "lr", "weight_decay", "batch_size")]
    keys += [f"{at}.momentum"] if recipe.optimizer == "sgd" else []
    epochs = _either(values, f"{at}.dataset_epochs.{dataset}", f"{at}.epochs")
    warmup = f"{at}.warmup_epochs"
    if transfer:  # the source run: its own epochs and warm-up where set (null: as base-to-novel)
        keys += [f"{at}.transfer_epochs", f"{at}.transfer_warmup_epochs"]
        epochs = epochs if recipe.transfer_epochs is None else f"{at}.transfer_epochs"
        warmup = warmup if recipe.transfer_warmup_epochs is None else f"{at}.transfer_warmup_epochs"
    keys += [epochs, warmup]
    if recipe.for_run(dataset, transfer).warmup_epochs:
        keys.append(f"{at}.warmup_lr")
    keys += [*_under(values, "train.augmentation"), "train.views"]
    if method in TOKEN_METHODS:
        keys.append("train.fade_in_epochs")
    objective = {"coop": "ce", "mmrl": "mmrl"}.get(method, params.train.objective)
    if objective != "ce":
        keys.append(_either(values, f"train.dataset_reg_weight.{dataset}", "train.reg_weight"))
    if objective == "mmrl" and method != "mmrl":  # mmrl's one stream: both ways of combining streams agree
        keys.append("train.attribute_loss")
    if objective == "mmrl":
        keys.append("train.scale")
    if objective == "fused":
        keys.append("train.lambda_fus")
    return keys


def _scoring(params, values) -> list[str]:
    """What fuse and evaluate read to score images: the test transform, the batch, the device."""
    return ["data.seeds", "compute.device", "compute.precision", "evaluate.batch_size",
            "train.augmentation.interpolation"]


def _fuse(params, values, method, dataset, classes) -> list[str]:
    keys = [*_scoring(params, values), "fusion.mode"]
    if method in ("dear_nomask", "dear"):  # the methods whose fusion `fuse` may refit
        keys.append("fusion.refit_iterations")
    return keys


def _evaluate(params, values, method, dataset, classes) -> list[str]:
    keys = [*_scoring(params, values), "fusion.novel"]
    if classes == "all":
        keys += ["study.transfer.source", "study.transfer.cross_dataset", "study.transfer.domain_generalization"]
    return keys


def _report(params, values, method, dataset, classes) -> list[str]:
    return ["data.seeds", *_under(values, "report")]


STAGES = {"world": _world, "backbone": _backbone, "prepare": _prepare, "profile": _profile, "train": _train,
          "fuse": _fuse, "evaluate": _evaluate, "report": _report}
