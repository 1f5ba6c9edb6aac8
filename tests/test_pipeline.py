"""Both engines run the real graph at test size, and a second run does nothing.

Snakemake runs the whole study (world to report) on a mini study; DVC runs the
world + prepare fan-out. The same inputs give byte-identical manifests whichever
engine made them.
"""

from pathlib import Path

import pytest
import yaml

from tests import tiny_study
from tests.engines import BIN, make_project, run

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("pipeline")]


def mini_study() -> str:
    raw = tiny_study.params()
    raw["data"]["seeds"] = [1]
    raw["data"]["datasets"] = ["world_objects", "world_objects_b", "world_objects_sketch"]
    raw["study"]["methods"] = ["zeroshot", "dear"]
    raw["study"]["base_to_novel"] = ["world_objects"]
    return yaml.safe_dump(raw, sort_keys=False)


@pytest.fixture(scope="module")
def snakemake_project(tmp_path_factory) -> Path:
    project = make_project(tmp_path_factory.mktemp("snakemake") / "project", mini_study())
    run([str(BIN / "snakemake"), "--cores", "2"], project, timeout=900)
    return project


@pytest.fixture(scope="module")
def dvc_project(tmp_path_factory) -> Path:
    project = make_project(tmp_path_factory.mktemp("dvc") / "project", mini_study())
    run([str(BIN / "dvc"), "repro", "prepare"], project, timeout=900)
    return project


def test_snakemake_runs_the_study_and_then_has_nothing_to_do(snakemake_project):
    results = (snakemake_project / "report/results.md").read_text()
    assert "## Base-to-novel" in results and "### world_objects" in results and "| dear |" in results
    assert "### Paired differences" in results and "### Each stream's own accuracy" in results
    assert (snakemake_project / "transfer/dear/eval/seed1/eval.parquet").is_file()
    again = run([str(BIN / "snakemake"), "--cores", "2"], snakemake_project)
    assert "Nothing to be done" in again.stdout + again.stderr


def test_dvc_runs_the_prepare_fan_out_and_then_has_nothing_to_do(dvc_project):
    for name in yaml.safe_load((dvc_project / "params.yaml").read_text())["data"]["datasets"]:
        assert (dvc_project / f"data/{name}/fewshot-seed1.parquet").is_file()
    again = run([str(BIN / "dvc"), "repro", "prepare"], dvc_project)
    assert "didn't change, skipping" in again.stdout and "Running stage" not in again.stdout


def test_both_engines_make_byte_identical_manifests(snakemake_project, dvc_project):
    for manifest in sorted((dvc_project / "data").glob("*/manifest.parquet")):
        twin = snakemake_project / manifest.relative_to(dvc_project)
        assert twin.read_bytes() == manifest.read_bytes(), manifest.parent.name
