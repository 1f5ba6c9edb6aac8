"""Training lengths fit the data (issue 39): a copied params.yaml kept the demo's epochs, and CoOp made about ten
optimizer steps on 8 classes x 4 shots, identical to zero-shot on every seed, with no word anywhere.

A dataset of one's own trains at least `FEWEST_STEPS` optimizer steps (the recipes' `own` layer: `min_steps`, a
value of ours), `dear recipe` shows it with its source, and a run of fewer steps warns in its log and the report.
"""

from __future__ import annotations

import dataclasses
import math

import pytest
from typer.testing import CliRunner

from dear.cli import app
from dear.data.coop import SPECS
from dear.methods import REGISTRY
from dear.methods.recipe import FEWEST_STEPS, NOT_SET, lengthened, load, resolve, steps_per_epoch
from dear.config.params import load_params
from dear.pipeline.runrecord import read_model
from dear.stages.report import short_runs
from dear.stages.train import short_run
from dear.train.data import Schedule
from fake_coop import write_params
from tests import fake_run
from tests.own_data import imagefolder


def test_fewest_steps_is_the_shortest_base_to_novel_run_of_the_baselines_authors():
    """Every Dassl-trained method at its authors' base-to-novel recipe on CoOp's eleven datasets: the base half of
    the classes (CoOp's ceil(n / 2)) at 16 shots, Dassl's steps an epoch. Never chosen on anyone's accuracy."""
    steps = {}
    for method, entry in REGISTRY.items():
        if not load(entry.recipe).trains or "base_to_novel" not in entry.protocols or entry.plain:
            continue  # nothing trains, or its authors run few-shot learning only (Tip-Adapter-F, CLIP-LoRA), or a
            # `+roles` variant (its plain method's recipe: no author ran it)
        for dataset, spec in SPECS.items():
            if spec.test_only or spec.coop_classes is None or dataset.startswith("world_"):
                continue
            recipe = resolve({}, method, dataset, "base_to_novel")
            images = math.ceil(spec.coop_classes / 2) * 16
            steps[method, dataset] = recipe.epochs * steps_per_epoch(images, recipe.batch_size)
    assert min(steps.values()) == FEWEST_STEPS
    assert sorted(key for key, value in steps.items() if value == FEWEST_STEPS) == [("kgcoop", "eurosat"),
                                                                                  ("maple", "eurosat")]
    (own,) = load("dassl").own
    assert own.kind == "ours" and own.values == {"min_steps": FEWEST_STEPS}


def test_dassl_s_steps_an_epoch_drop_the_last_short_batch_only_when_a_full_one_exists():
    assert [steps_per_epoch(n, 32) for n in (1, 16, 31, 32, 63, 64, 304)] == [1, 1, 1, 1, 1, 2, 9]


@pytest.fixture
def own_params(tmp_path, monkeypatch):
    """A config with a dataset of one's own, `mine`: 6 colour classes (3 base) of 6 training images."""
    monkeypatch.chdir(tmp_path)
    imagefolder(tmp_path / "mine")
    return write_params(tmp_path / "params.yaml", root="nowhere", datasets=["mine"], source="coop", shots=2,
                        seeds=[1], workers=1, custom={"mine": {"format": "imagefolder", "path": "mine"}})


def test_a_dataset_of_ones_own_trains_at_least_the_fewest_steps(own_params):
    params = load_params(own_params)
    for method, entry in REGISTRY.items():
        recipe = params.train.recipe(method, "mine", "base_to_novel")
        if load(entry.recipe).trains:
            setting = recipe.settings["min_steps"]
            assert (setting.value, setting.kind) == (FEWEST_STEPS, "ours") and "docs/your-data.md" in setting.source
            assert params.train.recipe(method, "eurosat", "base_to_novel").min_steps is None  # built-in: the authors'
        else:
            assert "min_steps" not in recipe.settings  # zero-shot, linear probe: no optimizer steps
    coop = params.train.recipe("coop", "mine", "base_to_novel")  # the demo's epochs: 10, the authors' 200
    assert (coop.epochs, coop.settings["epochs"].authors) == (10, 200)
    longer = lengthened(coop, 6)  # 3 base classes x 2 shots: one short batch an epoch
    assert longer.epochs == FEWEST_STEPS and longer.settings["epochs"].kind == "ours"
    assert longer.settings["epochs"].authors == 200 and "min_steps 100: 6 training images at batch 32 make 1 step(s)" \
        in longer.settings["epochs"].source
    assert {key: s.value for key, s in longer.settings.items() if key != "epochs"} == \
        {key: s.value for key, s in coop.settings.items() if key != "epochs"}
    assert lengthened(coop, 32 * 20) is coop  # 20 steps an epoch x 10 epochs: enough as it is
    assert short_run(longer, _epochs(longer, 6)) is None
    assert short_run(coop, _epochs(coop, 6)) == (
        "coop on mine: 10 optimizer steps (10 epochs of 1 at batch 32, 6 training images), fewer than the 100 of the "
        "shortest base-to-novel run of the baselines' authors; raise train.recipes.coop.epochs or min_steps "
        "(docs/your-data.md#training-lengths)")
    mmrl = params.train.recipe("mmrl", "mine", "base_to_novel")  # the demo's batch 32 and 4 epochs, the authors' 10
    assert (mmrl.batch_size, mmrl.epochs) == (32, 4)
    assert lengthened(mmrl, 64).epochs == 50 and lengthened(mmrl, 64).settings["epochs"].authors == 10
    unset = resolve({"all": {"min_steps": None}}, "coop", "mine", "base_to_novel", own=True)
    assert lengthened(unset, 6) is unset and unset.settings["min_steps"].authors is NOT_SET


