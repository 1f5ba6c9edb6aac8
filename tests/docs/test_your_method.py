"""docs/your-method.md, followed: a method from a package of its own, installed with pip, beside the built-in ones.

The example package (examples/clip-adapter) and a package `dear new-method` writes are installed with pip
into a folder of their own (not into the test environment: other tests must not see them), which goes on
PYTHONPATH of every process that uses them, as an installed package is on a user's path. Then:
- each package's own tests pass (dear.testing's kit);
- the examples (CLIP-Adapter, VPT-deep) run beside zero-shot CLIP and CoOp through Snakemake to a report with
  their rows, and its run record names their distributions and code;
- a comment edited in its module replans nothing, its forward edited replans its jobs only, in Snakemake and
  in DVC, which then runs them to a new report.
"""

import json
import os
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
VPT = ROOT / "examples" / "vpt-deep"  # the second example: tokens in the image tower
METHODS = ["zeroshot", "coop", "clip_adapter", "vpt_deep"]


def jobs_of(method: str) -> set[str]:
    """The jobs of one method of the mini study, and the report."""
    return {f"train@{method}-world_objects", f"fuse@{method}-world_objects", f"evaluate@{method}-world_objects",
            f"train_transfer@{method}", f"fuse_transfer@{method}", f"evaluate_transfer@{method}",
            f"collect@{method}", "report"}


ITS_JOBS = jobs_of("clip_adapter") | jobs_of("vpt_deep")  # the jobs of the two forwards edited below


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    """The example packages, pip-installed into a folder of their own."""
    folder = tmp_path_factory.mktemp("site")
    return pip_install(VPT, pip_install(EXAMPLE, folder))


def on_path(site: Path) -> dict:
    """The packages' folder on PYTHONPATH, before what the tests' own process has there (the checkout under test)."""
    return {"PYTHONPATH": os.pathsep.join(filter(None, [str(site), os.environ.get("PYTHONPATH")]))}


def package_tests(package: Path, site: Path, cwd: Path) -> subprocess.CompletedProcess:
    """The package's own tests, in a process that has it installed (on PYTHONPATH)."""
    return run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist",
                str(package / "tests")], cwd, timeout=900, env=on_path(site))


@pytest.mark.parametrize("package", [EXAMPLE, VPT], ids=lambda path: path.name)
def test_the_example_package_passes_its_own_tests(site, tmp_path, package):
    result = package_tests(package, site, tmp_path)
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
    raw["train"]["recipes"]["vpt_deep"] = {"prompt_depth_vision": 2}  # ViT-B/16's 12 layers: the tiny tower's 2
    return yaml.safe_dump(raw, sort_keys=False)


def edit(site: Path, old: str, new: str, package: str = "dear_clip_adapter") -> None:
    path = site / package / "model.py"
    assert old in path.read_text()
    path.write_text(path.read_text().replace(old, new, 1))


@pytest.fixture(scope="module")
def project(site, tmp_path_factory) -> Path:
    project = make_project(tmp_path_factory.mktemp("study") / "project", study_text())
    run([str(BIN / "snakemake"), "--cores", "2"], project, timeout=1200, env=on_path(site))
    return project


def test_the_examples_run_beside_zeroshot_and_coop_to_a_report_with_their_rows(project):
    results = pd.read_csv(project / "report" / "results.csv")
    assert set(results["method"]) == set(METHODS)
    for method in ("clip_adapter", "vpt_deep"):
        assert set(results.loc[results["method"] == method, "protocol"]) == \
            {"base_to_novel", "cross_dataset", "domain_generalization"}
    record = json.loads((project / "report" / "record.json").read_text())
    assert sorted({(p["method"], p["distribution"], p["version"], p["installed"]) for p in record["plugins"]}) == \
        [("clip_adapter", "dear-clip-adapter", "0.1.0", "as installed"),
         ("vpt_deep", "dear-vpt-deep", "0.1.0", "as installed")]
    vpt = next(p for p in record["plugins"] if p["method"] == "vpt_deep")
    assert set(vpt["code_files"]) == {"dear_vpt_deep/__init__.py", "dear_vpt_deep/model.py",
                                      "dear_vpt_deep/recipe.yaml"}
    shown = (project / "report" / "results.md").read_text()
    assert "clip_adapter" in shown and "vpt_deep" in shown and "as installed" in shown


def test_a_comment_replans_nothing_and_its_forward_its_jobs_only_in_both_engines(project, site, tmp_path):
    models = [site / package / "model.py" for package in ("dear_clip_adapter", "dear_vpt_deep")]
    installed = [path.read_text() for path in models]
    try:
        edit(site, '"""CLIP-Adapter (Gao', '# an edited comment\n"""CLIP-Adapter, edited (Gao')
        plan = run([str(BIN / "snakemake"), "-n", "--cores", "1"], project, env=on_path(site))
        assert "Nothing to be done" in plan.stdout + plan.stderr, plan.stdout[-3000:]
        tree = handed_to_dvc(project, tmp_path / "tree", env=on_path(site))
        edit(site, "ratio * self.adapter(embedding)", "ratio * self.adapter(embedding) * 1.0")
        edit(site, "rows[:, 0]), dim=-1)", "rows[:, 0] * 1.0), dim=-1)", "dear_vpt_deep")
        plan = run([str(BIN / "snakemake"), "-n", "--cores", "1"], project, env=on_path(site))
        assert snakemake_planned(plan.stdout) == ITS_JOBS, plan.stdout[-3000:]
        repro = run([str(BIN / "dvc"), "repro"], tree, timeout=900, env=on_path(site))
        collects = {f"collect@{method}" for method in METHODS}  # DVC's collect reads runs/ whole (docs/engines.md)
        assert dvc_ran(repro.stdout) == ITS_JOBS | collects | {"check"}, repro.stdout[-3000:]
        assert {"clip_adapter", "vpt_deep"} <= set(pd.read_csv(tree / "report" / "results.csv")["method"])
        record = json.loads((tree / "report" / "record.json").read_text())
        assert {(p["method"], p["installed"]) for p in record["plugins"]} == \
            {("clip_adapter", "edited since installed"), ("vpt_deep", "edited since installed")}
    finally:
        for path, text in zip(models, installed):
            path.write_text(text)
        shutil.rmtree(tmp_path / "tree", ignore_errors=True)
