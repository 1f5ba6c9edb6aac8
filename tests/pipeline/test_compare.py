"""Two test-size runs that differ in one parameter: their records, `dear compare`, and `dear plan` from a record.

Run A and run B are the same small study (zero-shot CLIP and CoOp, seeds 1 and 2, every protocol) under two
output roots of one project, Snakemake running each; B's embedded backbone is pretrained for 30 steps instead of
60 (backbone.steps), which moves every method's numbers.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pandas as pd
import pytest
import yaml

from dear.config.params import load_params
from dear.pipeline.plan import plan
from dear.pipeline.runrecord import read_benchmarks
from tests import tiny_study
from tests.engines import BIN, engine_env, make_project, run

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("compare")]


def study(root: str, steps: int) -> dict:
    raw = tiny_study.params()
    raw["output_root"] = root
    raw["backbone"]["steps"] = steps
    raw["data"].update(root=f"{root}/world", seeds=[1, 2],
                       datasets=["world_objects", "world_objects_b", "world_objects_sketch"])
    raw["study"].update(methods=["zeroshot", "coop"], base_to_novel=["world_objects"])
    raw["report"].update(methods=["zeroshot", "coop"], compare="coop", bootstrap_resamples=200)
    return raw


@pytest.fixture(scope="module")
def project(tmp_path_factory) -> Path:
    project = make_project(tmp_path_factory.mktemp("compare") / "project", yaml.safe_dump(study("runA", 60)))
    for name, steps in (("runA", 60), ("runB", 30)):
        (project / f"{name}.yaml").write_text(yaml.safe_dump(study(name, steps), sort_keys=False))
        run([str(BIN / "snakemake"), "--cores", "2", "--configfile", f"{name}.yaml"], project, timeout=900)
    return project


def test_compare_names_the_parameter_and_the_numbers_it_moved(project):
    out = run([str(BIN / "dear"), "compare", "runA", "runB", "--params", "runA.yaml"], project).stdout
    inputs = out.split("## Inputs that differ")[1].split("## Numbers")[0]
    assert "- **params**: 1 differ:" in inputs and "  - `backbone.steps`: 60 → 30" in inputs
    assert "`output_root`" in inputs and "`data.root`" in inputs  # listed apart: where, not what
    assert "- **code**: " in inputs and "- **versions**: the same" in inputs
    # the manifests name the images by their path, which holds the output root: said, not hidden
    assert "- **data**: differ for world_objects (" in inputs and "another output root" in inputs
    # every trained run's hash holds its backbone's: all 8 changed
    assert "- **trained runs**: 8 of 8 in both runs have another run hash (coop, zeroshot)" in inputs
    numbers = out.split("## Numbers")[1]
    for method in ("zeroshot", "coop"):  # another backbone moves the numbers of every method
        assert any(line.startswith(f"| {method} | base-to-novel | world_objects | hm |") for line in numbers.splitlines())
    counts = numbers.split("numbers compared: ")[1].split(".")[0]
    assert "moved beyond noise" in counts and "moved within noise" in counts, counts


def test_the_record_reads_each_jobs_time_and_memory_from_snakemakes_benchmark_files(project):
    record = json.loads((project / "runA/report/record.json").read_text())
    jobs = read_benchmarks(project / "runA/logs")
    jobs = jobs[jobs["job"] != "report"]  # the report's own file is written after the report (its record cannot hold it)
    assert len(jobs) >= 10 and {"world", "backbone", "prepare", "profile", "train", "evaluate"} <= set(jobs["rule"])
    assert record["jobs"] == jobs.drop(columns="file").to_dict(orient="records")
    assert {rule["rule"] for rule in record["rules"]} == set(jobs["rule"])
    results = (project / "runA/report/results.md").read_text()
    assert "## Record of this run" in results and "| train | 2 |" in results
    assert len(record["models"]) == 8 and {m["method"] for m in record["models"]} == {"zeroshot", "coop"}
    assert set(record["data"]) == {"world_objects", "world_objects_b", "world_objects_sketch"}


def test_compare_refuses_a_folder_without_a_record(project, tmp_path):
    result = subprocess.run([str(BIN / "dear"), "compare", "runA", str(tmp_path), "--params", "runA.yaml"],
                            cwd=project, env=engine_env(), capture_output=True, text=True)
    assert result.returncode == 1 and "no record.json here" in result.stderr


def _plan(project: Path, params: str, record: str = "runA") -> str:
    return run([str(BIN / "dear"), "plan", "--params", params, "--record", record], project).stdout


def _seconds(project: Path, params: str) -> dict[str, float]:
    record = json.loads((project / "runA/report/record.json").read_text())
    frame = plan(load_params(project / params), record)
    return dict(zip(frame["rule"], frame["seconds"]))


def test_plan_prices_a_config_from_the_record_of_a_run(project):
    text = _plan(project, "runA.yaml")
    assert "CPU hours" in text and "train " in text and "no job of this stage in the record" in text  # the report
    recorded = json.loads((project / "runA/report/record.json").read_text())
    same = _seconds(project, "runA.yaml")
    actual = sum(job["seconds"] for job in recorded["jobs"])
    assert same["all"] == pytest.approx(actual, rel=0.2)  # the record priced back (least squares per stage)
    raw = yaml.safe_load((project / "runA.yaml").read_text())
    raw["data"]["seeds"] = [1, 2, 3, 4, 5, 6]
    (project / "runC.yaml").write_text(yaml.safe_dump(raw, sort_keys=False))
    more = _seconds(project, "runC.yaml")
    assert more["train"] > same["train"] and more["evaluate"] > same["evaluate"]  # three times the seeds
    assert more["prepare"] == same["prepare"] and more["world"] == same["world"]
    paper = _plan(project, "configs/paper-vitb16.yaml")
    assert "The record ran dear-world-tiny, this config ViT-B-16" in paper
    assert _seconds(project, "configs/paper-vitb16.yaml")["train"] > 100 * same["train"]


def test_check_prints_the_price_of_a_config_with_a_record(project):
    out = run([str(BIN / "dear"), "check", "--params", "runA.yaml"], project).stdout
    assert "cost: about" in out and "runA/report/record.json" in out


def test_compare_takes_a_demo_snapshot_as_one_side(project, tmp_path):
    """docs/demo as `python -m dear.docs --snapshot` leaves it (record.json, evals.parquet) against a run's report."""
    from dear.pipeline.compare import write_comparable

    snapshot = tmp_path / "demo"
    assert write_comparable(project / "runA/report", snapshot) == [snapshot / "evals.parquet", snapshot / "record.json"]
    assert "jobs" not in json.loads((snapshot / "record.json").read_text())
    same = run([str(BIN / "dear"), "compare", str(snapshot), "runA", "--params", "runA.yaml"], project).stdout
    assert "- **params**: 0 differ" in same and "## Machines\n\n- the same: CPU maker, instruction sets" in same
    assert ": 0 moved beyond noise, 0 moved within noise" in same
    moved = run([str(BIN / "dear"), "compare", str(snapshot), "runB", "--params", "runA.yaml"], project).stdout
    assert "  - `backbone.steps`: 60 → 30" in moved and ": 0 moved beyond noise, 0 moved within noise" not in moved
    assert moved.index("## Machines") < moved.index("## Numbers")


def test_compare_names_a_plugins_code_change_as_a_cause():
    """Two runs of one plugin release whose model.py differs (an installed plugin edited in place): the line names
    the method, the file and the state against the distribution's RECORD; the same code reads the same."""
    from dear.pipeline.compare import inputs_differ

    def record(fingerprint: str, installed: str) -> dict:
        plugin = {"method": "vpt_deep", "distribution": "dear-vpt-deep", "version": "0.1.0", "installed": installed,
                  "code_files": {"dear_vpt_deep/__init__.py": "a1", "dear_vpt_deep/model.py": fingerprint}}
        return {"params": {}, "models": [], "code": [], "data": {}, "versions": [], "devices": [], "plugins": [plugin]}

    lines = inputs_differ(record("b2", "as installed"), record("c3", "edited since installed"))
    assert "- **plugin code** of vpt_deep (dear-vpt-deep 0.1.0): dear_vpt_deep/model.py differs (run B's files: " \
           "edited since installed); a cause of what moved for this method" in lines
    assert "- **plugin code**: the same" in inputs_differ(record("b2", "as installed"), record("b2", "as installed"))
