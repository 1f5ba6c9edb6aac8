"""Few-shot learning (study.few_shot): every method's recipe per shot count, against its authors' files.

The values below are transcribed from the authors' repositories (read at the commits the recipe files
name): CoOp's COOP.md and scripts/coop/main.sh with configs/trainers/CoOp/vit_b16_ep50.yaml (1 shot),
vit_b16_ep100.yaml (2 and 4 shots), vit_b16.yaml (8 and 16 shots), ImageNet *_ep50 at every shot count;
PromptSRC's vit_b16_c2_ep50_batch4_4+4ctx_few_shot.yaml (scripts/promptsrc/few_shot.sh); MMRL's
vit_b16_few_shot.yaml (ImageNet: vit_b16_imagenet.yaml) run by scripts/mmrl/few_shot.sh, with
trainers/config.py's per-dataset values merged after the file (MMRL's train.py setup_cfg, step 4).
KgCoOp, CoCoOp and MaPLe ship no few-shot setting: their recipe says so and names ours.
"""

from __future__ import annotations

import json

import pytest
import yaml
from typer.testing import CliRunner

from dear.cli import app
from dear.errors import DearError
from dear.methods.recipe import problems, resolve
from dear.config.params import load_params
from tests.fake_run import ROOT
from tests.methods.test_parity import MMRL_REG, TEMPLATES, dassl_lr, our_epoch_lrs

FEWSHOT = ROOT / "configs/fewshot-vitb16.yaml"
SHOTS = (1, 2, 4, 8, 16)
COOP_EPOCHS = {1: 50, 2: 100, 4: 100, 8: 200, 16: 200}  # COOP.md: rn50_ep50 / _ep100 / _ep100 / rn50 / rn50
COOP_FILE = {1: "vit_b16_ep50.yaml", 2: "vit_b16_ep100.yaml", 4: "vit_b16_ep100.yaml", 8: "vit_b16.yaml",
             16: "vit_b16.yaml"}
PROMPTSRC_GPA_45_5 = ("stanford_cars", "oxford_flowers", "fgvc_aircraft", "dtd", "eurosat")  # the config's comment


@pytest.fixture(scope="module")
def params():
    return load_params(FEWSHOT)


def test_the_few_shot_config_is_the_anchors_study(params):
    few = params.study.few_shot_on
    assert few.shots == list(SHOTS) and len(few.datasets) == 11 and params.data.seeds == [1, 2, 3]
    assert params.study.base_to_novel == [] and params.study.transfer_on is None
    assert {"zeroshot", "coop", "cocoop", "kgcoop", "maple", "promptsrc", "mmrl", "dear"} <= set(params.study.methods)
    assert params.train.recipes == {}  # every value is the authors' (or the recipe's stated choice)


def test_the_few_shot_config_is_the_paper_config_but_for_its_study():
    """Everything but the output root, the datasets and the study is configs/paper-vitb16.yaml's (kept in step); the
    report's rows are each study's methods (report.methods: null)."""
    few, paper = (yaml.safe_load(path.read_text()) for path in (FEWSHOT, ROOT / "configs/paper-vitb16.yaml"))
    assert few["report"]["methods"] is None and paper["report"]["methods"] is None
    for raw in (few, paper):
        del raw["output_root"], raw["study"], raw["data"]["datasets"]
    assert few == paper


@pytest.mark.parametrize("shots", SHOTS)
def test_coop_few_shot_is_coop_md_m16_end_per_shot_count(params, shots):
    for dataset in params.study.few_shot.datasets:
        coop = params.train.recipe("coop", dataset, "few_shot", shots)
        assert (coop.ctx_init, coop.n_ctx) == ("", 16)  # main.sh NCTX 16, no CTX_INIT: 16 random vectors
        assert (coop.optimizer, coop.lr, coop.batch_size, coop.warmup_epochs, coop.warmup_lr, coop.crop_scale,
                coop.flip_prob, coop.interpolation, coop.precision, coop.views) == \
            ("sgd", 2e-3, 32, 1, 1e-5, [0.08, 1.0], 0.5, "bicubic", "fp16", None)
        assert coop.epochs == (50 if dataset == "imagenet" else COOP_EPOCHS[shots])
        assert coop.settings["epochs"].source.endswith(
            "vit_b16_ep50.yaml (COOP.md: for ImageNet, *_ep50.yaml for all settings)" if dataset == "imagenet"
            else f"{COOP_FILE[shots]} (COOP.md: {shots} shot{'s' if shots > 1 else ''})")
        assert all(s.kind == "authors" for s in coop.settings.values()), dataset


