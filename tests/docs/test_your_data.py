"""docs/your-data.md, followed as written: a generated ImageFolder dataset, declared with the page's YAML,
checked and run by the page's commands through Snakemake and through DVC to a report with zero-shot,
CoOp and DeAR (test-size model and world, as tests/tiny_study.py)."""

from __future__ import annotations

import re
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import yaml

from tests import tiny_study
from tests.engines import BIN, ROOT, make_project, run
from tests.own_data import imagefolder

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("your-data")]

PAGE = ROOT / "docs" / "your-data.md"


def blocks(kind: str) -> list[str]:
    return re.findall(rf"```{kind}\n(.*?)```", PAGE.read_text(), flags=re.S)


def merge(into: dict, changes: dict) -> dict:
    for key, value in changes.items():
        if isinstance(value, dict) and isinstance(into.get(key), dict):
            merge(into[key], value)
        else:
            into[key] = value
    return into


def commands(engine: str) -> list[list[str]]:
    """The page's shell commands for `engine` (snakemake | dvc), comments dropped, 2 cores."""
    lines = [line.split("#")[0].strip() for block in blocks("bash") for line in block.splitlines()]
    wanted = {"snakemake": ("snakemake",), "dvc": ("python workflow/scripts/dvc_study.py", "dvc repro")}[engine]
    found = [line.replace("--cores 8", "--cores 2").split() for line in lines if line.startswith(wanted)]
    return [[str(BIN / "python"), *line[1:]] if line[0] == "python" else [str(BIN / line[0]), *line[1:]]
            for line in found]


def project(tmp_path_factory, engine: str) -> tuple[Path, dict]:
    """A fresh clone with the demo's test-size params, the page's declaration merged in, and the images laid out."""
    page = yaml.safe_load(blocks("yaml")[0])
    folder = make_project(tmp_path_factory.mktemp(engine) / "project", yaml.safe_dump(tiny_study.params()))
    config = merge(tiny_study.params(), page)
    config["data"]["seeds"] = [1]
    (folder / "configs" / "shapes.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    imagefolder(folder / page["data"]["custom"]["shapes"]["path"])
    checked = run([str(BIN / "dear"), "check", "--params", "configs/shapes.yaml"], folder)
    assert "no problems found" in checked.stdout + checked.stderr
    for command in commands(engine):
        run(command, folder, timeout=1500)
    return folder, config


@pytest.fixture(scope="module")
def snakemake_run(tmp_path_factory):
    return project(tmp_path_factory, "snakemake")


@pytest.fixture(scope="module")
def dvc_run(tmp_path_factory):
    return project(tmp_path_factory, "dvc")


@pytest.mark.parametrize("engine", ["snakemake_run", "dvc_run"])
def test_the_page_runs_to_a_report_with_every_method(engine, request):
    folder, config = request.getfixturevalue(engine)
    root = folder / config["output_root"]
    results = (root / "report/results.md").read_text()
    for method in config["study"]["methods"]:
        assert (root / f"runs/{method}/shapes/eval/seed1/eval.parquet").is_file()
        assert re.search(rf"\n\| {method} \| \**\d+\.\d+\**? \| \**\d+\.\d+", results), method  # base and novel
    assert "shapes" in results
    from dear.methods import REGISTRY
    from dear.methods.recipe import FEWEST_STEPS

    others = [method for method in REGISTRY if method not in config["study"]["methods"]]
    assert not [method for method in others if f"\n| {method} |" in results], "the report shows methods not run"
    for method in ("coop", "dear"):  # the page's small dataset: its runs take at least the fewest steps
        log = pq.read_table(root / f"runs/{method}/shapes/train/seed1/train_log.parquet")
        assert log.num_rows >= FEWEST_STEPS and "Short training" not in results


def test_both_engines_make_the_same_manifest_and_picks(snakemake_run, dvc_run):
    (ours, config), (theirs, _) = snakemake_run, dvc_run
    for name in ("manifest.parquet", "fewshot-seed1.parquet"):
        made = [(folder / config["output_root"] / "data/shapes" / name) for folder in (ours, theirs)]
        import pyarrow.parquet as pq

        assert pq.read_table(made[0]).equals(pq.read_table(made[1]))
