"""params.yaml: one strict reading, shared by dear, DVC and Snakemake."""

import shutil
import subprocess
import sys
from pathlib import Path

import re

import pytest
import yaml

from dear.errors import DearError
from dear.config.params import json_schema, load_params, read_yaml

ROOT = Path(__file__).resolve().parents[2]
PARAMS = ROOT / "params.yaml"


def _leaves(tree, prefix=""):
    """Flatten nested mappings/lists into {dotted key: (type name, value)}."""
    if isinstance(tree, dict):
        out = {}
        for key, value in tree.items():
            out.update(_leaves(value, f"{prefix}{key}."))
        return out
    if isinstance(tree, list):
        out = {}
        for index, value in enumerate(tree):
            out.update(_leaves(value, f"{prefix}{index}."))
        return out
    return {prefix.rstrip("."): (type(tree).__name__, tree)}


def test_dvc_and_snakemake_read_every_value_identically():
    from dvc.utils.serialize import load_yaml as dvc_load_yaml
    from snakemake.common.configfile import load_configfile

    by_dvc = _leaves(dict(dvc_load_yaml(str(PARAMS))))
    by_snakemake = _leaves(load_configfile(str(PARAMS)))
    by_dear = _leaves(read_yaml(PARAMS))
    assert by_dvc == by_snakemake == by_dear
    assert len(by_dear) > 5


def test_params_yaml_is_valid():
    load_params(PARAMS)


def test_committed_schema_is_generated_from_the_models():
    committed = yaml.safe_load((ROOT / "workflow/schemas/params.schema.yaml").read_text())
    assert committed == json_schema(), "run: python -m dear.config.params > workflow/schemas/params.schema.yaml"


def test_snakemake_schema_accepts_params_and_rejects_an_unknown_key():
    from snakemake.exceptions import WorkflowError
    from snakemake.utils import validate

    config = read_yaml(PARAMS)
    validate(config, str(ROOT / "workflow/schemas/params.schema.yaml"))
    config["data"]["shotz"] = 3
    with pytest.raises(WorkflowError):
        validate(config, str(ROOT / "workflow/schemas/params.schema.yaml"))


def _edited(tmp_path, edit) -> Path:
    raw = read_yaml(PARAMS)
    edit(raw)
    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


@pytest.mark.parametrize(
    "edit, expected",
    [
        (lambda p: p["data"].update(shotz=4), "unknown key 'data.shotz'"),
        (lambda p: p["data"].pop("shots"), "missing key 'data.shots' (expected int)"),
        (lambda p: p["data"].update(shots="16"), "key 'data.shots' must be int"),
        (lambda p: p["data"].update(verify="maybe"), "key 'data.verify' must be one of decode | exists | none"),
        (lambda p: p["data"].update(seeds=[1, "two"]), "key 'data.seeds.1' must be int"),
        (lambda p: p.pop("data"), "missing key 'data'"),
    ],
)
def test_bad_params_fail_with_one_line_naming_key_file_and_type(tmp_path, edit, expected):
    path = _edited(tmp_path, edit)
    with pytest.raises(DearError) as err:
        load_params(path)
    message = str(err.value)
    assert expected in message
    assert str(path) in message
    assert "\n" not in message


def test_exponent_without_dot_is_refused_with_what_to_write(tmp_path):
    path = tmp_path / "params.yaml"
    path.write_text(PARAMS.read_text().replace("shots: 16", "shots: 1e3"))
    with pytest.raises(DearError, match=r"line \d+: key 'data.shots': 1e3 is text in YAML 1.1 .* write 1000.0"):
        load_params(path)


def test_a_quoted_exponent_still_gets_a_hint(tmp_path):
    path = tmp_path / "params.yaml"
    path.write_text(PARAMS.read_text().replace("lr: 1.0e-3", "lr: '1e-3'", 1))
    with pytest.raises(DearError, match="got str '1e-3' \\(quoted in the file, so it is text: remove the quotes\\)"):
        load_params(path)


