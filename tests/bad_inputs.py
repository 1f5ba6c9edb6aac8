"""Every bad input tried against the stages, as data: the cases, how to run one, and the docs table they make.

`tests/e2e/test_bad_inputs.py` runs each case and checks that it ends in exit 1,
one `error:` line holding the expected words, no traceback, nothing
half-written, and that its row of `docs/bad-inputs.md` says exactly what
happened. `python -m tests.bad_inputs` runs every case and rewrites that page,
so the table is made by the cases, never by hand.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
import yaml
from typer.testing import CliRunner

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))  # fake_coop, as pytest's rootdir conftest makes it importable

from dear.cli import app  # noqa: E402
from dear.data.manifest import FEWSHOT_SCHEMA, MANIFEST_SCHEMA  # noqa: E402
from dear.runtime.io import read_provenance, sha256_file, write_parquet  # noqa: E402
from fake_coop import make_fake_dataset, write_params  # noqa: E402
from tests import fake_run  # noqa: E402

DOC = ROOT / "docs" / "bad-inputs.md"
MARKER = "PWNED"  # a crafted pickle would create this file if loading it ran its code


@dataclass
class Inputs:
    """Valid inputs of every stage, made once: the cases damage copies, never these."""

    root: Path
    params: Path
    world: Path
    backbone: Path
    data: Path  # data/world_objects: manifest.parquet, fewshot-seed1.parquet
    roles: Path
    model: Path  # a coop model.pt
    fusion: Path

    @property
    def fewshot(self) -> Path:
        return self.data / "fewshot-seed1.parquet"


def make_inputs(root: Path) -> Inputs:
    """A fake dataset prepared, a tiny random backbone, a tiny world, a coop model and its fusion.json."""
    root.mkdir(parents=True, exist_ok=True)
    make_fake_dataset(root / "raw", "world_objects", n_classes=4, per_class=3)
    params = write_params(root / "params.yaml", root=root / "raw", datasets=["world_objects"], shots=2, val_shots=1,
                          seeds=[1], workers=1)
    small = yaml.safe_load(fake_run.params_file(root / "small.yaml").read_text())
    raw = yaml.safe_load(params.read_text())
    from dear.data.world import tiny_params

    raw.update({key: small[key] for key in ("train",)}, **tiny_params())
    raw["world"]["attribute_sets"] = ["colors"]
    raw["backbone"]["steps"] = 2
    raw["profile"].update(max_images=8, batch_size=8, svd_rank=4, texts_per_head=3, layers=2)
    fake_run.tiny_depths(raw["train"])
    params.write_text(yaml.safe_dump(raw, sort_keys=False))
    inputs = Inputs(root, params, root / "world", root / "backbone", root / "data/world_objects", root / "roles.parquet",
                    root / "runs/train/model.pt", root / "runs/fuse/fusion.json")
    sha = fake_run.backbone(inputs.backbone)
    fake_run.roles(inputs.roles, sha)
    made = {"world": inputs.world, "prepare": inputs.data, "fuse": inputs.fusion,
            "evaluate": root / "runs/coop/world_objects/eval/seed1"}  # where `dear report` can tell the run
    for stage in STAGES:  # every command the cases damage runs on these inputs as it is: only the damage fails it
        args = [str(a) for a in stage_args(stage, inputs, str(made.get(stage, root / "made" / stage)))]
        if stage == "train":
            args[args.index("--checkpoint") + 1] = str(root / "ckpt.pt")
            coop = [*args[:2], "coop", *args[3:]]  # the model of fuse and evaluate: learned tensors, one stream
            coop[coop.index("--out") + 1] = str(inputs.model.parent)
            _run(coop, params)
        _run(args, params)
    return inputs


def _run(args: list[str], params: Path) -> None:
    result = CliRunner().invoke(app, [*args, "--params", str(params)])
    assert result.exit_code == 0, f"{' '.join(args)}: {result.output[-2000:]}"


# --- what a stage is given ----------------------------------------------------------------

def stage_args(stage: str, inputs: Inputs, out: str) -> list:
    """A command of `stage` on valid inputs, writing to `out` (a folder; fuse: a file)."""
    i = inputs
    return {
        "world": ["world", "--out", out],
        "backbone": ["backbone", "--world", i.world, "--out", out],
        "prepare": ["prepare", "--dataset", "world_objects", "--out", out],
        "profile": ["profile", "--backbone", i.backbone, "--manifest", i.data / "manifest.parquet", "--out", out],
        "train": ["train", "--method", "dear", "--dataset", "world_objects", "--backbone", i.backbone, "--fewshot",
                  i.fewshot, "--roles", i.roles, "--out", out, "--checkpoint", "ckpt/ckpt.pt"],
        "fuse": ["fuse", "--model", i.model, "--backbone", i.backbone, "--fewshot", i.fewshot, "--out", out],
        "evaluate": ["evaluate", "--model", i.model, "--fusion", i.fusion, "--backbone", i.backbone,
                     "--source", i.data, "--data", i.data.parent, "--out", out],
        "report": ["report", "--out", out, "--evals", i.root / "runs/coop/world_objects/eval/seed1/eval.parquet"],
    }[stage]


STAGES = ("world", "backbone", "prepare", "profile", "train", "fuse", "evaluate", "report")


def out_name(stage: str) -> str:
    return "out/fusion.json" if stage == "fuse" else "out"


@dataclass
class Case:
    id: str
    stage: str
    given: str  # the bad input, in words
    expect: list[str]  # words the error line must hold
    args: Callable[[Inputs], list]  # the command (run from the case's own empty folder)
    setup: Callable[[Inputs, Path, pytest.MonkeyPatch], None] = lambda inputs, here, patch: None
    watch: list[str] = field(default_factory=lambda: ["out", "ckpt"])  # what "left on disk" looks at
    keeps: list[str] = field(default_factory=list)  # what a failure may leave behind on purpose (a good checkpoint)
    root_only_skip: bool = False  # needs a folder its own user cannot write (skipped when none can be made)


def params_with(inputs: Inputs, here: Path, change: Callable[[dict], None]) -> Path:
    raw = yaml.safe_load(inputs.params.read_text())
    change(raw)
    path = here / "params.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return path


def with_params(args: list, path: str = "params.yaml") -> list:
    return [*args, "--params", path]


# --- the cases ------------------------------------------------------------------------------

def _recipe(key: str, value: float) -> Callable[[dict], None]:
    def change(raw: dict) -> None:
        raw["train"]["recipes"]["mmrl"][key] = value
    return change


def _data(key: str, value) -> Callable[[dict], None]:
    return lambda raw: raw["data"].__setitem__(key, value)


def _not_in_study(raw: dict) -> str:
    """A registered method the config's study does not run."""
    from dear.methods import REGISTRY

    return next(name for name in REGISTRY if name not in raw["study"]["methods"])


