"""Both engines run the real graph at test size, and a second run does nothing.

Snakemake runs the whole study (world to report) on a mini study; DVC runs the
world + prepare fan-out. The same inputs give byte-identical manifests whichever
engine made them, a tree either engine built is handed to the other without a
rerun (docs/engines.md), and planning another config leaves the tree alone.
"""

import json
import shutil
import sys
from pathlib import Path

import pytest
import yaml

from tests import tiny_study
from tests.engines import BIN, ROOT, make_project, run

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
    assert "## Paired differences" in results and "### Each stream's own accuracy" in results
    assert (snakemake_project / "transfer/dear/eval/seed1/eval.parquet").is_file()
    assert (snakemake_project / "logs/train/dear/world_objects.benchmark.tsv").is_file()  # Snakemake's benchmark:
    again = run([str(BIN / "snakemake"), "--cores", "2"], snakemake_project)
    assert "Nothing to be done" in again.stdout + again.stderr


def test_dvc_runs_the_prepare_fan_out_and_then_has_nothing_to_do(dvc_project):
    for name in yaml.safe_load((dvc_project / "params.yaml").read_text())["data"]["datasets"]:
        assert (dvc_project / f"data/{name}/fewshot-seed1.parquet").is_file()
        # DVC records no time or memory: dear wrote the file Snakemake's benchmark: would have, beside the log
        header = (dvc_project / f"logs/prepare/{name}.benchmark.tsv").read_text().splitlines()[0]
        assert header.startswith("s\th:m:s\tmax_rss\t")
    again = run([str(BIN / "dvc"), "repro", "prepare"], dvc_project)
    assert "didn't change, skipping" in again.stdout and "Running stage" not in again.stdout


def test_both_engines_make_byte_identical_manifests(snakemake_project, dvc_project):
    for manifest in sorted((dvc_project / "data").glob("*/manifest.parquet")):
        twin = snakemake_project / manifest.relative_to(dvc_project)
        assert twin.read_bytes() == manifest.read_bytes(), manifest.parent.name


def _files(project: Path) -> dict[str, tuple[int, int]]:
    """(size, mtime) of every file of the study (the engines' own state folders aside)."""
    return {str(path.relative_to(project)): (path.stat().st_size, path.stat().st_mtime_ns)
            for path in project.rglob("*") if path.is_file() and not {".snakemake", ".dvc"} & set(path.parts)}


def test_planning_another_config_leaves_the_demo_tree_untouched(snakemake_project):
    before = _files(snakemake_project)
    run([str(BIN / "snakemake"), "-n", "--cores", "1", "--configfile", "configs/paper-vitb16.yaml"], snakemake_project)
    assert _files(snakemake_project) == before
    again = run([str(BIN / "snakemake"), "-n", "--cores", "1"], snakemake_project)
    assert "Nothing to be done" in again.stdout + again.stderr


def test_a_changed_section_reruns_its_readers_only_and_a_copied_config_nothing(snakemake_project):
    copy = snakemake_project / "copy.yaml"
    shutil.copy2(snakemake_project / "params.yaml", copy)
    same = run([str(BIN / "snakemake"), "-n", "--cores", "1", "--configfile", copy.name], snakemake_project)
    assert "Nothing to be done" in same.stdout + same.stderr
    (snakemake_project / "overlay.yaml").write_text("report:\n  decimals: 3\n")
    changed = run([str(BIN / "snakemake"), "-n", "--cores", "1", "--configfile", copy.name, "overlay.yaml"],
                  snakemake_project)
    planned = {line.split()[1].rstrip(":") for line in changed.stdout.splitlines() if line.startswith("rule ")}
    assert planned - {"all"} == {"report"}, planned


def test_a_tree_snakemake_built_goes_to_dvc_and_back_without_a_rerun(snakemake_project, tmp_path):
    tree = tmp_path / "tree"
    shutil.copytree(snakemake_project, tree, symlinks=True)  # copy2: the same mtimes
    run([str(BIN / "dvc"), "commit", "-f"], tree)  # the hand-over: DVC records the tree as it is
    repro = run([str(BIN / "dvc"), "repro"], tree)
    assert "Running stage" not in repro.stdout and "Data and pipelines are up to date" in repro.stdout
    back = run([str(BIN / "snakemake"), "-n", "--cores", "1"], tree)
    assert "Nothing to be done" in back.stdout + back.stderr, back.stdout[-3000:]


def test_a_tree_dvc_built_goes_to_snakemake_and_back_without_a_rerun(dvc_project):
    datasets = yaml.safe_load((dvc_project / "params.yaml").read_text())["data"]["datasets"]
    targets = [f"data/{name}/{table}.parquet" for name in datasets for table in ("manifest", "fewshot-seed1")]
    snakemake = [str(BIN / "snakemake"), "--cores", "1", *targets]
    plan = run([*snakemake, "-n"], dvc_project)
    assert "Nothing to be done" in plan.stdout + plan.stderr, plan.stdout[-3000:]
    run([*snakemake, "--touch", "--forceall"], dvc_project)  # the hand-over: Snakemake records its metadata
    again = run([*snakemake, "-n"], dvc_project)
    assert "Nothing to be done" in again.stdout + again.stderr
    repro = run([str(BIN / "dvc"), "repro", "prepare"], dvc_project)
    assert "Running stage" not in repro.stdout


def test_before_training_every_method_scores_zero_shot_on_the_embedded_sets(snakemake_project):
    """scripts/at_init.py on the study's tree: each method after 0 epochs, fused and evaluated by the stages."""
    out = run([sys.executable, str(ROOT / "scripts/at_init.py"), "--root", ".",
               "--datasets", "world_objects,world_objects_sketch"], snakemake_project).stdout
    rows = [line.strip("| ").split(" | ") for line in out.splitlines() if line.startswith("| world_")]
    gaps = {(row[0], row[1]): float(row[4]) for row in rows if row[1] != "zeroshot"}
    assert len(gaps) == 8 and all(abs(gap) <= 1.0 for gap in gaps.values()), out


def test_validate_profile_shows_where_each_concept_enters_the_embedding(snakemake_project):
    """scripts/validate_profile.py --components on the study's tree: a row per layer's heads and MLP, whole tower."""
    out = run([sys.executable, str(ROOT / "scripts/validate_profile.py"), "--backbone", "backbone", "--world",
               "world", "--roles", "roles/world_objects/roles.parquet", "--split", "val", "--max-images", "40",
               "--random-sets", "2", "--components"], snakemake_project).stdout
    terms = [line.split(" | ")[0].strip("| ") for line in out.split("Each term of the embedding")[1].splitlines()
             if line.startswith("| ") and not line.startswith("| term") and not line.startswith("| ---")]
    depth = json.loads((snakemake_project / "backbone/card.json").read_text())["model_config"]["vision_cfg"]["layers"]
    assert terms == ["embeddings (entering layer 1)"] + [f"L{i} {part}" for i in range(1, depth + 1)
                                                          for part in ("heads", "MLP")], out
