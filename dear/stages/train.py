"""`dear train`: adapt CLIP with one method on one dataset's base-class shots, resumably.

Reads the backbone folder, the few-shot table (the training shots of the
base classes, or of all classes with `--classes all`: the transfer source)
and, for `dear` and the `+roles` variants, the roles table. The run's recipe is resolved once
(`train.recipes` over the method's authors' recipe, for this dataset and
protocol) and is what the trainer reads. Writes into the output folder
`model.pt` (learnable tensors + the method's name and resolved recipe, see
`dear.methods.trained`) and `train_log.parquet` (`train_log_schema`: the
method's own loss terms as loss_<term> columns). The resumable checkpoint
lives at `Outputs.checkpoint`, outside the declared outputs, and is removed
once both outputs are written. `zeroshot` trains nothing and writes the same
two files (an empty log); `linear_probe` fits its classifier on the shots'
frozen features (dear/train/features.py), also with an empty log: its C
search is in model.pt. A method that `searches_validation` (Tip-Adapter-F)
trains, then chooses on the validation shots' features what its authors
search after training; the choice is in model.pt.
"""

from __future__ import annotations

import hashlib
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import pyarrow as pa

from dear.errors import DearError
from dear.runtime.io import check_output_file, output_folder, provenance, sha256_file, sha256_json, versions, write_parquet
from dear.methods.recipe import FEWEST_STEPS, lengthened
from dear.model import internals as oc
from dear.methods.trained import backbone_sha256, read_roles, save_trained
from dear.config.params import Params
from dear.train import features, trainer
from dear.train.data import check_images_exist, training_shots

log = logging.getLogger("dear.train")

TRAIN_LOG_SCHEMA = pa.schema([  # the columns of every method; its own loss terms follow `loss` (train_log_schema)
    pa.field("step", pa.int64(), nullable=False),
    pa.field("epoch", pa.int64(), nullable=False),
    pa.field("loss", pa.float64(), nullable=False),  # the objective that was minimized
    pa.field("accuracy", pa.float64(), nullable=False),  # % of the batch right by the method's seen-class output
    pa.field("lr", pa.float64(), nullable=False),
    pa.field("fade", pa.float64(), nullable=False),  # the tokens' fade-in weight in this step (1: full; recipe fade_in_epochs)
    pa.field("alpha", pa.list_(pa.float64()), nullable=False),  # [S+1], alpha_0 = CLS stream
    pa.field("seconds", pa.float64(), nullable=False),  # wall time since the run began (resumes add up)
])


def train_log_schema(terms: tuple[str, ...]) -> pa.Schema:
    """The log's columns for a method whose loss has `terms` (MethodModel.TERMS): loss_<term> after `loss`."""
    fields = list(TRAIN_LOG_SCHEMA)
    after = TRAIN_LOG_SCHEMA.get_field_index("loss") + 1
    own = [pa.field(f"loss_{term}", pa.float64(), nullable=False) for term in terms]
    return pa.schema([*fields[:after], *own, *fields[after:]])