def params_case(id: str, stage: str, given: str, change: Callable[[dict], None], expect: list[str]) -> Case:
    return Case(id, stage, given, expect, lambda i: with_params(stage_args(stage, i, "out")),
                setup=lambda i, here, patch: params_with(i, here, change) and None)


PARAMS = [
    params_case("lr-inf", "train", "train.recipes.mmrl.lr: .inf", _recipe("lr", float("inf")),
                ["train.recipes.mmrl.lr", "finite"]),
    params_case("warmup-lr-inf", "train", "train.recipes.mmrl.warmup_lr: .inf", _recipe("warmup_lr", float("inf")),
                ["warmup_lr", "finite"]),
    params_case("twin-weight-nan", "backbone", "backbone.twin_weights.color: .nan (a float in a mapping)",
                lambda raw: raw["backbone"]["twin_weights"].__setitem__("color", float("nan")),
                ["backbone.twin_weights.color", "finite"]),
    params_case("bf16-reproducible", "backbone", "backbone.precision: bf16 with compute.reproducible: true",
                lambda raw: (raw["backbone"].__setitem__("precision", "bf16"),
                             raw["compute"].__setitem__("reproducible", True)),
                ["backbone.precision: bf16", "other weights on every kind of CPU", "set backbone.precision: fp32"]),
    params_case("seeds-repeated", "prepare", "data.seeds: [1, 1]", _data("seeds", [1, 1]), ["data.seeds", "twice"]),
    params_case("seed-negative", "prepare", "data.seeds: [-1]", _data("seeds", [-1]), ["data.seeds.0", "greater than"]),
    params_case("seeds-empty", "prepare", "data.seeds: []", _data("seeds", []), ["data.seeds", "at least 1"]),
    params_case("report-method-not-in-study", "report", "report.methods: a method study.methods does not run",
                lambda raw: raw["report"].__setitem__("methods", [*raw["study"]["methods"], _not_in_study(raw)]),
                ["report.methods:", "is not in study.methods", "leave report.methods out (null)"]),
    params_case("report-compare-not-in-study", "report", "report.compare: a method study.methods does not run",
                lambda raw: raw["report"].update(methods=None, compare=_not_in_study(raw)),
                ["report.compare:", "is not in study.methods", "leave report.compare out (null)"]),
    Case("other-params-file", "prepare", "--params other.yaml whose data.root does not exist",
         ["nowhere: data.root not found", "set data.root in other.yaml"],
         lambda i: with_params(stage_args("prepare", i, "out"), "other.yaml"),
         setup=lambda i, here, patch: params_with(i, here, _data("root", "nowhere")).rename(here / "other.yaml") and None),
]


def params_text_case(id: str, stage: str, given: str, edit: Callable[[str], str], expect: list[str]) -> Case:
    """A params file edited as text: what YAML itself reads differently (dear.config.strict_yaml)."""
    def setup(inputs: Inputs, here: Path, patch) -> None:
        (here / "params.yaml").write_text(edit(yaml.safe_dump(yaml.safe_load(inputs.params.read_text()),
                                                              sort_keys=False)))
    return Case(id, stage, given, expect, lambda i: with_params(stage_args(stage, i, "out")), setup=setup)


YAML = [
    params_text_case("duplicate-key", "prepare", "data: shots given twice",
                     lambda text: text.replace("  shots: ", "  shots: 4\n  shots: ", 1),
                     ["key 'data.shots' is given twice", "keep one"]),
    params_text_case("yes-boolean", "prepare", "data.skip_bad: yes", lambda text: text.replace("skip_bad: false",
                                                                                          "skip_bad: yes", 1),
                     ["key 'data.skip_bad'", "boolean in YAML 1.1", "write true"]),
    params_text_case("exponent-text", "prepare", "backbone.lr: 1e-3 (no dot)",
                     lambda text: re.sub(r"\n  lr: [^\n]+", "\n  lr: 1e-3", text, count=1),
                     ["key 'backbone.lr': 1e-3 is text in YAML 1.1", "write 0.001"]),
    params_text_case("yaml-syntax", "prepare", "data: a line indented one space too little",
                     lambda text: text.replace("\n  shots:", "\n shots:", 1),
                     ["not valid YAML", "line", "column", "fix the syntax"]),
]


def _one_step_lr(value: float) -> Callable[[dict], None]:
    def change(raw: dict) -> None:
        raw["train"]["recipes"]["dear"].update(lr=value, epochs=1, warmup_epochs=0, batch_size=64)
    return change


def _nan_model(inputs: Inputs, here: Path, patch) -> None:
    payload = torch.load(inputs.model, weights_only=True)
    payload["state"] = {name: torch.full_like(tensor, float("nan")) for name, tensor in payload["state"].items()}
    torch.save(payload, here / "model.pt")


def _tac_train(inputs: Inputs) -> list:
    return with_params(["train", "--method", "tac", "--dataset", "world_objects", "--backbone", inputs.backbone,
                        "--fewshot", inputs.fewshot, "--out", "out", "--checkpoint", "ckpt/ckpt.pt"])


def _tac_descriptions(content: str | None) -> Callable[[Inputs, Path, pytest.MonkeyPatch], None]:
    """TAC's descriptions: a file of one's own (`./mine.json`: a path, not one of the authors' file names)."""
    def setup(inputs: Inputs, here: Path, patch) -> None:
        if content is not None:
            (here / "mine.json").write_text(content)
        params_with(inputs, here, lambda raw: raw["train"]["recipes"]["tac"].update(descriptions="./mine.json"))
    return setup


DESCRIPTIONS = [
    Case("tac-descriptions-missing", "train", "train.recipes.tac.descriptions: a file that does not exist",
         ["train.recipes.tac.descriptions: mine.json not found", "point it to a JSON file"], _tac_train,
         setup=_tac_descriptions(None)),
    Case("tac-descriptions-class-missing", "train", "TAC's descriptions file without one of the training classes",
         ["mine.json: no descriptions of class", "classes missing", "add them"], _tac_train,
         setup=_tac_descriptions('{"not a class": ["a photo of nothing."]}')),
]


