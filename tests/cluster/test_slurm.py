"""The pipeline on a real (one-node) Slurm: every job goes through the scheduler, and failures are handled.

Run by `make test-cluster` only (marker `cluster`, deselected by the default addopts): it
needs the cluster of `scripts/slurm-local.sh start` and SLURM_CONF pointing at it.
"""

from __future__ import annotations

import copy
import json
import os
import signal
import subprocess
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import pyarrow.parquet as pq
import pytest
import torch
import yaml

from dear.data.world import tiny_params
from dear.methods.trained import read_trained
from tests.cluster.slurm import (LOCAL_RULES, PROFILE, SNAKEMAKE_TIMEOUT_S, Run, fail_with_output, gpu_rules,
                                 memory_mb, requested_mem_mb, run_snakemake, slurm, slurm_available, slurm_jobs,
                                 start_snakemake, submissions, wait_for)
from tests import tiny_study
from tests.engines import BIN, ROOT, engine_env, make_project
from tests.fake_coop import JSON_LAYOUT, make_fake_dataset
from tests.fake_run import small_recipes, tiny_depths

pytestmark = pytest.mark.cluster

# --- what the cluster tests run: point them at a larger tiny pipeline by changing these ----------
DATASETS = ["oxford_pets", "dtd"]          # fake CoOp datasets of the study
TARGETS = [f"data/{name}" for name in DATASETS]   # what snakemake is asked to make (prepare's folders)
DATA_OVERRIDES = dict(source="coop", seeds=[1], shots=2, val_shots=1, verify="decode", workers=1)


def study_params(data_root: Path, extra_datasets: list[str] = (), overrides: dict | None = None) -> str:
    """The repository's params.yaml, its study made of the fake DATASETS (plus `extra_datasets` prepared too).

    `overrides` ({section: {key: value}}) replace single values, e.g. a longer training.
    """
    params = yaml.safe_load((ROOT / "params.yaml").read_text())
    params.update(tiny_params())  # the test-sized world, model and backbone
    params["data"].update(DATA_OVERRIDES, root=str(data_root), datasets=[*DATASETS, *extra_datasets])
    for name, values in (overrides or {}).items():
        params[name].update(values)
    tiny_depths(params["train"])
    params["study"]["base_to_novel"] = list(DATASETS)
    params["study"]["transfer"].update(source=DATASETS[0], cross_dataset=DATASETS[1:],
                                       domain_generalization=DATASETS[1:])
    # the test-sized profile: `dear check` (Snakemake's onstart) refuses svd_rank 80 on a few fake images
    params["profile"].update({**tiny_study.params()["profile"], "dataset": DATASETS[0]})
    return yaml.safe_dump(params, sort_keys=False)


@pytest.fixture(scope="module", autouse=True)
def cluster():
    if not slurm_available():
        pytest.fail("Slurm is not installed: run scripts/slurm-local.sh install (or `make test-cluster`)")
    try:
        state = slurm("sinfo", "-h", "-o", "%t")
    except AssertionError as err:
        pytest.fail(f"no Slurm answers ({err}); start one: scripts/slurm-local.sh start")
    assert "idle" in state or "mix" in state or "alloc" in state, f"Slurm node not usable: {state!r}"


def new_project(folder: Path, data_root: Path, extra_datasets: list[str] = (), overrides: dict | None = None) -> Path:
    """A copy of the pipeline (Slurm profile included) on fake data."""
    extra_datasets = [name for name in extra_datasets if name not in DATASETS]
    for name in [*DATASETS, *extra_datasets]:
        make_fake_dataset(data_root, name)
    project = make_project(folder / "project", study_params(data_root, extra_datasets, overrides))
    # test_params guards the committed schema; here it must describe the params this test runs with
    schema = subprocess.run([str(BIN / "python"), "-m", "dear.config.params"], env=engine_env(), capture_output=True,
                            text=True, check=True).stdout
    (project / "workflow" / "schemas" / "params.schema.yaml").write_text(schema)
    return project