@dataclass(frozen=True)
class Inputs:
    method: str | None  # a registered method (dear.methods.REGISTRY); None = train.method
    dataset: str  # the recipe's dataset layers (REG_WEIGHT, prompt template, ...) are this dataset's
    seed: int  # seeds the learnable parts' init and every batch/augmentation draw
    backbone: Path  # folder of `dear backbone` (model.pt + card.json)
    fewshot: Path  # data/<ds>/fewshot-seed<S>.parquet
    roles: Path | None  # roles/<ds>/roles.parquet; needed by `dear` and the `+roles` variants only
    classes: str = "base"  # base: base classes (base-to-novel) | all: every class (transfer source)
    shots: int | None = None  # few-shot learning: K shots per class of every class (--classes all), the recipe's K


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
    from dear.methods import create, descriptions, entry
    from dear.model.clip import load_backbone

    name = inputs.method or params.train.method
    try:
        entry(name)
    except DearError as err:
        raise DearError(f"--method: {err}") from None
    if inputs.classes not in ("base", "all"):
        raise DearError(f"--classes: {inputs.classes!r} is not a class subset to train on; use base or all")
    recipe = params.train.recipe(name, inputs.dataset, protocol(inputs.classes, inputs.shots), inputs.shots)
    checkpoint = outputs.checkpoint or default_checkpoint(outputs.folder, params.output_root)
    check_output_file(checkpoint)
    shots = training_shots(inputs.fewshot, inputs.classes)
    _check_shot_count(inputs, shots)
    recipe = lengthened(recipe, len(shots.paths))  # min_steps (datasets of one's own): epochs raised to reach it
    backbone = load_backbone(inputs.backbone)
    sha = backbone_sha256(backbone, inputs.backbone)
    roles, roles_sha = None, None
    if entry(name).reads_roles:  # dear, and every `+roles` variant
        if inputs.roles is None:
            raise DearError(f"--roles: method {name} needs the roles table of `dear profile`; pass --roles PATH")
        roles, roles_sha = read_roles(inputs.roles, backbone, sha), sha256_file(inputs.roles)
    model = create(name, backbone, recipe, roles, seed=inputs.seed)
    run_hash = _run_hash(params, name, recipe, inputs, sha, roles_sha)
    rows = []
    if model.fits_features:  # the linear probe: a classifier fitted on the shots' frozen features, no steps
        check_images_exist(shots, inputs.fewshot)
        found = features.fit(model, shots, inputs.fewshot, inputs.classes, params.compute, params.evaluate.batch_size,
                             f"train {name}")
        log.info("%s on %s: C %.4g of %d tried on the validation shots (accuracy %.1f%%)", name, inputs.dataset,
                 found.c, len(found.tried), 100 * dict(found.tried)[found.c])
    elif model.trains:
        check_images_exist(shots, inputs.fewshot)
        val = features.search_shots(model, shots, inputs.fewshot, inputs.classes) if model.searches_validation else None
        log.info("%s on %s (%s): %s", name, inputs.dataset, recipe.protocol, _recipe_line(recipe))
        warning = short_run(recipe, trainer.schedule_of(recipe, shots, inputs.seed))
        if warning:
            log.warning("%s", warning)
        rows = trainer.fit(trainer.Run(
            model=model, shots=shots, recipe=recipe, compute=params.compute, seed=inputs.seed,
            image_size=oc.image_size(backbone.model), normalization=oc.image_normalization(backbone.model),
            checkpoint=checkpoint, checkpoint_every=params.train.checkpoint_every, params_hash=run_hash))
        if val is not None:  # Tip-Adapter-F: alpha and beta searched on the validation shots
            found = features.search(model, val, params.compute, params.evaluate.batch_size, f"train {name}")
            log.info("%s on %s: %s", name, inputs.dataset, ", ".join(f"{k} {v}" for k, v in found.items()))
    record = {"backbone_sha256": sha, "roles_sha256": roles_sha, "params_sha256": run_hash,
              "dataset": inputs.dataset, "seed": inputs.seed, "classes": inputs.classes, "classnames": shots.classnames,
              "train_images": len(shots.paths), "steps": len(rows),  # the optimizer steps taken (0: nothing trained)
              **({"shots": inputs.shots} if inputs.shots is not None else {})}
    used = {"backbone": Path(inputs.backbone) / "card.json", "fewshot": inputs.fewshot}  # the card holds the weights' sha256
    if roles is not None:
        used["roles"] = inputs.roles
    if descriptions.source(recipe) is not None:  # TAC's class descriptions file: its sha256 in the provenance
        used["descriptions"] = descriptions.source(recipe)
    made_by = provenance({"recipe": recipe.values, "compute": params.compute}, used, inputs.seed)
    made_by["shots_per_class"] = shots.per_class()  # what the report states as the shots used
    schema = train_log_schema(type(model).TERMS)
    with output_folder(outputs.folder, Outputs.FILES) as folder:
        write_parquet(folder / "train_log.parquet", _log_table(rows, schema), schema, made_by)
        save_trained(folder / "model.pt", model, {**record, "provenance": made_by})
    checkpoint.unlink(missing_ok=True)
    log.info("%s", summary(name, inputs.dataset, inputs.seed, rows, outputs.folder))


PROTOCOL = {"base": "base_to_novel", "all": "transfer"}  # --classes -> the recipe's protocol (without --shots)