NUMBERS = [
    Case("lr-1e30-one-step", "train", "train.recipes.dear.lr: 1.0e30, one step",
         ["loss is not finite after the last update", "train.recipes.*.lr"],
         lambda i: with_params(stage_args("train", i, "out")),
         setup=lambda i, here, patch: params_with(i, here, _one_step_lr(1.0e30)) and None),
    Case("nan-model-fuse", "fuse", "model.pt whose learned tensors are NaN", ["holds NaN or inf", "retrain"],
         lambda i: with_params(["fuse", "--model", "model.pt", "--backbone", i.backbone, "--fewshot", i.fewshot,
                                "--out", "out/fusion.json"], str(i.params)), setup=_nan_model),
    Case("nan-model-evaluate", "evaluate", "model.pt whose learned tensors are NaN", ["holds NaN or inf"],
         lambda i: with_params(["evaluate", "--model", "model.pt", "--fusion", i.fusion, "--backbone", i.backbone,
                                "--source", i.data, "--data", i.data.parent, "--out", "out"], str(i.params)),
         setup=_nan_model),
]


def _file_in_the_way(inputs: Inputs, here: Path, patch) -> None:
    (here / "out").write_text("a file where the output folder goes\n")


def _fusion_is_a_folder(inputs: Inputs, here: Path, patch) -> None:
    (here / "out" / "fusion.json").mkdir(parents=True)


def _blocker(inputs: Inputs, here: Path, patch) -> None:
    (here / "blocker").write_text("a file where a folder of the output path goes\n")


@contextlib.contextmanager
def read_only(folder: Path):
    """`folder` unwritable for this process: chmod for a user, `chattr +i` for root (which ignores modes)."""
    folder.mkdir(parents=True, exist_ok=True)
    if os.geteuid() != 0:
        folder.chmod(0o555)
        try:
            yield
        finally:
            folder.chmod(0o755)
        return
    made = subprocess.run(["chattr", "+i", str(folder)], capture_output=True)
    if made.returncode != 0:
        pytest.skip("running as root where `chattr +i` does not work: no unwritable folder can be made")
    try:
        yield
    finally:
        subprocess.run(["chattr", "-i", str(folder)], check=True)


def filesystem_cases(stage: str) -> list[Case]:
    run = lambda out: lambda i: with_params(stage_args(stage, i, out), str(i.params))  # noqa: E731
    file_out = stage == "fuse"
    in_the_way = Case(f"out-is-a-file-{stage}", stage,
                      "--out is a folder holding fusion.json as a folder" if file_out else "--out names an existing file",
                      ["is a folder, not a file"] if file_out else ["exists and is not a folder"],
                      run(out_name(stage)), setup=_fusion_is_a_folder if file_out else _file_in_the_way)
    under = Case(f"out-under-a-file-{stage}", stage, "--out lies under an existing file",
                 ["blocker is a file, not a folder"], run("blocker/" + out_name(stage)), setup=_blocker,
                 watch=["blocker", "ckpt"])
    unwritable = Case(f"out-read-only-{stage}", stage, "--out in a read-only folder", ["cannot write in ro (not writable)"],
                      run("ro/" + out_name(stage)), watch=["ro", "ckpt"], root_only_skip=True)
    return [in_the_way, under, unwritable]


def _foreign_file(inputs: Inputs, here: Path, patch) -> None:
    (here / "out").mkdir()
    (here / "out" / "notes.txt").write_text("someone's notes\n")


def _log_in_output(inputs, here, patch) -> None:
    pass


def _manifest_write_fills_disk(inputs: Inputs, here: Path, patch) -> None:
    """An earlier output in place; the disk fills up while the new manifest is written (after the few-shot tables)."""
    shutil.copytree(inputs.data, here / "out")
    from dear.stages import prepare

    real = prepare.write_parquet

    def filling(path, *args, **kwargs):
        if Path(path).name == "manifest.parquet":
            raise OSError(errno.ENOSPC, "No space left on device", str(path))
        return real(path, *args, **kwargs)

    patch.setattr(prepare, "write_parquet", filling)


def _checkpoint_write_fills_disk(inputs: Inputs, here: Path, patch) -> None:
    from dear.train import checkpoint

    patch.setattr(checkpoint.torch, "save", fake_run.save_that_fills_the_disk(checkpoint.torch.save))


FILESYSTEM = [case for stage in STAGES for case in filesystem_cases(stage)] + [
    Case("out-holds-foreign-files", "prepare", "--out is a folder holding a file the stage does not write",
         ["holds 'notes.txt'", "move them away"], lambda i: with_params(stage_args("prepare", i, "out"), str(i.params)),
         setup=_foreign_file),
    Case("log-inside-out", "prepare", "--log inside the output folder", ["--log out/prepare.log", "elsewhere"],
         lambda i: with_params(stage_args("prepare", i, "out") + ["--log", "out/prepare.log"], str(i.params))),
    Case("log-under-a-file", "prepare", "--log under an existing file", ["blocker is a file"],
         lambda i: with_params(stage_args("prepare", i, "out") + ["--log", "blocker/prepare.log"], str(i.params)),
         setup=_blocker, watch=["out", "blocker"]),
    Case("disk-full-output", "prepare", "the disk fills up while the manifest is written (an earlier output in --out)",
         ["out: writing failed (the disk is full", "its previous content is kept"],
         lambda i: with_params(stage_args("prepare", i, "out"), str(i.params)), setup=_manifest_write_fills_disk),
    Case("disk-full-checkpoint", "train", "the disk fills up during the second checkpoint write",
         ["checkpoint write failed at step 2", "the disk is full", "previous checkpoint is kept"],
         lambda i: with_params(stage_args("train", i, "out")), keeps=["ckpt/ckpt.pt"],
         setup=lambda i, here, patch: (params_with(i, here, lambda raw: raw["train"].update(checkpoint_every=1)),
                                       _checkpoint_write_fills_disk(i, here, patch)) and None),
]


def _fewshot_with(inputs: Inputs, here: Path, split: str, path: str) -> None:
    """A copy of the few-shot table whose first base-class `split` shot is `path` (which does not exist)."""
    table = pq.read_table(inputs.fewshot)
    paths = table["path"].to_pylist()
    first = list(zip(table["fewshot_split"].to_pylist(), table["subset"].to_pylist())).index((split, "base"))
    paths[first] = str(here / path)
    table = table.set_column(table.schema.get_field_index("path"), "path", pa.array(paths, pa.string()))
    write_parquet(here / "fewshot-seed1.parquet", table, FEWSHOT_SCHEMA)


def _fewshot_without(inputs: Inputs, here: Path, split: str) -> None:
    """A copy of the few-shot table without its `split` shots."""
    table = pq.read_table(inputs.fewshot)
    keep = pa.array([value != split for value in table["fewshot_split"].to_pylist()])
    write_parquet(here / "fewshot-seed1.parquet", table.filter(keep), FEWSHOT_SCHEMA)