def profile_of(project: Path) -> dict:
    return yaml.safe_load((project / PROFILE / "config.yaml").read_text())


def run_jobs(run) -> dict[str, dict[str, str]]:
    """Slurm's record of each job this run submitted."""
    return {job_id: job for job_id, job in slurm_jobs().items() if job.get("JobName") == run.run_id}


def rule_of(job: dict[str, str]) -> str:
    """The plugin names the rule in the job's comment: rule_<rule>_wildcards_<values>."""
    return job["Comment"].strip().removeprefix("rule_").split("_wildcards_")[0]


def summarize(log_file: Path) -> str:
    script = ROOT / "workflow" / "scripts" / "summarize_failures.py"
    return subprocess.run([str(BIN / "python"), str(script), str(log_file)], capture_output=True, text=True,
                          check=True).stdout


def test_the_study_runs_every_job_through_slurm_and_a_rerun_submits_nothing(tmp_path):
    data_root = tmp_path / "coop"
    project = new_project(tmp_path, data_root)

    run = run_snakemake(project, *TARGETS)
    assert run.returncode == 0, fail_with_output(run, "the study failed on Slurm")
    assert run.run_id and run.remote_jobs_planned() > 0, fail_with_output(run, "no jobs planned")
    assert len(run.submitted) == run.remote_jobs_planned(), fail_with_output(run, "not every job was submitted")
    jobs = run_jobs(run)
    assert set(jobs) == set(run.submitted), "Slurm does not know every job Snakemake submitted"
    assert {job["JobState"] for job in jobs.values()} == {"COMPLETED"}
    assert Counter(rule_of(job) for job in jobs.values()) == {
        rule: count for rule, count in run.planned.items() if rule not in LOCAL_RULES}
    gpu = gpu_rules(profile_of(project))
    for job in jobs.values():  # GPU stages asked for the placeholder GPU, CPU stages did not
        assert ("gpu" in job.get("TresPerJob", "")) == (rule_of(job) in gpu), job
    for name in DATASETS:
        assert (project / "data" / name / "manifest.parquet").is_file()

    jobs_before = set(slurm_jobs())
    again = run_snakemake(project, *TARGETS)
    assert again.returncode == 0, fail_with_output(again, "the rerun failed")
    assert "Nothing to be done" in again.output, fail_with_output(again, "the rerun had work to do")
    assert not again.submitted and set(slurm_jobs()) == jobs_before, "the rerun submitted jobs"


def test_keep_going_finishes_unrelated_datasets_and_lists_the_failed_job_with_its_logs(tmp_path):
    data_root, broken = tmp_path / "coop", "eurosat"
    project = new_project(tmp_path, data_root, [broken])
    # its split file is damaged: a missing one `dear check` (Snakemake's onstart) would refuse before any job
    (data_root / broken / JSON_LAYOUT[broken][1]).write_text("{not json")

    run = run_snakemake(project, *TARGETS, f"data/{broken}", "--keep-going", "--retries", "0")
    assert run.returncode != 0, fail_with_output(run, "a run with a broken dataset succeeded")
    for name in DATASETS:
        assert (project / "data" / name / "manifest.parquet").is_file(), f"{name} did not finish"
    assert not (project / "data" / broken / "manifest.parquet").exists()
    states = {job["Comment"].strip(): job["JobState"] for job in run_jobs(run).values()}
    assert states.pop(f"rule_prepare_wildcards_{broken}") == "FAILED"
    assert states and set(states.values()) == {"COMPLETED"}, states  # every job but the broken one

    summary = summarize(run.log_file)
    assert summary.startswith("1 failed job(s)"), summary
    assert f"rule prepare -> data/{broken} " in summary and "FAILED" in summary
    stage_log = f"logs/prepare/{broken}.log"
    slurm_log = next(path for path in run.submitted.values() if f"/{broken}/" in path)
    assert stage_log in summary and slurm_log in summary, summary
    assert "why: " in summary and "not valid JSON" in summary, summary  # the stage log's last line
    assert "split_zhou_EuroSAT.json: not valid JSON" in (project / stage_log).read_text()
    assert Path(slurm_log).is_file()


