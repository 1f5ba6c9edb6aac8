"""`dear evaluate`: counts of correct test predictions, per class, for the paper's protocols.

- base-to-novel (a model trained on a dataset's base classes): its test split,
  base classes with the fused logits, novel classes with the CLS stream alone
  (`fusion.novel: cls`, MMRL's decoupled inference) or the fused logits;
- few-shot learning (`--shots K`, a model trained on K shots of every class):
  its dataset's test split, all classes, fused (seen), as protocol few_shot_<K>;
- cross-dataset and domain generalization (a model trained on all classes of
  the source): the source's own test split and every target's, each over the
  target's own class list and its own prompt (the method's recipe at that
  dataset: MMRL and zero-shot CLIP score each target with its own template) -
  so ImageNet-A/-R are scored on their 200 classes. Which logits predict is
  the method's (`MethodModel.output`): the source itself (seen) fused, the
  targets (unseen) by its rule (MMRL: CLS alone; DeAR: `fusion.novel`).
  Before each dataset the model is handed its recipe at that dataset
  (`MethodModel.for_dataset`: MMRL++ takes each target's BETA, as its
  authors' test script does).

Besides the method's output, every stream's own predictions are counted
(stream `cls`, each attribute concept, MMRL's `rep`), so the report can show
what each attribute stream learned, and so are the fused logits on every
target (stream `fused`): with `fusion.novel: cls` the unseen classes are
then scored both ways in this one pass (SPEC §6). Every count comes with
the per-image hits the report's paired bootstrap needs.

Images of each target are encoded once; text features once per class list.
A method scores only the class lists it can (`MethodModel.can_score`): a
linear probe has no rows for novel classes or another dataset's, so those
targets get no rows (the report shows "—" and says why).
Writes `eval.parquet` (dear.scoring.results.EVAL_SCHEMA: correct, total per class)
and `metrics.json` (the run's percentages, computed from those counts).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import torch

from dear.scoring import evaluation
from dear.data.manifest import read_manifest
from dear.errors import DearError
from dear.runtime.io import output_folder, provenance, read_json, sha256_json, write_json
from dear.methods import entry
from dear.model.clip import load_backbone
from dear.methods.trained import load_trained, read_trained
from dear.config.params import Params
from dear.scoring.results import FUSED, OUTPUT, eval_frame, few_shot_protocol, run_metrics, write_eval

log = logging.getLogger("dear.evaluate")


@dataclass(frozen=True)
class Inputs:
    model: Path  # model.pt of `dear train`
    fusion: Path  # fusion.json of `dear fuse`
    backbone: Path
    roles: Path | None
    source: Path  # data/<source>: the dataset the model was trained on
    classes: str  # base: base-to-novel | all: cross-dataset / domain generalization
    data: Path  # folder of prepared datasets: transfer targets are data/<target> (study.* in params)
    method: str | None = None  # the method the model must be of (None: any)
    shots: int | None = None  # few-shot learning: the model's K; its own test split, all classes (few_shot_<K>)


@dataclass(frozen=True)
class Outputs:
    folder: Path  # gets eval.parquet and metrics.json
    FILES: ClassVar[tuple[str, ...]] = ("eval.parquet", "metrics.json")


@dataclass(frozen=True)
class Target:
    """One evaluated image set: which protocol/split it reports and whether its classes were trained on."""

    protocol: str
    name: str
    split: str  # base | novel | all
    images: evaluation.ImageSet
    seen: bool  # the classes and images the model was trained on (base classes; the transfer source)


def run(params: Params, inputs: Inputs, outputs: Outputs) -> None:
    record = read_trained(inputs.model)
    alpha = _alpha(inputs.fusion)
    targets = _targets(params, inputs)  # checks every input before the model is built
    backbone = load_backbone(inputs.backbone)
    model, precision = evaluation.prepared(load_trained(inputs.model, backbone, inputs.roles, params, inputs.method),
                                           params.compute)
    transform = evaluation.eval_transform(model)
    sha = backbone.card.get("sha256")  # the next seed's model shares these weights: its frozen blocks are reused
    reuse = evaluation.Reuse(sha, params.evaluate.reuse_mb) if sha else None
    rows, encoded = [], {}
    for target in targets:
        if not model.can_score(target.images.classnames):  # a linear probe on classes it was not fitted on
            log.info("%s: %s %s %s not scored: %s", model.name, target.protocol, target.name, target.split,
                     entry(model.name).scores or "the method has no logits for these classes")
            continue
        model.for_dataset(_recipe_at(params, model, target.name))
        key = (target.name, target.split)
        if key not in encoded:  # the source's own test images serve both transfer protocols
            encoded[key] = evaluation.encode_images(model, target.images, transform, params.evaluate.batch_size,
                                                    params.compute.workers, precision,
                                                    f"evaluate: {target.name} {target.split}", reuse)
        template = _template(params, model, target.name)
        logits = evaluation.stream_logits(model, encoded[key], target.images.classnames, template)  # [N, S+1, C]
        output = model.output(logits, alpha, target.seen, params.fusion.novel)  # [N, C]
        rows += _rows(record, inputs.source.name, target, OUTPUT, output)
        # what the method does on seen classes, here on every class: unseen ones under the other inference too
        rows += _rows(record, inputs.source.name, target, FUSED, model.output(logits, alpha, True, params.fusion.novel))
        for index, stream in enumerate(model.stream_names()):
            rows += _rows(record, inputs.source.name, target, stream, logits[:, index])
    made_by = provenance({"fusion": params.fusion, "evaluate": params.evaluate},
                         {"model": inputs.model, "fusion": inputs.fusion, **_manifests(inputs, targets)}, record["seed"])
    made_by["test_images_sha256"] = {f"{t.protocol}/{t.name}/{t.split}": sha256_json(t.images.paths) for t in targets}
    metrics = run_metrics(eval_frame(rows))
    with output_folder(outputs.folder, Outputs.FILES) as folder:
        write_eval(folder / "eval.parquet", rows, made_by)
        write_json(folder / "metrics.json", metrics)
    log.info("%s", summary(eval_frame(rows), model.name, record["seed"]))


def _template(params: Params, model, dataset: str) -> str | None:
    """The prompt the method writes for `dataset`'s classes: its recipe's template at that dataset (if it has one)."""
    if "template" not in model.recipe.settings or dataset == model.recipe.dataset:
        return None  # the model's own
    return params.train.recipe(model.name, dataset, "base_to_novel").template


def _recipe_at(params: Params, model, dataset: str):
    """The method's recipe at `dataset` in the model's protocol (`MethodModel.for_dataset`): its own where it was
    trained, else resolved there (a transfer target: the authors' test run builds the model under its config)."""
    own = model.recipe
    if dataset == own.dataset:
        return own
    return params.train.recipe(model.name, dataset, own.protocol, own.shots)


def summary(frame, method: str, seed: int) -> str:
    """A small table a person reads: accuracy per target and split, the output and every stream."""
    from dear.scoring.results import split_accuracy

    accuracy = split_accuracy(frame)
    streams = [OUTPUT] + [s for s in dict.fromkeys(accuracy["stream"]) if s != OUTPUT]
    header = f"{'target':<28} {'split':<6} " + " ".join(f"{s:>8}" for s in streams)
    lines = [f"{method} seed {seed}: top-1 (%) of the output and of each stream", header]
    for (protocol, target, split), rows in accuracy.groupby(["protocol", "target", "split"], sort=False):
        by_stream = dict(zip(rows["stream"], rows["accuracy"]))
        lines.append(f"{target:<28} {split:<6} " + " ".join(f"{by_stream.get(s, float('nan')):8.2f}" for s in streams))
    return "\n".join(lines)


def _alpha(path: Path) -> torch.Tensor:
    fusion = read_json(path)
    if "alpha" not in fusion:
        raise DearError(f"{path}: no 'alpha' in this fusion file; rerun `dear fuse`")
    return torch.tensor(fusion["alpha"], dtype=torch.float32)


def _targets(params: Params, inputs: Inputs) -> list[Target]:
    """What this run is scored on: base/novel of its source, or the source and its transfer targets."""
    source = read_manifest(inputs.source)
    name, where = inputs.source.name, inputs.source / "manifest.parquet"
    if inputs.classes == "base":
        return [Target("base_to_novel", name, subset, evaluation.image_set(source, source, "test", subset, where),
                       seen=subset == "base") for subset in ("base", "novel")]
    own = evaluation.image_set(source, source, "test", "all", where)
    if inputs.shots is not None:
        _check_few_shot_model(inputs)
        return [Target(few_shot_protocol(inputs.shots), name, "all", own, seen=True)]
    targets = []
    transfer = params.study.transfer_on
    if transfer is not None and transfer.source == name:
        for protocol, names, seen in (("cross_dataset", transfer.cross_dataset, False),
                                      ("domain_generalization", transfer.domain_generalization, False)):
            if not names and (protocol != "cross_dataset" or transfer.domain_generalization):
                continue  # a protocol without targets reports nothing (the source is still scored once)
            targets.append(Target(protocol, name, "all", own, seen=True))  # the source itself
            for target in names:
                manifest = read_manifest(inputs.data / target)
                images = evaluation.image_set(manifest, manifest, "test", "all", inputs.data / target / "manifest.parquet")
                targets.append(Target(protocol, target, "all", images, seen))
    if not targets:
        raise DearError(f"--source {inputs.source}: {name} is not study.transfer.source (or the transfer protocols "
                        "are off); use --classes base, or set study.transfer.source")
    return targets


def _check_few_shot_model(inputs: Inputs) -> None:
    """--shots K scores a model trained on K shots of every class of this dataset, nothing else."""
    record = read_trained(inputs.model)
    if inputs.classes != "all" or record.get("shots") != inputs.shots or record["dataset"] != inputs.source.name:
        raise DearError(f"--shots {inputs.shots}: {inputs.model} was trained on {record['dataset']} "
                        f"({record.get('classes')} classes, shots {record.get('shots')}), not on {inputs.shots} shots of "
                        f"every class of {inputs.source.name}; pass --classes all and the model `dear train --shots` made")


def _manifests(inputs: Inputs, targets: list[Target]) -> dict[str, Path]:
    """{"manifest:<dataset>": path} of every dataset scored: the data the numbers come from, hashed in provenance."""
    folders = {inputs.source.name: inputs.source} | {t.name: inputs.data / t.name for t in targets
                                                      if t.name != inputs.source.name}
    return {f"manifest:{name}": folder / "manifest.parquet" for name, folder in sorted(folders.items())}


def _rows(record: dict, source: str, target: Target, stream: str, logits: torch.Tensor) -> list[dict]:
    hits = evaluation.per_class_hits(logits, target.images.labels, len(target.images.classnames))
    return [
        {"method": record["method"], "source": source, "seed": record["seed"], "protocol": target.protocol,
         "target": target.name, "split": target.split, "stream": stream, "label": label, "classname": name,
         "correct": sum(right), "total": len(right), "hits": right}
        for label, (name, right) in enumerate(zip(target.images.classnames, hits))
        if right  # a class without test images is not scored
    ]