def _epochs(recipe, images: int) -> Schedule:
    """The trainer's schedule of a run of whole epochs on `images` shots."""
    return Schedule(n=images, batch_size=recipe.batch_size, epochs=recipe.epochs, seed=1)


def test_a_run_counted_in_iterations_is_checked_by_its_steps_not_its_epochs():
    """CLIP-LoRA's recipe has no epochs (null): its length is iterations_per_shot x K steps (the smoke's CI run
    broke on `None * steps`)."""
    lora = resolve({"clip_lora": {"iterations_per_shot": 10}}, "clip_lora", "world_objects", "transfer")
    assert lora.epochs is None
    short = Schedule(n=2 * 5, batch_size=32, epochs=1, seed=1, drop_last=False, steps=10 * 2)
    assert short_run(lora, short) == (
        "clip_lora on world_objects: 20 optimizer steps (iterations_per_shot 10 x the shots of a class), fewer than "
        "the 100 of the shortest base-to-novel run of the baselines' authors; raise "
        "train.recipes.clip_lora.iterations_per_shot (docs/your-data.md#training-lengths)")
    assert short_run(lora, dataclasses.replace(short, steps=500 * 2)) is None


def test_dear_recipe_shows_min_steps_with_its_source_and_the_epochs_it_makes(own_params):
    result = CliRunner().invoke(app, ["recipe", "--params", str(own_params), "--method", "coop"])
    assert result.exit_code == 0, result.output
    line = next(line for line in result.output.splitlines() if line.strip().startswith("min_steps"))
    assert "100" in line and "ours: the fewest steps of the authors' base-to-novel runs" in line
    assert "min_steps 100: the epochs are raised until a run takes at least 100 optimizer steps (how many: once " \
           "`dear prepare` has picked the shots)" in result.output
    prepared = CliRunner().invoke(app, ["prepare", "--params", str(own_params), "--dataset", "mine", "--out",
                                        "data/mine"])
    assert prepared.exit_code == 0, prepared.output
    result = CliRunner().invoke(app, ["recipe", "--params", str(own_params), "--method", "coop"])
    assert "on its 6 prepared training shots (seed 1), 100 epochs of 1 step(s), 100 steps" in result.output


def test_a_short_run_warns_in_its_log_and_in_the_report(tmp_path):
    params = fake_run.prepared_project(tmp_path)  # a built-in dataset, one epoch: a handful of steps
    data, log = tmp_path / "data/world_objects", tmp_path / "train.log"
    fake_run.invoke("train", "--params", params, "--method", "coop", "--dataset", "world_objects", "--seed", 1,
                    "--backbone", tmp_path / "backbone", "--fewshot", data / "fewshot-seed1.parquet",
                    "--out", tmp_path / "run/train/seed1", "--checkpoint", tmp_path / "ckpt.pt", "--log", log)
    model = read_model(tmp_path / "run/train/seed1/model.pt")
    assert 0 < model["steps"] < FEWEST_STEPS
    assert f"coop on world_objects: {model['steps']} optimizer steps" in log.read_text()
    (note,) = short_runs([model, {**model, "seed": 2}, {**model, "method": "zeroshot", "steps": 0}])
    assert note.startswith(f"**Short training.** These runs took fewer than {FEWEST_STEPS} optimizer steps")
    assert f"coop on world_objects (base-to-novel): {model['steps']} steps (seed 1), {model['steps']} steps (seed 2)" \
        in note and "zeroshot" not in note
    assert "Raise their epochs (`train.recipes.coop.epochs`)" in note  # the method named, no placeholder
    (note,) = short_runs([model, {**model, "method": "dear_nomask"}])
    assert "(`train.recipes.coop.epochs`, `train.recipes.dear.epochs`)" in note  # dear_nomask reads dear's recipe
    assert short_runs([{**model, "steps": FEWEST_STEPS}]) == []


def test_a_run_counted_in_iterations_trains_through_dear_train_and_warns_by_its_steps(tmp_path):
    """CLIP-LoRA through the stage, as the smoke study runs it (epochs null: the warning once multiplied None)."""
    params = fake_run.prepared_project(tmp_path, {"clip_lora": {"iterations_per_shot": 3}})
    data, log = tmp_path / "data/world_objects", tmp_path / "train.log"
    fake_run.invoke("train", "--params", params, "--method", "clip_lora", "--dataset", "world_objects", "--seed", 1,
                    "--classes", "all", "--backbone", tmp_path / "backbone", "--fewshot", data / "fewshot-seed1.parquet",
                    "--out", tmp_path / "run/train/seed1", "--checkpoint", tmp_path / "ckpt.pt", "--log", log)
    model = read_model(tmp_path / "run/train/seed1/model.pt")
    assert model["steps"] == 3 * 2  # iterations_per_shot x 2 shots a class
    assert "clip_lora on world_objects: 6 optimizer steps (iterations_per_shot 3 x the shots of a class)" \
        in log.read_text()