# --- a job killed by the scheduler mid-run -------------------------------------------------------

@dataclass(frozen=True)
class KillCase:
    """A job that `scancel` kills mid-run; resubmitted (the profile's retries), it must end as an uninterrupted run."""

    rule: str
    dataset: str
    target: str
    slurm_log_dir: str                                    # logs/slurm/<this>/<jobid>.log: tells its Slurm jobs apart
    stall: Callable[[Path], None]                         # (data root) before the run: make the first attempt hang
    started: Callable[[Path], bool]                       # (project) True once the job is mid-run: cancel it now
    unstall: Callable[[Path], None]                       # (data root) before cancelling: let the next attempt finish
    same_as_uninterrupted: Callable[[Path, Path], None]   # (project, reference project): assert equal results
    params: dict = field(default_factory=dict)           # {section: {key: value}} over the study's params


def nothing(_: Path) -> None:
    """No stall: the job runs long enough by itself."""


def first_train_image(data_root: Path, dataset: str) -> Path:
    image_dir, split_file = JSON_LAYOUT[dataset]
    split = json.loads((data_root / dataset / split_file).read_text())
    return data_root / dataset / image_dir / split["train"][0][0]


def stall_on_fifo(dataset: str) -> Callable[[Path], None]:
    """Replace one image by a FIFO: decoding it blocks forever, like a read from a hung file server."""
    def stall(data_root: Path) -> None:
        image = first_train_image(data_root, dataset)
        image.rename(image.with_suffix(".real"))
        os.mkfifo(image)
    return stall


def restore_image(dataset: str) -> Callable[[Path], None]:
    def unstall(data_root: Path) -> None:
        image = first_train_image(data_root, dataset)
        image.with_suffix(".real").replace(image)  # the hung reader keeps the FIFO; the next attempt reads the image
    return unstall


def same_prepared_tables(dataset: str) -> Callable[[Path, Path], None]:
    def check(project: Path, reference: Path) -> None:
        files = sorted(path.name for path in (reference / "data" / dataset).glob("*.parquet"))
        assert files == sorted(path.name for path in (project / "data" / dataset).glob("*.parquet"))
        for name in files:
            mine, theirs = (pq.read_table(root / "data" / dataset / name) for root in (project, reference))
            assert mine.replace_schema_metadata(None).equals(theirs.replace_schema_metadata(None)), name
    return check


def resumed_to_the_same_model(folder: str, stage_log: str) -> Callable[[Path, Path], None]:
    """The last attempt resumed from the checkpoint, and ended with the uninterrupted run's tensors and losses."""
    def check(project: Path, reference: Path) -> None:
        assert "resuming at step" in (project / stage_log).read_text(), "the resubmission started from scratch"
        mine, theirs = (read_trained(root / folder / "model.pt") for root in (project, reference))
        assert mine["state"].keys() == theirs["state"].keys()
        for name, tensor in mine["state"].items():
            assert torch.equal(tensor, theirs["state"][name]), name
        logs = [pq.read_table(root / folder / "train_log.parquet").to_pydict() for root in (project, reference)]
        assert logs[0]["step"] == logs[1]["step"] and logs[0]["loss"] == logs[1]["loss"]
        assert not (project / "checkpoints" / folder / "ckpt.pt").exists(), "the checkpoint outlived the run"
        assert sorted(project.rglob(".*.tmp")) == [], "the cancelled job's temporaries outlived the rerun"
    return check


TRAIN_RUN = f"runs/coop/{DATASETS[0]}/train/seed1"
TINY_STUDY = tiny_study.params()  # the test-sized backbone, profile and training the other pipeline tests run

