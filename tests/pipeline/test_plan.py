"""dear.pipeline.plan: the work a config's jobs do, the fit of a stage's time to it, and the plan of the paper config."""

import math

import numpy as np
import pytest
import yaml

from dear.config.params import load_params
from dear.pipeline.plan import fit, image_gflops, planned_jobs, prompt_gflops, size, work
from tests import tiny_study

ROOT = tiny_study.ROOT


def test_a_models_gflops_come_from_its_architecture():
    # ViT-B/16: 12 layers of width 768 over 197 tokens: 2 * 12 * (12 * 197 * 768^2 + 2 * 197^2 * 768) = 34.9 GFLOPs
    # (the usual count is 17.6 G multiply-adds); its text tower: 12 layers of 512 over 77 tokens
    assert image_gflops("ViT-B-16") == pytest.approx(34.895, abs=0.01)
    assert prompt_gflops("ViT-B-16") == pytest.approx(2 * 12 * (12 * 77 * 512**2 + 2 * 77**2 * 512) / 1e9)
    assert image_gflops("dear-world-tiny") < image_gflops("ViT-B-16") / 100


def test_a_training_jobs_work_grows_with_seeds_epochs_shots_and_classes(tmp_path):
    params = load_params(tiny_study.write(tmp_path / "params.yaml"))
    classes = size(params, "world_objects").classes
    base = math.ceil(classes / 2)
    recipe = params.train.recipe("coop", "world_objects", "base_to_novel")
    epochs, batch = recipe.epochs, recipe.batch_size
    images = params.data.shots * base
    image, prompt = image_gflops(params.model.arch), prompt_gflops(params.model.arch)
    expected = 2 * (epochs * images * 3 * image + epochs * math.ceil(images / batch) * base * 3 * prompt)
    assert work(params, "train/coop/world_objects") == pytest.approx(expected)
    assert work(params, "train/zeroshot/world_objects") == 0.0
    shots = params.data.shots + params.data.val_shots  # the linear probe: one forward pass of each shot, no epochs
    assert work(params, "train/linear_probe/world_objects") == pytest.approx(2 * shots * base * image)
    raw = yaml.safe_load((tmp_path / "params.yaml").read_text())
    raw["data"]["seeds"] = [1, 2, 3, 4]
    (tmp_path / "more.yaml").write_text(yaml.safe_dump(raw))
    more = load_params(tmp_path / "more.yaml")
    assert work(more, "train/coop/world_objects") == pytest.approx(2 * expected)
    assert work(more, "evaluate/coop/world_objects") == pytest.approx(2 * work(params, "evaluate/coop/world_objects"))
    assert work(more, "prepare/world_objects") == work(params, "prepare/world_objects")


def test_the_paper_configs_jobs_and_sizes_are_known_before_its_data_is_there():
    params = load_params(ROOT / "configs/paper-vitb16.yaml")
    jobs = planned_jobs(params)
    methods, datasets = len(params.study.methods), len(params.study.base_to_novel)
    assert sum(job.startswith("train/") for job in jobs) == methods * datasets
    assert sum(job.startswith("prepare/") for job in jobs) == len(params.data.datasets)
    assert size(params, "imagenet").test == 50_000 and size(params, "oxford_pets").classes == 37
    # ImageNet's evaluation (the transfer source and its 14 targets) outweighs any base-to-novel dataset's
    assert work(params, "evaluate_transfer/dear") > 10 * work(params, "evaluate/dear/dtd")