def test_cli_reports_bad_params_in_one_line_with_exit_1(tmp_path):
    path = _edited(tmp_path, lambda p: p["data"].update(shots="many"))
    dear = shutil.which("dear", path=str(Path(sys.executable).parent))
    result = subprocess.run([dear, "prepare", "--params", str(path), "--dataset", "x", "--out", str(tmp_path / "o")],
                            capture_output=True, text=True)
    assert result.returncode == 1
    assert result.stderr.strip().count("\n") == 0
    assert "data.shots" in result.stderr and "Traceback" not in result.stderr
    assert not (tmp_path / "o").exists()


def test_missing_params_file_is_a_clean_error(tmp_path):
    with pytest.raises(DearError, match="parameters file not found"):
        load_params(tmp_path / "nope.yaml")


@pytest.mark.parametrize("path", sorted((ROOT / "configs").glob("*.yaml")), ids=lambda p: p.name)
def test_shipped_configs_are_valid(path):
    load_params(path)


def test_a_run_resolves_its_recipe_per_dataset_and_for_the_transfer_source():
    """Layers in order: the authors' defaults, dataset, transfer; then the config's `all`, then the method's."""
    params = load_params(PARAMS, ["train.recipes.mmrl={epochs: 4, warmup_epochs: 1, datasets: {a: {epochs: 9}}, "
                                  "transfer: {epochs: 2, warmup_epochs: 0}}", "train.recipes.all={lr: 2.0e-3}"])
    run = params.train.recipe
    assert (run("mmrl", "b", "base_to_novel").epochs, run("mmrl", "b", "base_to_novel").warmup_epochs) == (4, 1)
    assert run("mmrl", "a", "base_to_novel").epochs == 9
    assert (run("mmrl", "a", "transfer").epochs, run("mmrl", "a", "transfer").warmup_epochs) == (2, 0)
    assert run("mmrl", "a", "transfer").batch_size == 32  # MMRL's cross-dataset config, not changed here
    assert run("coop", "a", "base_to_novel").lr == run("mmrl", "a", "base_to_novel").lr == 2.0e-3
    epochs = run("mmrl", "a", "base_to_novel").settings["epochs"]
    assert (epochs.kind, epochs.source, epochs.authors) == ("ours", "train.recipes.mmrl.datasets.a.epochs", 10)
    paper = load_params(ROOT / "configs/paper-vitb16.yaml").train.recipe
    same = paper("coop", "imagenet", "base_to_novel").settings["epochs"]  # untouched: the authors', with the file
    assert (same.value, same.kind) == (50, "authors") and same.source.endswith("vit_b16_ep50_ctxv1.yaml")


def _trained_recipes() -> str:
    """The recipes with Dassl's trainer keys (precision fp16 | amp | fp32 | bf16), as an error lists them."""
    from dear.methods import REGISTRY
    from dear.methods.recipe import load

    return ", ".join(sorted(name for name in {entry.recipe for entry in REGISTRY.values()} if load(name).trains))


@pytest.mark.parametrize("change,message", [
    ("train.recipes.mmrl.epoch=3", "train.recipes.mmrl.epoch: unknown recipe key; remove it or fix its spelling "
                                   "(did you mean epochs?)"),
    ("train.recipes.coop.lr='1e-3'", "train.recipes.coop.lr: must be a finite number, got '1e-3' (YAML 1.1"),
    ("train.recipes.coop.lr=1e-3", "--set train.recipes.coop.lr=1e-3: 1e-3 is text in YAML 1.1 (dear, Snakemake) but "
                                   "the number 0.001 in YAML 1.2 (DVC); write 0.001"),
    ("train.recipes.coop.template=x", "train.recipes.coop.template: unknown recipe key"),
    ("train.recipes.cocop={}", "train.recipes.cocop: no recipe named 'cocop'"),
    ("train.recipes.all.datasets.x.precision=fp8", "train.recipes.all.datasets.x.precision: must be one of "
                                                   f"fp16 | amp | fp32 | bf16 for {_trained_recipes()}, got 'fp8'"),
    ("train.recipes.all.precision=amp", "train.recipes.all.precision: must be one of fp16 | fp32 | bf16 for "
                                        "linear_probe, zeroshot, got 'amp'"),
    ("train.method=nope", "unknown method 'nope'"),
    ("study.methods=[coop, coop]", "listed twice"),
])
def test_a_bad_recipe_change_is_one_line_naming_its_key(change, message):
    with pytest.raises(DearError, match=re.escape(message)):
        load_params(PARAMS, [change])