def _source_with(inputs: Inputs, here: Path, path: str, content: bytes | None) -> None:
    """A copy of the prepared dataset whose first test image is `path` (absent, or holding `content`)."""
    shutil.copytree(inputs.data, here / "data" / "world_objects")
    manifest = pq.read_table(inputs.data / "manifest.parquet")
    paths = manifest["path"].to_pylist()
    paths[manifest["split"].to_pylist().index("test")] = str(here / path)
    manifest = manifest.set_column(manifest.schema.get_field_index("path"), "path", pa.array(paths, pa.string()))
    write_parquet(here / "data" / "world_objects" / "manifest.parquet", manifest, MANIFEST_SCHEMA)
    if content is not None:
        (here / path).write_bytes(content)


def _world_missing_image(inputs: Inputs, here: Path, patch) -> None:
    shutil.copytree(inputs.world, here / "world")
    split = json.loads((here / "world/world_objects/split_zhou_world_objects.json").read_text())
    (here / "world/world_objects/images" / split["test"][0][0]).unlink()


def _evaluate_on(source: str) -> Callable[[Inputs], list]:
    return lambda i: with_params(["evaluate", "--model", i.model, "--fusion", i.fusion, "--backbone", i.backbone,
                                  "--source", source, "--data", "data", "--out", "out"], str(i.params))


IMAGES = [
    Case("missing-shot-train", "train", "a training shot listed in the few-shot table is gone",
         ["training image(s) not found", "gone.png"],
         lambda i: with_params(["train", "--method", "coop", "--dataset", "world_objects", "--backbone", i.backbone,
                                "--fewshot", "fewshot-seed1.parquet", "--out", "out", "--checkpoint", "ckpt/ckpt.pt"],
                               str(i.params)),
         setup=lambda i, here, patch: _fewshot_with(i, here, "train", "gone.png")),
    Case("missing-shot-fuse", "fuse", "a validation shot listed in the few-shot table is gone",
         ["val image(s) not found", "gone.png"],
         lambda i: with_params(["fuse", "--model", i.model, "--backbone", i.backbone, "--fewshot", "fewshot-seed1.parquet",
                                "--out", "out/fusion.json"], str(i.params)),
         setup=lambda i, here, patch: (_fewshot_with(i, here, "val", "gone.png"),
                                       shutil.copy(i.data / "manifest.parquet", here / "manifest.parquet")) and None),
    Case("no-val-shots-linear-probe", "train", "linear_probe on a few-shot table without validation shots",
         ["no validation shots of the base classes", "linear_probe searches its C on them"],
         lambda i: with_params(["train", "--method", "linear_probe", "--dataset", "world_objects", "--backbone",
                                i.backbone, "--fewshot", "fewshot-seed1.parquet", "--out", "out", "--checkpoint",
                                "ckpt/ckpt.pt"], str(i.params)),
         setup=lambda i, here, patch: _fewshot_without(i, here, "val")),
    Case("no-val-shots-tip-adapter-f", "train", "tip_adapter_f on a few-shot table without validation shots",
         ["no validation shots of the base classes", "tip_adapter_f searches its alpha and beta on them"],
         lambda i: with_params(["train", "--method", "tip_adapter_f", "--dataset", "world_objects", "--backbone",
                                i.backbone, "--fewshot", "fewshot-seed1.parquet", "--out", "out", "--checkpoint",
                                "ckpt/ckpt.pt"], str(i.params)),
         setup=lambda i, here, patch: _fewshot_without(i, here, "val")),
    Case("clip-lora-position-depth", "train", "train.recipes.clip_lora.position: up (ViT-B/16's layers 9-12) on a "
         "shallower backbone", ["position 'up'", "12-layer tower", "train.recipes.clip_lora.position: all"],
         lambda i: with_params(["train", "--method", "clip_lora", "--dataset", "world_objects", "--backbone",
                                i.backbone, "--fewshot", i.fewshot, "--out", "out", "--checkpoint", "ckpt/ckpt.pt"]),
         setup=lambda i, here, patch: params_with(i, here, lambda raw: raw["train"]["recipes"].__setitem__(
             "clip_lora", {"position": "up"})) and None),
    Case("roles-variant-without-roles", "train", "maple+roles (a method with DeAR's head roles) without --roles",
         ["--roles: method maple+roles needs the roles table of `dear profile`", "pass --roles PATH"],
         lambda i: with_params(["train", "--method", "maple+roles", "--dataset", "world_objects", "--backbone",
                                i.backbone, "--fewshot", i.fewshot, "--out", "out", "--checkpoint", "ckpt/ckpt.pt"],
                               str(i.params))),
    Case("roles-variant-of-no-such-method", "train", "--method coop+roles: a method without a variant with head roles",
         ["unknown method 'coop+roles'", "coop has no variant with DeAR's head roles", "maple+roles"],
         lambda i: with_params(["train", "--method", "coop+roles", "--dataset", "world_objects", "--backbone",
                                i.backbone, "--fewshot", i.fewshot, "--roles", i.roles, "--out", "out",
                                "--checkpoint", "ckpt/ckpt.pt"], str(i.params))),
    Case("missing-test-image-evaluate", "evaluate", "a test image listed in the manifest is gone",
         ["test image(s) not found", "gone.png"], _evaluate_on("data/world_objects"),
         setup=lambda i, here, patch: _source_with(i, here, "gone.png", None)),
    Case("undecodable-test-image-evaluate", "evaluate", "a test image is not an image (truncated or garbage)",
         ["bad.png: not a readable image", "set data.verify: decode and data.skip_bad: true"],
         _evaluate_on("data/world_objects"),
         setup=lambda i, here, patch: _source_with(i, here, "bad.png", b"\x89PNG\r\n\x1a\n truncated")),
    Case("missing-world-image-backbone", "backbone", "a world test image is gone (found before pretraining)",
         ["world test image(s) not found"],
         lambda i: with_params(["backbone", "--world", "world", "--out", "out"], str(i.params)),
         setup=_world_missing_image),
]


def _dataset(name: str, damage: Callable[[Path], None]) -> Callable[[Inputs, Path, pytest.MonkeyPatch], None]:
    def setup(inputs: Inputs, here: Path, patch) -> None:
        make_fake_dataset(here / "raw", name, n_classes=4, per_class=3)
        damage(here / "raw" / name)
        params_with(inputs, here, lambda raw: raw["data"].update(root=str(here / "raw"), datasets=[name], shots=3) or
                    raw["study"].update(base_to_novel=[name], transfer={"source": name, "cross_dataset": [],
                                                                        "domain_generalization": []}) or
                    raw["profile"].update(dataset=name))
    return setup


def _truncate_a_shot(folder: Path) -> None:
    image = sorted((folder / "images" / "train").rglob("*.jpg"))[0]
    image.write_bytes(image.read_bytes()[:-5])  # the header survives: `data.verify: exists` passes it


def _empty_a_class(folder: Path) -> None:
    for image in (folder / "images" / "train" / "n00000002").iterdir():
        image.unlink()