def test_promptsrc_few_shot_is_its_few_shot_config(params):
    for dataset in params.study.few_shot.datasets:
        for shots in SHOTS:
            run = params.train.recipe("promptsrc", dataset, "few_shot", shots)
            assert (run.batch_size, run.optimizer, run.lr, run.epochs, run.warmup_epochs, run.warmup_lr) == \
                (4, "sgd", 2.5e-3, 50, 1, 1e-5)
            assert (run.n_ctx, run.n_ctx_vision, run.ctx_init, run.text_depth, run.vision_depth) == \
                (4, 4, "a photo of a", 9, 9)
            assert (run.text_loss_weight, run.image_loss_weight, run.precision, run.gpa_epochs) == (25.0, 10.0, "fp16", 50)
            assert (run.gpa_mean, run.gpa_std) == ((45.0, 5.0) if dataset in PROMPTSRC_GPA_45_5 else (30.0, 30.0))
            assert all(s.kind == "authors" for s in run.settings.values())
            assert "vit_b16_c2_ep50_batch4_4+4ctx_few_shot.yaml" in run.settings["gpa_mean"].source


def test_mmrl_few_shot_is_its_few_shot_config_then_its_dataset_values(params):
    for dataset in params.study.few_shot.datasets:
        run = params.train.recipe("mmrl", dataset, "few_shot", 4)
        imagenet = dataset == "imagenet"
        assert (run.optimizer, run.lr, run.batch_size, run.warmup_epochs, run.warmup_lr, run.crop_scale, run.alpha,
                run.tokens, run.start_layer, run.precision, run.fade_in_epochs) == \
            ("adamw", 1e-3, 32, 1, 1e-5, [0.5, 1.0], 0.7, 5, 6, "amp", 0.0)
        assert run.epochs == (5 if imagenet else 50)
        assert run.reg_weight == MMRL_REG[dataset]  # trainers/config.py, merged after the config file
        assert run.rep_dim == (2048 if dataset == "eurosat" else 512)
        assert run.template == TEMPLATES.get(dataset, "a photo of a {}.")
        assert all(s.kind == "authors" for s in run.settings.values())
    world = resolve({}, "mmrl", "world_objects_sketch", "few_shot", 1)  # a dataset config.py does not list
    assert world.reg_weight == 0.5 and "vit_b16_few_shot.yaml" in world.settings["reg_weight"].source


def test_dear_takes_mmrls_few_shot_recipe_as_our_choice(params):
    for dataset in ("eurosat", "imagenet", "dtd"):
        dear, mmrl = (params.train.recipe(m, dataset, "few_shot", 8) for m in ("dear", "mmrl"))
        for key in ("optimizer", "lr", "epochs", "warmup_epochs", "batch_size", "crop_scale", "reg_weight", "rep_dim",
                    "template", "precision", "alpha"):
            assert dear.get(key) == mmrl.get(key), key
            assert dear.settings[key].kind == "ours" and dear.settings[key].source.startswith("as mmrl:")


@pytest.mark.parametrize("method,recipe_file,expected", [
    ("kgcoop", "vit_b16_ep100_ctxv1", {"epochs": 100, "batch_size": 128, "n_ctx": 4, "kg_weight": 8.0, "lr": 2e-3}),
    ("cocoop", "vit_b16_c4_ep10_batch1_ctxv1", {"epochs": 10, "batch_size": 1, "n_ctx": 4, "lr": 2e-3}),
    ("maple", "vit_b16_c2_ep5_batch4_2ctx", {"epochs": 5, "batch_size": 4, "prompt_depth": 9, "lr": 3.5e-3}),
])
def test_methods_without_a_few_shot_setting_say_so_and_name_our_choice(params, method, recipe_file, expected):
    for shots in SHOTS:
        few = params.train.recipe(method, "dtd", "few_shot", shots)
        b2n = params.train.recipe(method, "dtd", "base_to_novel")
        assert few.values == b2n.values  # their one recipe at every shot count
        assert {key: few.get(key) for key in expected} == expected
        restated = [s for s in few.settings.values() if s.source.startswith("no few-shot")]
        assert restated and all(s.kind == "ours" and recipe_file in s.source for s in restated)