def test_a_stages_fit_separates_its_fixed_cost_from_its_rate():
    work_done = np.array([0.0, 10.0, 20.0, 40.0])
    overhead, rate = fit(work_done, 5.0 + 0.5 * work_done)
    assert (overhead, rate) == (pytest.approx(5.0), pytest.approx(0.5))
    # one size of job: overhead and rate cannot be told apart, so the time scales in proportion to the work
    assert fit(np.array([10.0, 10.0]), np.array([7.0, 9.0])) == (0.0, pytest.approx(0.8))
    assert fit(np.array([0.0, 0.0]), np.array([3.0, 5.0])) == (4.0, 0.0)  # no work (zero-shot training): a fixed cost
    # two seeds a job: the fixed cost is a run's (each seed builds its model), so 3 seeds would cost 3 of them
    assert fit(np.array([0.0, 0.0]), np.array([6.0, 10.0]), np.array([2.0, 2.0])) == (4.0, 0.0)
    overhead, rate = fit(work_done, 2 * 5.0 + 0.5 * work_done, np.full(4, 2.0))
    assert (overhead, rate) == (pytest.approx(5.0), pytest.approx(0.5))
    # timed apart by load (the larger job the faster): never a negative rate, and never all of it overhead,
    # which would price a config a thousand times larger at its fixed costs alone (CI, 2 busy cores)
    overhead, rate = fit(np.array([1.0, 2.0]), np.array([10.0, 9.0]))
    assert overhead <= 9.0 and rate > 0.0


def test_a_stage_whose_times_do_not_grow_with_work_is_priced_at_the_devices_rate():
    """The work is GFLOPs of one model on one device: the rate is fitted over every stage's jobs (an overhead each)."""
    import pandas as pd

    from dear.pipeline.plan import pooled_rate

    grows = np.array([0.0, 10.0, 20.0, 40.0])
    jobs = pd.DataFrame({"rule": ["evaluate"] * 4 + ["train"] * 2, "work": [*grows, 4.0, 4.0],
                         "seconds": [*(5.0 + 0.5 * grows), 9.0, 11.0], "runs": [1.0] * 6})
    assert pooled_rate(jobs) == pytest.approx(0.5)
    assert pooled_rate(jobs.assign(work=0.0)) == 0.0  # nothing did work: no rate to share


def test_a_rate_that_explains_almost_none_of_the_time_counts_as_no_rate():
    import pandas as pd

    from dear.pipeline.plan import shows_no_work

    seen = pd.DataFrame({"work": [0.0, 1.3], "seconds": [5.4, 5.38]})
    assert shows_no_work(3.5e-15, seen)  # CI: a training stage priced at 3.5e-15 s per unit of work
    assert not shows_no_work(1.0, seen) and not shows_no_work(0.0, seen.assign(work=0.0))


def test_the_few_shot_config_is_priced_from_a_record_without_few_shot_jobs(tmp_path):
    """configs/fewshot-vitb16.yaml: one job per method x dataset x K; a record of a base-to-novel run prices its
    few-shot stages at the record's train, fuse and evaluate rates (the same units of work)."""
    from dear.pipeline.plan import plan

    fewshot = load_params(ROOT / "configs/fewshot-vitb16.yaml")
    jobs = planned_jobs(fewshot)
    methods = len(fewshot.study.methods)
    assert sum(job.startswith("train_fewshot/") for job in jobs) == methods * 11 * 5
    assert not any(job.startswith(("train/", "train_transfer/")) for job in jobs)
    one, sixteen = (work(fewshot, f"train_fewshot/mmrl/dtd/shots{k}") for k in (1, 16))
    assert 12 * one < sixteen < 16 * one  # MMRL: 50 epochs at every K, 16 times the images (the prompts' steps less)
    coop = [work(fewshot, f"train_fewshot/coop/dtd/shots{k}") for k in (1, 2, 16)]
    assert coop[1] > 2 * coop[0] and coop[2] > 8 * coop[1]  # CoOp's epochs grow with K too (50, 100, 200)
    assert work(fewshot, "evaluate_fewshot/dear/imagenet/shots1") == pytest.approx(
        3 * (50_000 * image_gflops("ViT-B-16") + 1000 * prompt_gflops("ViT-B-16")))

    recorded = load_params(tiny_study.write(tmp_path / "params.yaml"))
    record = {"params": recorded.model_dump(mode="json"),
              "jobs": [{"job": job, "rule": job.split("/")[0], "seconds": 10.0 + work(recorded, job) * 1e-3,
                        "max_rss_mb": 500.0} for job in planned_jobs(recorded)]}
    frame = plan(fewshot, record).set_index("rule")
    for rule in ("train_fewshot", "fuse_fewshot", "evaluate_fewshot"):
        assert frame.loc[rule, "seconds"] > 0 and "the record ran no" in frame.loc[rule, "basis"], rule