KILL_CASES = {
    "prepare": KillCase(
        rule="prepare",
        dataset="oxford_flowers",
        target="data/oxford_flowers",
        slurm_log_dir="rule_prepare/oxford_flowers",
        stall=stall_on_fifo("oxford_flowers"),
        started=lambda project: (project / "logs" / "prepare" / "oxford_flowers.log").exists(),
        unstall=restore_image("oxford_flowers"),
        same_as_uninterrupted=same_prepared_tables("oxford_flowers"),
    ),
    # killed after a checkpoint: the resubmission resumes from it (hundreds of tiny steps outlast the poll)
    "train": KillCase(
        rule="train",
        dataset=DATASETS[0],
        target=str(Path(TRAIN_RUN).parent),  # the train job's folder
        slurm_log_dir=f"rule_train/coop_{DATASETS[0]}",
        stall=nothing,
        started=lambda project: (project / "checkpoints" / TRAIN_RUN / "ckpt.pt").exists(),
        unstall=nothing,
        same_as_uninterrupted=resumed_to_the_same_model(TRAIN_RUN, f"logs/train/coop/{DATASETS[0]}.log"),
        params={"backbone": {"steps": TINY_STUDY["backbone"]["steps"]},
                "profile": TINY_STUDY["profile"],   # its dataset is replaced by the study's
                "train": {**small_recipes(copy.deepcopy(TINY_STUDY["train"]), epochs=300, batch_size=2),
                          "checkpoint_every": 10}},
    ),
}


def processes_in(folder: Path) -> list[int]:
    """PIDs of processes whose working directory is `folder` (what a killed job could leave behind)."""
    pids = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and Path(os.readlink(entry / "cwd")) == folder:
                pids.append(int(entry.name))
        except OSError:
            continue
    return pids


@pytest.mark.parametrize("case", list(KILL_CASES.values()), ids=list(KILL_CASES))
def test_a_job_cancelled_by_the_scheduler_is_resubmitted_and_ends_as_an_uninterrupted_run(tmp_path, case):
    data_root = tmp_path / "coop"
    project = new_project(tmp_path, data_root, [case.dataset], case.params)
    case.stall(data_root)

    process, output = start_snakemake(project, case.target)

    def attempts() -> list[str]:  # Slurm job ids of this job's submissions so far
        return [job_id for job_id, log in submissions(output.read_text()) if f"/{case.slurm_log_dir}/" in log]

    try:
        first = wait_for("the job to be submitted", lambda: next(iter(attempts()), None),
                         timeout_s=SNAKEMAKE_TIMEOUT_S - 30)
        wait_for("the job to run", lambda: slurm_jobs()[first]["JobState"] == "RUNNING" and case.started(project))
        case.unstall(data_root)
        slurm("scancel", first)
        process.wait(timeout=SNAKEMAKE_TIMEOUT_S + 60)
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGINT)
            process.wait(timeout=60)
    run = Run.parse(process.returncode, output.read_text(), project)
    assert run.returncode == 0, fail_with_output(run, "the run did not recover from the cancelled job")

    ids, jobs = attempts(), slurm_jobs()
    assert ids[0] == first and len(ids) == 2, ids
    assert [jobs[job_id]["JobState"] for job_id in ids] == ["CANCELLED", "COMPLETED"]
    asked = [requested_mem_mb(profile_of(project), case.rule, attempt) for attempt in (1, 2)]
    assert [memory_mb(jobs[job_id]["MinMemoryNode"]) for job_id in ids] == asked, "memory did not grow with the attempt"
    assert processes_in(project) == [], "the cancelled job left processes behind"
    assert summarize(run.log_file) == "No failed jobs.\n", "a job that succeeded on resubmission is listed as failed"

    reference = make_project(tmp_path / "reference", (project / "params.yaml").read_text())
    (reference / "workflow/schemas/params.schema.yaml").write_text(
        (project / "workflow/schemas/params.schema.yaml").read_text())
    local = subprocess.run([str(BIN / "snakemake"), "--cores", "2", case.target], cwd=reference, env=engine_env(),
                           capture_output=True, text=True, timeout=300)
    assert local.returncode == 0, local.stderr[-3000:]
    case.same_as_uninterrupted(project, reference)

