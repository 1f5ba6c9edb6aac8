"""What each job reads (dear.config.keys), the study's jobs (dear.pipeline.jobs) and what makes an output out of date (dear.pipeline.stale)."""

from pathlib import Path

import pyarrow as pa
import pytest
import yaml

from dear.pipeline import jobs as study_jobs
from dear.runtime.io import record_job, write_json, write_parquet, provenance
from dear.config.keys import flat, reads
from dear.config.params import Params, load_params
from dear.pipeline.stale import out_of_date

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def params() -> Params:
    return load_params(ROOT / "params.yaml")


def changed(params: Params, key: str, value) -> Params:
    raw = params.model_dump(mode="json")
    *parents, leaf = key.split(".")
    node = raw
    for part in parents:
        node = node.setdefault(part, {})
    node[leaf] = value
    return Params.model_validate(raw)


def readers(params: Params, key: str) -> set[str]:
    return {job.name for job in study_jobs.jobs(params) if key in reads(params, job.stage, **job.args)}


def test_the_mmrl_learning_rate_is_read_by_mmrls_training_only(params):
    raised = changed(params, "train.recipes.mmrl.lr", 2.0e-3)
    expected = {f"train@mmrl-{dataset}" for dataset in params.study.base_to_novel} | {"train_transfer@mmrl"}
    assert readers(raised, "train.recipes.mmrl.lr") == expected
    assert readers(params, "train.recipes.mmrl.lr") == set(), "not in the demo's config: the recipe's own value"
    every_method = changed(params, "train.recipes.all.lr", 2.0e-3)
    trained = set(params.study.methods) - {"zeroshot"}
    assert {name.split("@")[1].split("-")[0] for name in readers(every_method, "train.recipes.all.lr")} == \
        trained, "zero-shot CLIP has no learning rate"


def test_a_job_reads_the_keys_its_recipe_takes_from_the_config(params):
    sketch = reads(params, "train", "mmrl", "world_objects_sketch")
    assert sketch["train.recipes.mmrl.datasets.world_objects_sketch.epochs"] == 10
    assert "train.recipes.mmrl.datasets.world_objects_sketch.epochs" not in reads(params, "train", "mmrl",
                                                                                  "world_objects")
    source = reads(params, "train", "coop", "world_objects", "all")  # the transfer source: its own block
    assert source["train.recipes.coop.transfer.epochs"] == 2
    assert "train.recipes.coop.transfer.epochs" not in reads(params, "train", "coop", "world_objects")
    assert reads(params, "train", "zeroshot", "world_objects") == {"compute.device": "auto", "compute.reproducible": True,
                                                                 "data.seeds": [1, 2, 3]}


def test_an_override_added_for_one_dataset_changes_that_jobs_reads_only(params):
    after = changed(params, "train.recipes.all.datasets.world_objects", {"template": "a picture of a {}."})
    for job in study_jobs.jobs(params):
        same = reads(params, job.stage, **job.args) == reads(after, job.stage, **job.args)
        protocol = "transfer" if job.args.get("classes") == "all" else "base_to_novel"
        prompted = job.stage == "train" and job.args["dataset"] == "world_objects" and "template" in \
            params.train.recipe(job.args["method"], "world_objects", protocol).settings  # coop writes no template
        assert same != prompted, job.name
def test_nothing_is_read_that_the_config_does_not_hold(params):
    values = flat(params)
    for job in study_jobs.jobs(params):
        missing = [key for key in reads(params, job.stage, **job.args) if key not in values]
        assert not missing, (job.name, missing)


def test_what_never_changes_an_output_is_read_by_no_job(params):
    for key in ("data.workers", "compute.workers", "train.checkpoint_every", "train.method", "evaluate.reuse_mb",
                "data.max_listed", "model.cache_dir"):
        assert not readers(params, key), key


def test_the_transfer_evaluations_read_the_prompts_of_their_targets(params):
    after = changed(params, "train.recipes.dear.datasets.world_objects_b", {"template": "a drawing of a {}."})
    moved = {job.name for job in study_jobs.jobs(params)
             if reads(params, job.stage, **job.args) != reads(after, job.stage, **job.args)}
    assert moved == {f"evaluate_transfer@{method}" for method in params.study.methods}  # any recipe's: no method