DATA = [
    Case("truncated-shot-prepare", "prepare", "a truncated JPEG that would be a training shot (data.verify: exists)",
         ["picked as a few-shot image", "unreadable", "data.skip_bad"],
         lambda i: with_params(["prepare", "--dataset", "imagenet", "--out", "out"]),
         setup=_dataset("imagenet", _truncate_a_shot)),
    Case("empty-class-prepare", "prepare", "an ImageNet train class folder is empty",
         ["class 2", "no usable train image", "empty class folder"],
         lambda i: with_params(["prepare", "--dataset", "imagenet", "--out", "out"]),
         setup=_dataset("imagenet", _empty_a_class)),
]


def _own(damage: Callable[[Path], None], declared: dict | None = None, name: str = "mine"):
    """A dataset of one's own (tests/own_data.py: 3 colour classes, ImageFolder + its CSV) in the case's folder,
    damaged, declared under data.custom and used by the study."""
    def setup(inputs: Inputs, here: Path, patch) -> None:
        from tests.own_data import csv_copy, imagefolder

        csv_copy(imagefolder(here / "mine", train=4, test=2, size=8,
                             classes={"red": (220, 40, 40), "green": (40, 180, 60), "blue": (40, 70, 220)}))
        damage(here / "mine")
        entry = declared or {"format": "imagefolder", "path": "mine"}
        params_with(inputs, here, lambda raw: raw["data"].update(datasets=[name], custom={name: entry}, shots=2) or
                    raw["study"].update(base_to_novel=[name], transfer=None) or raw["profile"].update(dataset=name))
    return setup


def _csv_rows(edit: Callable[[list[str]], list[str]]) -> Callable[[Path], None]:
    def damage(folder: Path) -> None:
        lines = (folder / "images.csv").read_text().splitlines()
        (folder / "images.csv").write_text("\n".join(edit(lines)) + "\n")
    return damage


def _own_case(id: str, given: str, expect: list[str], damage: Callable[[Path], None] = lambda folder: None,
              declared: dict | None = None, name: str = "mine") -> Case:
    return Case(id, "prepare", given, expect, lambda i: with_params(["prepare", "--dataset", name, "--out", "out"]),
                setup=_own(damage, declared, name))