def test_zero_shot_clip_trains_nothing_in_few_shot_learning_either(params):
    assert params.train.recipe("zeroshot", "dtd", "few_shot", 1).values == \
        params.train.recipe("zeroshot", "dtd", "base_to_novel").values


@pytest.mark.parametrize("method,dataset,shots,expected", [
    ("coop", "oxford_pets", 1, (2e-3, 50, 1)), ("coop", "oxford_pets", 4, (2e-3, 100, 1)),
    ("coop", "oxford_pets", 16, (2e-3, 200, 1)), ("coop", "imagenet", 16, (2e-3, 50, 1)),
    ("promptsrc", "dtd", 2, (2.5e-3, 50, 1)), ("mmrl", "eurosat", 8, (1e-3, 50, 1)), ("mmrl", "imagenet", 1, (1e-3, 5, 1)),
])
def test_learning_rate_of_every_epoch_is_dassls(params, method, dataset, shots, expected):
    run = params.train.recipe(method, dataset, "few_shot", shots)
    assert (run.lr, run.epochs, run.warmup_epochs) == expected
    ours = our_epoch_lrs(run, steps_per_epoch=3)
    assert ours == pytest.approx([dassl_lr(e, run.lr, run.epochs, run.warmup_epochs, run.warmup_lr)
                                  for e in range(1, run.epochs + 1)], rel=1e-12)
    assert ours[0] == run.warmup_lr and ours[1] == run.lr and ours[-1] > 0


def test_dear_recipe_shows_every_few_shot_job_with_its_sources(params):
    result = CliRunner().invoke(app, ["recipe", "--params", str(FEWSHOT), "--json"])
    assert result.exit_code == 0, result.output
    jobs = json.loads(result.stdout)
    assert len(jobs) == len(params.study.methods) * 11 * len(SHOTS)
    assert {(job["protocol"], job["shots"]) for job in jobs} == {("few_shot", k) for k in SHOTS}
    assert all(setting["source"] for job in jobs for setting in job["settings"].values())
    text = CliRunner().invoke(app, ["recipe", "--params", str(FEWSHOT), "--method", "coop", "--dataset", "dtd"]).stdout
    assert "coop on dtd (few-shot, 1 shot)" in text and "vit_b16_ep50.yaml (COOP.md: 1 shot)" in text


def test_a_config_changes_a_shot_count_of_its_own_and_every_one():
    changes = {"coop": {"few_shot": {"lr": 1.0e-3, "shots": {1: {"epochs": 7}}}}}
    one, four = (resolve(changes, "coop", "dtd", "few_shot", k) for k in (1, 4))
    assert (one.epochs, four.epochs, one.lr, four.lr) == (7, 100, 1e-3, 1e-3)
    assert one.settings["epochs"].source == "train.recipes.coop.few_shot.shots.1.epochs"
    assert one.settings["epochs"].authors == 50 and "train.recipes.coop.few_shot.shots.1.epochs" in one.keys_read
    assert "train.recipes.coop.few_shot.shots.1.epochs" not in four.keys_read
    assert resolve(changes, "coop", "dtd", "base_to_novel").epochs == 200  # the other protocols keep theirs
    assert problems({"coop": {"few_shot": {"shots": {"one": {"epochs": 7}}}}}) == \
        ["train.recipes.coop.few_shot.shots.one: 'one' is not a shot count (an integer >= 1)"]
    assert problems({"coop": {"few_shot": {"epoch": 7}}})[0].startswith("train.recipes.coop.few_shot.epoch: unknown")
    with pytest.raises(DearError, match="give the shot count"):
        resolve({}, "coop", "dtd", "few_shot")