def test_protocols_that_are_off_and_an_unread_world_make_no_job(params):
    names = lambda p: {job.name.split("@")[0] for job in study_jobs.jobs(p)}  # noqa: E731
    assert {"world", "train_transfer", "train"} <= names(params)
    assert "train_transfer" not in names(changed(params, "study.transfer", None))
    assert "train_transfer" not in names(changed(params, "study.transfer.enabled", False))
    assert "train" not in names(changed(params, "study.base_to_novel", []))
    paper = load_params(ROOT / "configs/paper-vitb16.yaml")
    assert "world" not in names(paper), "real data, real weights and no sanity check read no world"


# --- out of date ---------------------------------------------------------------------------------------

def made(path: Path, params: Params, job: study_jobs.Job, seed=None, inputs=None, **job_record) -> None:
    """An output of `job` carrying the provenance a dear command writes (its job record, changed as asked)."""
    record = {"stage": job.stage, "args": job.args, "reads": reads(params, job.stage, **job.args),
              "code": study_jobs.job_code(job).sha256, "code_files": study_jobs.job_code(job).files, **job_record}
    record_job(record)
    try:
        made_by = provenance({}, inputs, seed)
    finally:
        record_job({})
    if path.suffix == ".parquet":
        write_parquet(path, pa.table({"x": [1]}), pa.schema([("x", pa.int64())]), made_by)
    else:
        write_json(path, {"provenance": made_by})


def train_job(params: Params, tmp_path: Path) -> study_jobs.Job:
    job = study_jobs.find(params, "train@mmrl-world_objects")
    return study_jobs.Job(job.name, job.stage, job.args, str(tmp_path / "train"),
                          tuple((seed, str(tmp_path / f"train/seed{seed}/train_log.parquet")) for seed, _ in job.records),
                          job.method, job.dataset)


def test_an_output_made_as_the_config_says_is_up_to_date_and_a_missing_one_is_not_judged(params, tmp_path):
    job = train_job(params, tmp_path)
    assert out_of_date(params, job) is None  # nothing made yet: the engines' own business
    for seed, file in job.records:
        made(Path(file), params, job, seed)
    assert out_of_date(params, job) is None


def test_a_changed_value_is_named_with_what_it_was_and_what_it_is(params, tmp_path):
    job = train_job(params, tmp_path)
    for seed, file in job.records:
        made(Path(file), params, job, seed)
    later = changed(params, "train.recipes.mmrl.lr", 2.0e-3)
    assert out_of_date(later, job) == "train@mmrl-world_objects: train.recipes.mmrl.lr (not set) -> 0.002"
    assert out_of_date(changed(later, "train.recipes.mmrl.lr", 3.0e-3), job) == \
        "train@mmrl-world_objects: train.recipes.mmrl.lr (not set) -> 0.003"
    assert out_of_date(changed(params, "train.recipes.coop.lr", 1.0), job) is None, "a key it does not read"
    assert out_of_date(changed(params, "train.recipes.mmrl.epochs", 6), job) == \
        "train@mmrl-world_objects: train.recipes.mmrl.epochs 4 -> 6"


@pytest.mark.parametrize("why, record, line", [
    ("no record", None, "no record of the values it was made with (made by an older dear, or copied in)"),
    ("another method", {"args": {"method": "coop", "dataset": "world_objects", "classes": "base"}},
     "made by `dear train` with --classes base --dataset world_objects --method coop, this job is --classes base "
     "--dataset world_objects --method mmrl"),
    ("other code", {"code": "0" * 64, "code_files": None}, "the code of `dear train` changed"),
    ("a module changed", {"code": "0" * 64, "code_files": {**study_jobs.code("train", "mmrl").files,
                                                           "dear/methods/mmrl.py": "0" * 64}},
     "the code of `dear train` changed: dear/methods/mmrl.py"),
])
def test_a_foreign_output_is_out_of_date(params, tmp_path, why, record, line):
    job = train_job(params, tmp_path)
    seed, file = job.records[0]
    if record is None:
        write_parquet(Path(file), pa.table({"x": [1]}), pa.schema([("x", pa.int64())]), {"params": {}})
    else:
        made(Path(file), params, job, seed, **record)
    assert out_of_date(params, job) == f"train@mmrl-world_objects: {line}"


