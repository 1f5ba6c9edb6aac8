"""`dear train`: adapt CLIP with one method on one dataset's base-class shots, resumably.

Reads the backbone folder, the few-shot table (the training shots of the
base classes, or of all classes with `--classes all`: the cross-dataset
source) and, for `dear`, the roles table; writes into the output folder
`model.pt` (learnable tensors + what rebuilds the model, see
`dear.model.trained`) and `train_log.parquet` (TRAIN_LOG_SCHEMA). The
resumable checkpoint lives at `Outputs.checkpoint`, outside the declared
outputs, and is removed once both outputs are written. `zeroshot` trains
nothing and writes the same two files (an empty log).
"""

from __future__ import annotations

import hashlib
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import pyarrow as pa

from dear.errors import DearError
from dear.io import check_output_file, output_folder, provenance, sha256_file, sha256_json, versions, write_parquet
from dear.model import internals as oc
from dear.model.dear import Adapted
from dear.model.losses import Weights
from dear.model.methods import Method, method
from dear.model.trained import backbone_sha256, read_roles, save_trained
from dear.params import Params
from dear.train import trainer
from dear.train.data import check_images_exist, training_shots

log = logging.getLogger("dear.train")

TRAIN_LOG_SCHEMA = pa.schema([
    pa.field("step", pa.int64(), nullable=False),
    pa.field("epoch", pa.int64(), nullable=False),
    pa.field("loss", pa.float64(), nullable=False),  # the objective that was minimized
    pa.field("loss_cls", pa.float64(), nullable=False),  # CE of the CLS stream
    pa.field("loss_attr", pa.float64(), nullable=False),  # CE of the attribute / representation streams
    pa.field("loss_fused", pa.float64(), nullable=False),  # CE of the fused logits
    pa.field("loss_img", pa.float64(), nullable=False),
    pa.field("loss_txt", pa.float64(), nullable=False),
    pa.field("loss_fus", pa.float64(), nullable=False),
    pa.field("accuracy", pa.float64(), nullable=False),  # % of the batch right by the base-class output
    pa.field("lr", pa.float64(), nullable=False),
    pa.field("fade", pa.float64(), nullable=False),  # the tokens' fade-in weight in this step (1: full; train.fade_in_epochs)
    pa.field("alpha", pa.list_(pa.float64()), nullable=False),  # [S+1], alpha_0 = CLS stream
    pa.field("seconds", pa.float64(), nullable=False),  # wall time since the run began (resumes add up)
])


@dataclass(frozen=True)
class Inputs:
    method: str | None  # zeroshot | coop | mmrl | dear_nomask | dear; None = train.method
    dataset: str  # picks train.dataset_templates[dataset] when present
    seed: int  # seeds the learnable parts' init and every batch/augmentation draw
    backbone: Path  # folder of `dear backbone` (model.pt + card.json)
    fewshot: Path  # data/<ds>/fewshot-seed<S>.parquet
    roles: Path | None  # roles/<ds>/roles.parquet; needed by `dear` only
    classes: str = "base"  # base: base classes (base-to-novel) | all: every class (transfer source)


@dataclass(frozen=True)
class Outputs:
    folder: Path  # gets model.pt and train_log.parquet
    checkpoint: Path | None  # resumable state, outside the declared outputs; None = default_checkpoint(folder, output_root)
    FILES: ClassVar[tuple[str, ...]] = ("model.pt", "train_log.parquet")


def default_checkpoint(out: Path, root: str = ".") -> Path:
    """<output_root>/checkpoints/<output folder below the root>/ckpt.pt: one per output folder.

    Parallel runs never share one, and each config's checkpoints stay under its
    own output root, beside (never inside) the outputs a pipeline engine deletes.
    """
    resolved = Path(out).resolve()
    try:
        relative = resolved.relative_to(Path(root).resolve())
    except ValueError:  # an output outside the root: a stable name from its absolute path
        relative = Path("outside-" + hashlib.sha256(str(resolved).encode()).hexdigest()[:16])
    return Path(root) / "checkpoints" / relative / "ckpt.pt"