def protocol(classes: str, shots: int | None) -> str:
    """The recipe's protocol of a run: few_shot with --shots (all classes only), else by --classes."""
    if shots is None:
        return PROTOCOL[classes]
    if classes != "all" or shots < 1:
        raise DearError(f"--shots {shots}: few-shot learning trains every class with K >= 1 shots; "
                        "pass --classes all and a positive --shots")
    return "few_shot"


def _check_shot_count(inputs: Inputs, shots) -> None:
    """A few-shot run's table holds K shots of each class (fewer only where a class has fewer images)."""
    if inputs.shots is None:
        return
    most = shots.per_class()[1]
    if most != inputs.shots:
        raise DearError(f"--fewshot {inputs.fewshot}: its classes hold up to {most} training shots, not --shots "
                        f"{inputs.shots}; pass data/<ds>/fewshot-shots{inputs.shots}-seed<S>.parquet")


def short_run(recipe, schedule) -> str | None:
    """The warning of a run whose `schedule` (the trainer's) takes fewer optimizer steps than any baseline's authors
    train a base-to-novel run with (`FEWEST_STEPS`), or None: such a run may end where it began (issue 39: CoOp at
    10 steps was zero-shot). A run counted in iterations (CLIP-LoRA's `iterations_per_shot`) has no epochs."""
    steps = schedule.total_steps
    if steps >= FEWEST_STEPS:
        return None
    if schedule.steps is None:
        length, key = (f"{schedule.epochs} epochs of {schedule.steps_per_epoch} at batch {schedule.batch_size}, "
                       f"{schedule.n} training images"), "epochs or min_steps"
    else:
        length, key = f"iterations_per_shot {recipe.iterations_per_shot} x the shots of a class", "iterations_per_shot"
    return (f"{recipe.method} on {recipe.dataset}: {steps} optimizer steps ({length}), fewer than the {FEWEST_STEPS} "
            f"of the shortest base-to-novel run of the baselines' authors; raise train.recipes.{recipe.recipe}.{key} "
            f"(docs/your-data.md#training-lengths)")


def _recipe_line(recipe) -> str:
    """The values a person checks first, and every value of ours that replaces the authors'."""
    first = ", ".join(f"{k} {recipe.get(k)}" for k in ("optimizer", "lr", "batch_size", "epochs", "precision"))
    ours = [f"{key} {s.value} (authors: {s.authors})" for key, s in recipe.settings.items() if s.differs]
    return first + (f"; ours: {'; '.join(ours)}" if ours else "")


def summary(name: str, dataset: str, seed: int, rows: list[dict], folder: Path) -> str:
    """One line a person reads: steps, final loss and training accuracy (last epoch's mean), time."""
    if not rows:
        return f"{name} on {dataset} seed {seed}: nothing to train -> {folder}"
    last = [row for row in rows if row["epoch"] == rows[-1]["epoch"]]
    loss = sum(row["loss"] for row in last) / len(last)
    accuracy = sum(row["accuracy"] for row in last) / len(last)
    return (f"{name} on {dataset} seed {seed}: {len(rows)} steps in {rows[-1]['seconds']:.0f} s; last epoch: "
            f"loss {loss:.3f} (first step {rows[0]['loss']:.3f}), training accuracy {accuracy:.1f}% -> {folder}")


def _run_hash(params: Params, name: str, recipe, inputs: Inputs, backbone_sha: str, roles_sha: str | None) -> str:
    """Hash of everything that shapes the trained tensors (not workers or checkpoint spacing)."""
    compute = params.compute.model_dump(mode="json", exclude={"workers"})
    return sha256_json({
        "method": name, "recipe": recipe.values, "compute": compute,
        "dataset": inputs.dataset, "seed": inputs.seed, "classes": inputs.classes,
        **({"shots": inputs.shots} if inputs.shots is not None else {}),
        "backbone": backbone_sha, "roles": roles_sha, "fewshot": sha256_file(inputs.fewshot),
        "dear_version": versions()["dear"],
    })


def _log_table(rows: list[dict], schema: pa.Schema) -> pa.Table:
    columns = {field.name: [row[field.name] for row in rows] for field in schema}
    return pa.table({name: pa.array(values, schema.field(name).type) for name, values in columns.items()})