def test_an_output_of_another_seed_or_from_changed_inputs_is_out_of_date(params, tmp_path):
    job = train_job(params, tmp_path)
    shots = tmp_path / "fewshot.parquet"
    shots.write_bytes(b"shots")
    seed, file = job.records[0]
    made(Path(file), params, job, seed + 10, inputs={"fewshot": shots})
    assert out_of_date(params, job) == f"train@mmrl-world_objects: made with seed {seed + 10}, this output is seed {seed}"
    made(Path(file), params, job, seed, inputs={"fewshot": shots})
    shots.write_bytes(b"other shots")
    assert out_of_date(params, job) == f"train@mmrl-world_objects: its input {shots} changed"


def test_the_check_stage_writes_each_jobs_values_and_marks_what_is_out_of_date(params, tmp_path, monkeypatch):
    from dear.pipeline import engines

    monkeypatch.chdir(tmp_path)  # the other jobs' outputs (world/, data/...) are not there: not built, not stale
    from dear.pipeline.digest import STALE, write_digests

    job = train_job(params, tmp_path)
    for seed, file in job.records:
        made(Path(file), params, job, seed)
    write_digests(Path(job.folder), "train")
    later = changed(params, "train.recipes.mmrl.lr", 2.0e-3)
    study = [job if other.name == job.name else other for other in study_jobs.jobs(later)]
    lines = engines.run(later, "params.yaml", tmp_path / "jobs", study)
    assert lines == ["out of date: train@mmrl-world_objects: train.recipes.mmrl.lr (not set) -> 0.002"]
    digest = yaml.safe_load((tmp_path / "train/.digest/folder.yaml").read_text())
    assert digest["sha256"] == STALE and digest["files"] == len(job.records)
    values = yaml.safe_load((tmp_path / "jobs/train/mmrl-world_objects.yaml").read_text())
    assert values == {"--method": "mmrl", "--dataset": "world_objects", "--classes": "base",
                      **reads(later, "train", "mmrl", "world_objects")}
    assert len(list((tmp_path / "jobs").rglob("*.yaml"))) == len(study)


def test_the_cost_plan_prices_only_the_jobs_a_study_runs(params):
    """`dear plan` (the cost estimate) counts no transfer job when the protocols are off, and no unread world."""
    from dear.pipeline.plan import planned_jobs

    assert any(job.startswith("train_transfer/") for job in planned_jobs(params))
    assert not any("_transfer/" in job for job in planned_jobs(changed(params, "study.transfer", None)))
    assert "world" not in planned_jobs(load_params(ROOT / "configs/paper-vitb16.yaml"))


def test_few_shot_jobs_read_their_own_shot_counts_keys_and_no_transfer_key(params):
    """A few-shot run reads its recipe's few_shot keys for its own K; its evaluation reads no transfer key; prepare
    of a few-shot dataset reads the shot counts (its per-K tables), the other datasets' prepare does not; collect
    reads them (which runs a method has)."""
    study = changed(params, "study.few_shot", {"datasets": ["world_objects_sketch"], "shots": [1, 4]})
    study = changed(study, "train.recipes.coop.few_shot", {"shots": {1: {"epochs": 3}}})
    key = "train.recipes.coop.few_shot.shots.1.epochs"
    assert readers(study, key) == {"train_fewshot@coop-world_objects_sketch-1"}
    assert readers(study, "study.few_shot.shots") == {"prepare@world_objects_sketch",  # and each method's run list
                                                      *(f"collect@{method}" for method in params.study.methods)}
    evaluate = study_jobs.find(study, "evaluate_fewshot@coop-world_objects_sketch-4")
    assert evaluate.args == {"method": "coop", "classes": "all", "shots": 4}
    assert not any(name.startswith("study.transfer") for name in reads(study, "evaluate", **evaluate.args))
    names = [job.name for job in study_jobs.jobs(study)]
    assert sum(name.startswith("train_fewshot@") for name in names) == len(params.study.methods) * 2
    assert not any("fewshot" in job.name for job in study_jobs.jobs(params))  # params.yaml: off
    off = changed(study, "study.few_shot.enabled", False)
    assert not any("fewshot" in job.name for job in study_jobs.jobs(off))
    prepare = study_jobs.find(study, "prepare@world_objects_sketch")
    assert (3, "data/world_objects_sketch/fewshot-shots4-seed3.parquet") in prepare.records  # (seed, file)