def run(params: Params, inputs: Inputs, outputs: Outputs) -> None:
    from dear.model.clip import load_backbone

    spec = method(inputs.method or params.train.method, params)
    checkpoint = outputs.checkpoint or default_checkpoint(outputs.folder, params.output_root)
    check_output_file(checkpoint)
    template = _template(params, inputs.dataset)
    if inputs.classes not in ("base", "all"):
        raise DearError(f"--classes: {inputs.classes!r} is not a class subset to train on; use base or all")
    shots = training_shots(inputs.fewshot, inputs.classes)
    if spec.trains:
        check_images_exist(shots, inputs.fewshot)
    backbone = load_backbone(inputs.backbone)
    sha = backbone_sha256(backbone, inputs.backbone)
    roles, roles_sha = None, None
    if spec.role_masks:
        if inputs.roles is None:
            raise DearError("--roles: method dear needs the roles table of `dear profile`; pass --roles PATH")
        roles, roles_sha = read_roles(inputs.roles, backbone, sha), sha256_file(inputs.roles)
    model = Adapted(backbone.model, backbone.tokenizer, spec, template, roles, seed=inputs.seed)
    run_hash = _run_hash(params, spec, inputs, sha, roles_sha)
    rows = []
    if spec.trains:
        train = params.train
        recipe = train.recipe(spec.name).for_run(inputs.dataset, transfer=inputs.classes == "all")
        rows = trainer.fit(trainer.Run(
            model=model, shots=shots, params=train, recipe=recipe, compute=params.compute,
            epochs=recipe.epochs,
            weights=Weights(scale=train.scale, reg=train.reg_weight_of(inputs.dataset), fus=train.lambda_fus,
                            attribute_loss=train.attribute_loss),
            seed=inputs.seed, image_size=oc.image_size(backbone.model),
            normalization=oc.image_normalization(backbone.model), checkpoint=checkpoint, params_hash=run_hash))
    record = {"backbone_sha256": sha, "roles_sha256": roles_sha, "params_sha256": run_hash,
              "dataset": inputs.dataset, "seed": inputs.seed, "classes": inputs.classes, "classnames": shots.classnames}
    used = {"backbone": Path(inputs.backbone) / "card.json", "fewshot": inputs.fewshot}  # the card holds the weights' sha256
    if spec.role_masks:
        used["roles"] = inputs.roles
    made_by = provenance(_sections(params), used, inputs.seed)
    made_by["shots_per_class"] = shots.per_class()  # what the report states as the shots used
    with output_folder(outputs.folder, Outputs.FILES) as folder:
        write_parquet(folder / "train_log.parquet", _log_table(rows), TRAIN_LOG_SCHEMA, made_by)
        save_trained(folder / "model.pt", model, {**record, "provenance": made_by})
    checkpoint.unlink(missing_ok=True)
    log.info("%s", summary(spec.name, inputs.dataset, inputs.seed, rows, outputs.folder))


def summary(name: str, dataset: str, seed: int, rows: list[dict], folder: Path) -> str:
    """One line a person reads: steps, final loss and training accuracy (last epoch's mean), time."""
    if not rows:
        return f"{name} on {dataset} seed {seed}: nothing to train -> {folder}"
    last = [row for row in rows if row["epoch"] == rows[-1]["epoch"]]
    loss = sum(row["loss"] for row in last) / len(last)
    accuracy = sum(row["accuracy"] for row in last) / len(last)
    return (f"{name} on {dataset} seed {seed}: {len(rows)} steps in {rows[-1]['seconds']:.0f} s; last epoch: "
            f"loss {loss:.3f} (first step {rows[0]['loss']:.3f}), training accuracy {accuracy:.1f}% -> {folder}")


def _sections(params: Params) -> dict:
    """The params sections that shape a trained model."""
    return {"dear": params.dear, "mmrl": params.mmrl, "train": params.train, "fusion": params.fusion,
            "compute": params.compute}


def _template(params: Params, dataset: str) -> str:
    template = params.train.dataset_templates.get(dataset, params.train.template)
    if template.count("{}") != 1:
        raise DearError(f"params: prompt template {template!r} must hold exactly one {{}} for the class name")
    return template


def _run_hash(params: Params, spec: Method, inputs: Inputs, backbone_sha: str, roles_sha: str | None) -> str:
    """Hash of everything that shapes the trained tensors (not workers or checkpoint spacing)."""
    train = params.train.model_dump(mode="json")
    for key in ("method", "checkpoint_every"):
        train.pop(key)
    compute = params.compute.model_dump(mode="json", exclude={"workers"})
    return sha256_json({
        "method": spec.to_dict(), "train": train, "mmrl": params.mmrl.model_dump(mode="json"), "compute": compute,
        "dataset": inputs.dataset, "seed": inputs.seed, "classes": inputs.classes,
        "backbone": backbone_sha, "roles": roles_sha, "fewshot": sha256_file(inputs.fewshot),
        "dear_version": versions()["dear"],
    })


def _log_table(rows: list[dict]) -> pa.Table:
    columns = {field.name: [row[field.name] for row in rows] for field in TRAIN_LOG_SCHEMA}
    return pa.table({name: pa.array(values, TRAIN_LOG_SCHEMA.field(name).type) for name, values in columns.items()})
