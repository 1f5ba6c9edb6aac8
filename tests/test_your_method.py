"""docs/your-method.md, followed: a method from a package of its own, installed with pip, beside the built-in ones.

The example package (examples/clip-adapter) and a package `dear new-method` writes are installed with pip
into a folder of their own (not into the test environment: other tests must not see them), which goes on
PYTHONPATH of every process that uses them, as an installed package is on a user's path. Then:
- each package's own tests pass (dear.testing's kit);
- the example runs beside zero-shot CLIP and CoOp through Snakemake to a report with its rows, and its run
  record names its distribution;
- a comment edited in its module replans nothing, its forward edited replans its jobs only, in Snakemake and
  in DVC, which then runs them to a new report.
"""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml

from tests import tiny_study
from tests.engines import BIN, ROOT, dvc_ran, handed_to_dvc, make_project, run, snakemake_planned
from tests.plugins import pip_install

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("your-method")]

EXAMPLE = ROOT / "examples" / "clip-adapter"
METHODS = ["zeroshot", "coop", "clip_adapter"]
ITS_JOBS = {"train@clip_adapter-world_objects", "fuse@clip_adapter-world_objects",
            "evaluate@clip_adapter-world_objects", "train_transfer@clip_adapter", "fuse_transfer@clip_adapter",
            "evaluate_transfer@clip_adapter", "collect@clip_adapter", "report"}


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    """The example package, pip-installed into a folder of its own."""
    return pip_install(EXAMPLE, tmp_path_factory.mktemp("site"))


def on_path(site: Path) -> dict:
    return {"PYTHONPATH": str(site)}


def package_tests(package: Path, site: Path, cwd: Path) -> subprocess.CompletedProcess:
    """The package's own tests, in a process that has it installed (on PYTHONPATH)."""
    return run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist",
                str(package / "tests")], cwd, timeout=900, env=on_path(site))


def test_the_example_package_passes_its_own_tests(site, tmp_path):
    result = package_tests(EXAMPLE, site, tmp_path)
    assert "2 passed" in result.stdout, result.stdout[-2000:]


def test_new_method_writes_a_package_that_passes_its_own_test(tmp_path):
    run([str(BIN / "dear"), "new-method", "my_method", "--out", "my-method"], tmp_path)
    site = pip_install(tmp_path / "my-method", tmp_path / "site")
    result = package_tests(tmp_path / "my-method", site, tmp_path)
    assert "1 passed" in result.stdout, result.stdout[-2000:]
    shown = run([str(BIN / "dear"), "recipe", "--params", str(ROOT / "params.yaml"), "--method", "my_method",
                 "--set", "study.methods=[zeroshot,my_method]"], tmp_path, env=on_path(site)).stdout
    assert "my_method (a dear new-method skeleton)" in shown
    assert "as zeroshot: KaiyangZhou/CoOp@ff61507 trainers/zsclip.py" in shown


def test_an_editable_install_of_a_new_method_imports_the_same_from_its_parent_folder(tmp_path):
    """`pip install -e` of the src layout `dear new-method` writes: Python started beside the package's folder (which
    bears the method's name) finds the installed method, not that folder."""
    run([str(BIN / "dear"), "new-method", "my_method"], tmp_path)
    run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", "-e", "my_method",
         "--target", str(tmp_path / "site")], tmp_path)
    for cwd in (tmp_path, tmp_path / "my_method"):
        found = run([sys.executable, "-c", f"import site; site.addsitedir({str(tmp_path / 'site')!r}); "
                     "from dear.methods import plugins; print([type(item).__name__ for item in plugins.discovered()])"],
                    cwd).stdout
        assert found.strip() == "['Plugin']", found


def study_text() -> str:
    """The pipeline tests' mini study (one seed, base-to-novel on world_objects, both transfer protocols) with the
    example's method beside zero-shot CLIP and CoOp."""
    raw = tiny_study.params()
    raw["data"].update(seeds=[1], datasets=["world_objects", "world_objects_b", "world_objects_sketch"])
    raw["study"].update(methods=METHODS, base_to_novel=["world_objects"])
    raw["report"].update(methods=METHODS, compare="clip_adapter")
    return yaml.safe_dump(raw, sort_keys=False)


def edit(site: Path, old: str, new: str) -> None:
    path = site / "dear_clip_adapter" / "model.py"
    assert old in path.read_text()
    path.write_text(path.read_text().replace(old, new, 1))


@pytest.fixture(scope="module")
def project(site, tmp_path_factory) -> Path:
    project = make_project(tmp_path_factory.mktemp("study") / "project", study_text())
    run([str(BIN / "snakemake"), "--cores", "2"], project, timeout=1200, env=on_path(site))
    return project


def test_the_example_runs_beside_zeroshot_and_coop_to_a_report_with_its_rows(project):
    results = pd.read_csv(project / "report" / "results.csv")
    assert set(results["method"]) == set(METHODS)
    assert set(results.loc[results["method"] == "clip_adapter", "protocol"]) == \
        {"base_to_novel", "cross_dataset", "domain_generalization"}
    record = json.loads((project / "report" / "record.json").read_text())
    assert [(p["method"], p["distribution"], p["version"]) for p in record["plugins"]] == \
        [("clip_adapter", "dear-clip-adapter", "0.1.0")]
    assert "clip_adapter" in (project / "report" / "results.md").read_text()


def test_a_comment_replans_nothing_and_its_forward_its_jobs_only_in_both_engines(project, site, tmp_path):
    installed = (site / "dear_clip_adapter" / "model.py").read_text()
    try:
        edit(site, '"""CLIP-Adapter (Gao', '# an edited comment\n"""CLIP-Adapter, edited (Gao')
        plan = run([str(BIN / "snakemake"), "-n", "--cores", "1"], project, env=on_path(site))
        assert "Nothing to be done" in plan.stdout + plan.stderr, plan.stdout[-3000:]
        tree = handed_to_dvc(project, tmp_path / "tree", env=on_path(site))
        edit(site, "ratio * self.adapter(embedding)", "ratio * self.adapter(embedding) * 1.0")
        plan = run([str(BIN / "snakemake"), "-n", "--cores", "1"], project, env=on_path(site))
        assert snakemake_planned(plan.stdout) == ITS_JOBS, plan.stdout[-3000:]
        repro = run([str(BIN / "dvc"), "repro"], tree, timeout=900, env=on_path(site))
        collects = {f"collect@{method}" for method in METHODS}  # DVC's collect reads runs/ whole (docs/engines.md)
        assert dvc_ran(repro.stdout) == ITS_JOBS | collects | {"check"}, repro.stdout[-3000:]
        assert "clip_adapter" in set(pd.read_csv(tree / "report" / "results.csv")["method"])
    finally:
        (site / "dear_clip_adapter" / "model.py").write_text(installed)
        shutil.rmtree(tmp_path / "tree", ignore_errors=True)