def _cut_in_half(image: Path) -> None:
    data = image.read_bytes()
    image.write_bytes(data[: len(data) // 2])


_CSV = {"format": "csv", "path": "mine/images.csv"}
_LABELS = {"format": "csv", "path": "mine/images.csv", "classnames": {0: "blue", 1: "green"}}

OWN_DATA = [
    _own_case("own-empty-class", "data.custom imagefolder: a class folder of train/ holds no image",
              ["mine/train/green: empty class folder", "add its images or remove the folder"],
              lambda f: [image.unlink() for image in (f / "train/green").iterdir()]),
    _own_case("own-test-class-not-in-train", "data.custom imagefolder: test/ has a class train/ lacks",
              ["mine/test/purple", "is in test/ but not in train/"],
              lambda f: shutil.copytree(f / "test/red", f / "test/purple")),
    _own_case("own-no-test", "data.custom imagefolder: no test/ folder",
              ["mine/test: no test folder", "never scores its training images"],
              lambda f: shutil.rmtree(f / "test")),
    _own_case("own-not-an-image", "data.custom imagefolder: a .png that is a text file",
              ["mine/train/red/red_000.png: unreadable", "data.skip_bad"],
              lambda f: (f / "train/red/red_000.png").write_text("not an image")),
    _own_case("own-same-file-two-splits", "data.custom csv: one image listed in train and in test",
              ["listed in both train and test", "images.csv:2 and", "keep each image in one split"],
              _csv_rows(lambda lines: lines + [lines[1].rsplit(",", 1)[0] + ",test"]), _CSV),
    _own_case("own-csv-missing-image", "data.custom csv: a row's image does not exist",
              ["images.csv:3: image mine/train/blue/gone.png not found", "relative to the CSV file"],
              _csv_rows(lambda lines: lines[:2] + ["train/blue/gone.png,blue,train"] + lines[2:]), _CSV),
    _own_case("own-label-without-name", "data.custom csv: integer labels, label 2 not in classnames",
              ["label 2 has no class name", "add 2 to data.custom.mine.classnames"],
              _csv_rows(lambda lines: ["path,label,split"] + [
                  ",".join([row.split(",")[0], str(["blue", "green", "red"].index(row.split(",")[1])), row.split(",")[2]])
                  for row in lines[1:]]), _LABELS),
    _own_case("own-too-few-to-carve-val", "data.custom imagefolder: no val/ and a class with 2 training images",
              ["class 'red' has 2 training image(s), too few to carve", "or add a val/ split"],
              lambda f: [image.unlink() for image in sorted((f / "train/red").iterdir())[:2]]),
    _own_case("own-same-content-two-splits", "data.custom imagefolder: a training image copied into test/ under "
              "another name", ["mine/test/red/copy.png: the same bytes as mine/train/red/red_000.png", "delete one copy"],
              lambda f: shutil.copyfile(f / "train/red/red_000.png", f / "test/red/copy.png")),
    _own_case("own-truncated-image", "data.custom imagefolder: the first half of a PNG (header intact; "
              "data.verify: exists)", ["mine/test/green/green_001.png: unreadable (image file is truncated",
                                       "data.skip_bad"], lambda f: _cut_in_half(f / "test/green/green_001.png")),
    _own_case("own-class-without-test", "data.custom imagefolder: a class of train/ has no test/ folder",
              ["mine/test/green: class 'green' has no test image", "move some of its images to mine/test/green/"],
              lambda f: shutil.rmtree(f / "test/green")),
    _own_case("own-csv-class-typo", "data.custom csv: a test row names class 'gren' (a typo of green)",
              ["images.csv:16: class 'gren' has no training image", "a typo of 'green'?", "fix the class name"],
              _csv_rows(lambda lines: [line.replace(",green,test", ",gren,test", 1) if number == 15 else line
                                       for number, line in enumerate(lines)]), _CSV),
    _own_case("own-built-in-name", "data.custom names a dataset eurosat (it would get EuroSAT's recipe)",
              ["'eurosat' is a built-in dataset's name", "my_eurosat"], name="eurosat"),
    _own_case("own-unknown-format", "data.custom.mine.format: folder",
              ["data.custom.mine.format", "unknown format 'folder'", "imagefolder, csv, coop-json"],
              declared={"format": "folder", "path": "mine"}),
]


class _Pwn:
    """What an attacker's pickle does: run a command while it loads."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return os.system, (f"touch {self.marker}",)


def _crafted(name: str) -> Callable[[Inputs, Path, pytest.MonkeyPatch], None]:
    def setup(inputs: Inputs, here: Path, patch) -> None:
        target = here / name
        target.parent.mkdir(parents=True, exist_ok=True)
        torch.save({"format": "dear-trained/1", "meta": "{}", "state": {"w": _Pwn(here / MARKER)}}, target)
        if name.endswith("model.pt") and "backbone" in name:  # a shared backbone folder: its card vouches for it
            card = json.loads((inputs.backbone / "card.json").read_text())
            card["sha256"] = sha256_file(target)
            (target.parent / "card.json").write_text(json.dumps(card))
    return setup


LOADING = [
    Case("crafted-model-fuse", "fuse", "a model.pt whose pickle runs a command when loaded",
         ["model.pt: holds Python objects", "could run code; refused"],
         lambda i: with_params(["fuse", "--model", "model.pt", "--backbone", i.backbone, "--fewshot", i.fewshot,
                                "--out", "out/fusion.json"], str(i.params)), setup=_crafted("model.pt")),
    Case("crafted-checkpoint-train", "train", "a resumable checkpoint whose pickle runs a command when loaded",
         ["ckpt.pt: holds Python objects", "refused"],
         lambda i: with_params(stage_args("train", i, "out"), str(i.params)), setup=_crafted("ckpt/ckpt.pt"),
         watch=["out"]),
    Case("crafted-backbone-train", "train", "backbone/model.pt whose pickle runs a command when loaded",
         ["backbone/model.pt: holds Python objects", "refused"],
         lambda i: with_params(["train", "--method", "zeroshot", "--dataset", "world_objects", "--backbone", "backbone",
                                "--fewshot", i.fewshot, "--out", "out", "--checkpoint", "ckpt/ckpt.pt"], str(i.params)),
         setup=_crafted("backbone/model.pt")),
    Case("crafted-weights-backbone", "backbone", "model.pretrained: a weights file whose pickle runs a command",
         ["weights.pt: holds Python objects", "refused"],
         lambda i: with_params(["backbone", "--world", i.world, "--out", "out"]),
         setup=lambda i, here, patch: (_crafted("weights.pt")(i, here, patch),
                                       params_with(i, here, lambda raw: raw["model"].update(
                                           pretrained=str(here / "weights.pt")))) and None),
]

def _report_with(option: str, path: str) -> Callable[[Inputs], list]:
    return lambda i: with_params([*stage_args("report", i, "out"), option, path], str(i.params))


def _write(name: str, text: str) -> Callable[[Inputs, Path, pytest.MonkeyPatch], None]:
    def setup(inputs: Inputs, here: Path, patch) -> None:
        (here / name).parent.mkdir(parents=True, exist_ok=True)
        (here / name).write_text(text)
    return setup


RECORD = [
    Case("not-a-benchmark-report", "report", "--benchmarks: a *.benchmark.tsv that is not Snakemake's",
         ["logs/train.benchmark.tsv: not a Snakemake benchmark file", "rerun its job"],
         _report_with("--benchmarks", "logs"), setup=_write("logs/train.benchmark.tsv", "seconds\n12\n")),
    Case("not-a-model-report", "report", "--models: a file that is not a model.pt", ["model.pt: not a readable model.pt"],
         _report_with("--models", "model.pt"), setup=_write("model.pt", "not a model")),
    Case("crafted-model-report", "report", "--models: a model.pt whose pickle runs a command when loaded",
         ["model.pt: holds Python objects", "refused"], _report_with("--models", "model.pt"),
         setup=_crafted("model.pt")),
]

def _evaluated_from(model: str) -> Callable[[Inputs, Path, pytest.MonkeyPatch], None]:
    """The study's first evaluation of coop in the case's folder, recording `model` with the sha256 of the real one,
    and `model` holding other bytes (a model retrained after the evaluation)."""
    def setup(inputs: Inputs, here: Path, patch) -> None:
        source = inputs.root / "runs/coop/world_objects/eval/seed1/eval.parquet"
        made = read_provenance(source)
        made["inputs"]["model"] = model
        table = pq.read_table(source)
        write_parquet(here / "runs/coop/world_objects/eval/seed1/eval.parquet", table, table.schema.remove_metadata(),
                      made)
        (here / model).write_bytes(inputs.model.read_bytes() + b"retrained")
    return setup


def _listing(sha256: str) -> Callable[[Inputs, Path, pytest.MonkeyPatch], None]:
    def setup(inputs: Inputs, here: Path, patch) -> None:
        evaluation = str(inputs.root / "runs/coop/world_objects/eval/seed1/eval.parquet")
        (here / "runs.json").write_text(json.dumps({"method": "coop", "runs": [
            {"job": "evaluate@coop-world_objects", "seed": 1, "eval": evaluation, "model": None, "train_log": None,
             "sha256": {"eval": sha256, "model": None, "train_log": None}}]}))
    return setup


COLLECT = [  # `dear collect` and the report reading its lists
    Case("no-evaluation-collect", "collect", "a run of the study not evaluated yet",
         ["runs/coop/world_objects/eval/seed1/eval.parquet: not found", "evaluate@coop-world_objects",
          "run that evaluation first"],
         lambda i: with_params(["collect", "--method", "coop", "--out", "out"], str(i.params))),
    Case("model-changed-collect", "collect", "a model.pt changed after its evaluation",
         ["model.pt changed after it was evaluated", "rerun evaluate@coop-world_objects"],
         lambda i: with_params(["collect", "--method", "coop", "--out", "out"], str(i.params)),
         setup=_evaluated_from("model.pt")),
    Case("method-not-in-study-collect", "collect", "--method of no study method",
         ["--method clip_adapter", "not one of study.methods"],
         lambda i: with_params(["collect", "--method", "clip_adapter", "--out", "out"], str(i.params))),
    Case("listed-file-changed-report", "report", "--runs: a runs.json whose eval table changed since it was listed",
         ["eval.parquet: changed since runs.json listed it", "rerun `dear collect`"],
         _report_with("--runs", "runs.json"), setup=_listing("0" * 64)),
]


def _few_shot(section) -> Callable[[dict], None]:
    return lambda raw: raw["study"].__setitem__("few_shot", section)


FEW_SHOT = [  # study.few_shot and the few-shot runs' --shots
    params_case("few-shot-dataset-unprepared", "prepare", "study.few_shot.datasets names a dataset data.datasets lacks",
                _few_shot({"datasets": ["dtd"], "shots": [1]}), ["study.few_shot.datasets uses dtd",
                                                                 "add dtd to data.datasets"]),
    params_case("few-shot-shots-repeated", "prepare", "study.few_shot.shots: [1, 1]",
                _few_shot({"datasets": ["world_objects"], "shots": [1, 1]}), ["study.few_shot.shots", "twice"]),
    Case("shots-table-mismatch-train", "train", "--shots 1 with data.shots' table (2 shots per class)",
         ["not --shots 1", "fewshot-shots1-seed<S>.parquet"],
         lambda i: with_params(["train", "--method", "coop", "--dataset", "world_objects", "--classes", "all",
                                "--shots", "1", "--backbone", i.backbone, "--fewshot", i.fewshot, "--out", "out",
                                "--checkpoint", "ckpt/ckpt.pt"], str(i.params))),
    Case("shots-model-mismatch-evaluate", "evaluate", "--shots 2 on a model trained on base classes (no --shots)",
         ["--shots 2", "not on 2 shots of every class", "dear train --shots"],
         lambda i: with_params(["evaluate", "--model", i.model, "--fusion", i.fusion, "--backbone", i.backbone,
                                "--source", i.data, "--classes", "all", "--shots", "2", "--data", i.data.parent,
                                "--out", "out"], str(i.params))),
]


def _predict(i: Inputs, images: str, *extra: str) -> list:
    return with_params(["predict", "--model", i.model, "--backbone", i.backbone, "--images", images, "--out", "out",
                        *extra], str(i.params))


def _broken_images(inputs: Inputs, here: Path, patch) -> None:
    (here / "images").mkdir()
    (here / "images/a.png").write_bytes(b"\x89PNG\r\n\x1a\n truncated")
    (here / "images/b.jpg").write_text("not an image")


PREDICT = [
    Case("no-images-predict", "predict", "--images: a folder without image files", ["no image files in this folder"],
         lambda i: _predict(i, "images"), setup=lambda i, here, patch: (here / "images").mkdir()),
    Case("unreadable-images-predict", "predict", "--images: every image is unreadable (one bad image is a row)",
         ["none of the 2 image(s) could be read", "a.png: not a readable image"], lambda i: _predict(i, "images"),
         setup=_broken_images),
    Case("repeated-class-predict", "predict", "--class-list: a class name listed twice", ["'cat' is listed 2 times"],
         lambda i: _predict(i, str(i.root / "raw/world_objects/images"), "--class-list", "classes.txt"),
         setup=lambda i, here, patch: (here / "classes.txt").write_text("cat\ndog\ncat\n") and None),
    Case("fusion-of-another-model-predict", "predict", "--fusion: alpha of another model (3 streams for coop's 1)",
         ["no alpha of 1 streams for coop"],
         lambda i: _predict(i, str(i.root / "raw/world_objects/images"), "--fusion", "fusion.json"),
         setup=lambda i, here, patch: (here / "fusion.json").write_text('{"alpha": [0.5, 0.25, 0.25]}') and None),
    Case("unknown-rule-predict", "predict", "--rule: a name that is not a rule", ["--rule: 'fused' is not a rule",
                                                                                "by-class, seen, unseen"],
         lambda i: _predict(i, str(i.root / "raw/world_objects/images"), "--rule", "fused")),
]


def _plugin_case(id: str, given: str, expect: list[str], used: bool = True, stage: str = "check",
                 changes: dict | None = None, **plugin) -> Case:
    """`dear check` (or `dear recipe`: `stage`) of a study with a broken plugin method installed (tests/plugins.py
    writes it as pip would); `changes`: the config's train.recipes entry of the method."""
    package = "broken_" + id.removeprefix("plugin-").removesuffix("-check").replace("-", "_")

    def setup(inputs: Inputs, here: Path, patch) -> None:
        from tests.plugins import fresh_discovery, write_plugin

        method = write_plugin(here / "site", package, **plugin)
        fresh_discovery(patch, here / "site")
        methods = ["zeroshot", method] if used else ["zeroshot"]

        def change(raw: dict) -> None:
            raw["study"]["methods"] = methods
            raw["report"].update(methods=methods, compare=methods[-1])
            if changes is not None:
                raw["train"]["recipes"][method] = changes

        params_with(inputs, here, change)

    return Case(id, stage, given, expect, lambda i: [stage, "--params", "params.yaml"], setup=setup)


def _vpt_recipe(values: str, layers: str = "") -> str:
    """A plugin recipe as a VPT-deep author writes one: its own keys, one a depth of the image tower."""
    return ('title: "x"\nprompt: template\nkeys:\n  template: {type: str, help: "x"}\n'
            '  precision: {type: "fp16|fp32|bf16", help: "x"}\n  n_ctx_vision: {type: int, help: "x"}\n'
            f'  prompt_depth_vision: {{type: int, help: "x"{layers}}}\n'
            f'recipe:\n  - source: "tests/plugins.py"\n    kind: ours\n    values: {{{values}}}\n')


TYPO = _vpt_recipe('template: "a {}.", precision: fp32, n_ctx_visoin: 8, prompt_depth_vision: 2')
WRONG_TYPE = _vpt_recipe('template: "a {}.", precision: fp32, n_ctx_vision: "8", prompt_depth_vision: 2')
DEEP = _vpt_recipe('template: "a {}.", precision: fp32, n_ctx_vision: 8, prompt_depth_vision: 12',
                   ", layers: {towers: [image], meaning: depth}")


PLUGINS = [  # a method from an installed package that cannot run (docs/your-method.md)
    _plugin_case("plugin-import-error-check", "a plugin whose package fails to import",
                 ["plugin method 'broken_import_error'", "cannot be imported", "No module named 'not_installed'",
                  "pip uninstall broken-import-error"],
                 init="import not_installed  # a dependency the plugin forgot\n"),
    _plugin_case("plugin-recipe-key-check", "a plugin whose recipe sets a key its `keys:` lacks",
                 ["plugin method 'broken_recipe_key'", "unknown keys ['rank']", "declare each under `keys:`"],
                 recipe='title: "x"\nprompt: template\nkeys:\n  template: {type: str, help: "x"}\nrecipe:\n'
                        '  - source: "tests/plugins.py"\n    kind: ours\n    values: {template: "a {}.", rank: 4}\n'),
    _plugin_case("plugin-contract-check", "a plugin written for another method contract",
                 ["plugin method 'broken_contract'", "written for method contract 2", "provides contract 1"],
                 contract=2),
    _plugin_case("plugin-shadows-coop-check", "an installed plugin named coop (a built-in method's name)",
                 ["plugin method 'coop'", "shadows the built-in 'coop'", "rename its entry point"],
                 used=False, method="coop"),
    _plugin_case("plugin-missing-hook-check", "a plugin whose model does not write its class features",
                 ["plugin method 'broken_missing_hook'", "does not define the hook compute_text_features"],
                 model="dear.contract:MethodModel"),
    # a plugin's own recipe file is broken, and the config changes its keys: the file's line, first and alone
    *(_plugin_case(f"plugin-recipe-{what}-{stage}", f"a plugin's recipe file {given}, the config changing its keys",
                   ["broken_recipe_" + what.replace("-", "_"), "recipe.yaml", *words], stage=stage,
                   changes={"n_ctx_vision": 4}, recipe=recipe)
      for stage in ("check", "recipe")
      for what, given, recipe, words in (
          ("typo", "sets n_ctx_visoin (a typo)", TYPO, ["unknown keys ['n_ctx_visoin']", "did you mean n_ctx_vision"]),
          ("wrong-type", 'sets n_ctx_vision: "8" (text)', WRONG_TYPE, ["n_ctx_vision = '8'", "must be int"]))),
    _plugin_case("plugin-layer-key-check", "a plugin's layer key (prompt_depth_vision: 12) on a 2-layer backbone",
                 ["train.recipes.broken_layer_key.prompt_depth_vision: 12", "(2 image layers); set it in 1..2"],
                 recipe=DEEP),
    _plugin_case("plugin-layer-declaration-check", "a plugin's recipe declares a layer key's towers as a word",
                 ["recipe.yaml: keys.prompt_depth_vision.layers: write {towers: [image]"],
                 recipe=DEEP.replace("layers: {towers: [image], meaning: depth}", "layers: image")),
]


CASES = PARAMS + DESCRIPTIONS + YAML + NUMBERS + FILESYSTEM + IMAGES + DATA + OWN_DATA + LOADING + RECORD + PREDICT \
    + FEW_SHOT + COLLECT + PLUGINS


# --- running one ------------------------------------------------------------------------------

@dataclass
class Outcome:
    exit_code: int
    stderr: str
    errors: list[str]  # the `error:` lines
    message: str  # the first error line, paths made relative
    before: dict  # watched files before the command: {path: bytes}
    after: dict
    executed: bool  # whether the crafted pickle ran
    leftovers: list[str]  # temporary files anywhere in the case's folder

    @property
    def left(self) -> str:
        """What the watched paths hold afterwards, in words."""
        if not self.after:
            return "nothing"
        if self.after == self.before:
            return "only what was there before, unchanged: " + ", ".join(self.after)
        return "written: " + ", ".join(sorted(self.after))


def state(here: Path, watch: list[str]) -> dict[str, bytes]:
    found = {}
    for name in watch:
        path = here / name
        for file in sorted(path.rglob("*")) if path.is_dir() else [path] if path.exists() else []:
            found[str(file.relative_to(here))] = file.read_bytes() if file.is_file() else b"<folder>"
    return found


def run_case(case: Case, inputs: Inputs, here: Path) -> Outcome:
    """Run `case` from the empty folder `here`."""
    here.mkdir(parents=True, exist_ok=True)
    previous = Path.cwd()
    os.chdir(here)
    try:
        with pytest.MonkeyPatch.context() as patch:
            case.setup(inputs, here, patch)
            with read_only(here / "ro") if case.root_only_skip else contextlib.nullcontext():
                before = state(here, case.watch)
                result = CliRunner().invoke(app, [str(a) for a in case.args(inputs)])
                after = state(here, case.watch)
    finally:
        os.chdir(previous)
    errors = [line.removeprefix("error: ") for line in result.stderr.splitlines() if line.startswith("error: ")]
    message = relative(errors[0], inputs, here) if errors else ""
    return Outcome(result.exit_code, result.stderr, errors, message, before, after, (here / MARKER).exists(),
                   sorted(str(p.relative_to(here)) for p in here.rglob(".*.tmp")))


def relative(text: str, inputs: Inputs, here: Path) -> str:
    """Paths of a message as a reader of the table needs them: the case's folder is ., the shared inputs are inputs/."""
    for folder, name in sorted(((str(here), "."), (str(inputs.root), "inputs")), key=lambda pair: -len(pair[0])):
        text = text.replace(folder + "/", "" if name == "." else name + "/").replace(folder, name)
    return text


# --- the table ----------------------------------------------------------------------------------

HEADER = ["case", "stage", "bad input", "message (after `error: `)", "left on disk"]


def row(case: Case, outcome: Outcome) -> list[str]:
    return [case.id, case.stage, case.given, outcome.message, outcome.left]


def cell(text: str) -> str:
    return text.replace("|", "\\|")


def render(rows: list[list[str]]) -> str:
    lines = [
        "# Bad inputs: what each stage says, and what it leaves",
        "",
        "Every case below is run by `tests/e2e/test_bad_inputs.py`, which checks that it ends with exit code 1,",
        "one `error:` line, no traceback and nothing half-written, and that its row here is what it printed.",
        "The page is generated: `python -m tests.bad_inputs` reruns every case and rewrites it.",
        "Paths: `.` is the folder the command ran in, `inputs/` the valid inputs the cases damage copies of.",
        "Read-only folders are made with `chmod` (or `chattr +i` as root).",
        "",
        "| " + " | ".join(HEADER) + " |",
        "| " + " | ".join("---" for _ in HEADER) + " |",
    ]
    lines += ["| " + " | ".join(cell(text) for text in values) + " |" for values in rows]
    return "\n".join(lines) + "\n"


def documented() -> dict[str, list[str]]:
    """{case id: row} of the committed page."""
    rows = {}
    for line in DOC.read_text().splitlines() if DOC.is_file() else []:
        if line.startswith("| ") and not line.startswith(("| case", "| ---")):
            cells = [part.strip().replace("\\|", "|") for part in _split_cells(line)]
            rows[cells[0]] = cells
    return rows


def _split_cells(line: str) -> list[str]:
    cells, current, escaped = [], "", False
    for char in line.strip()[1:-1]:
        if char == "|" and not escaped:
            cells.append(current)
            current = ""
        else:
            current += char
        escaped = char == "\\"
    return cells + [current]


def main() -> None:
    """Rerun every case and rewrite the page; with ids (or id prefixes) as arguments, rerun only those cases and keep
    the other rows as the page has them."""
    import tempfile

    only = sys.argv[1:]
    kept = documented() if only else {}
    with tempfile.TemporaryDirectory() as folder:
        inputs = make_inputs(Path(folder) / "inputs")
        rows = []
        for case in CASES:
            if only and not case.id.startswith(tuple(only)):
                if case.id in kept:
                    rows.append(kept[case.id])
                continue
            try:
                outcome = run_case(case, inputs, Path(folder) / "cases" / case.id)
            except pytest.skip.Exception as skipped:
                print(f"{case.id}: skipped ({skipped})", file=sys.stderr)
                continue
            rows.append(row(case, outcome))
    DOC.parent.mkdir(exist_ok=True)
    DOC.write_text(render(rows))
    print(f"{DOC}: {len(rows)} cases", file=sys.stderr)


if __name__ == "__main__":
    main()
