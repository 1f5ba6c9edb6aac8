"""Installation and the cluster docs: tested versions inside the ranges, docs that say what the code does."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import yaml
from packaging.requirements import Requirement
from typer.testing import CliRunner

from dear.cli import app
from dear.config.params import Params

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "docs" / name for name in ("install.md", "check.md", "compute.md")]
SECTIONS = "|".join(Params.model_fields)


def test_constraints_pin_torch_inside_the_ranges_and_make_installs_with_them():
    ranges = {Requirement(line).name: Requirement(line).specifier
              for line in tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]}
    pins = [Requirement(line) for line in (ROOT / "constraints.txt").read_text().splitlines()
            if line.strip() and not line.startswith("#")]
    assert {pin.name for pin in pins} >= {"torch", "torchvision"}
    for pin in pins:
        (version,) = [spec.version for spec in pin.specifier if spec.operator == "=="]
        assert ranges[pin.name].contains(version), f"{pin} is outside pyproject's {pin.name}{ranges[pin.name]}"
        assert str(ranges[pin.name]) != f"=={version}", f"pyproject.toml pins {pin.name} exactly; give a range"
    makefile = (ROOT / "Makefile").read_text()
    installs = [line for line in makefile.splitlines() if "pip install" in line and "--upgrade pip" not in line]
    assert installs and all("-c constraints.txt" in line for line in installs)


def test_the_project_metadata_reads_without_a_deprecation_warning():
    """setuptools warned on every install that `project.license` as a table is deprecated (PEP 639)."""
    import warnings

    from setuptools.config import pyprojecttoml
    from setuptools.dist import Distribution

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        distribution = Distribution()
        pyprojecttoml.apply_configuration(distribution, ROOT / "pyproject.toml")
    assert distribution.metadata.license_expression == "MIT"


def test_the_docs_name_only_params_keys_that_exist():
    for doc in DOCS:
        for key in re.findall(rf"`((?:{SECTIONS})\.[a-z_.]+)", doc.read_text()):
            model = Params
            for part in key.split("."):
                assert part in model.model_fields, f"{doc.name}: `{key}` is not a params key"
                model = model.model_fields[part].annotation


def test_the_compute_block_in_the_docs_is_params_yaml_s():
    block = re.search(r"```yaml\n(compute:.*?)```", (ROOT / "docs/compute.md").read_text(), re.DOTALL).group(1)
    assert yaml.safe_load(block) == {"compute": yaml.safe_load((ROOT / "params.yaml").read_text())["compute"]}


def test_the_check_example_in_the_docs_is_what_dear_check_prints(monkeypatch, tmp_path):
    monkeypatch.chdir(ROOT)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))  # no weights fetched on this machine
    monkeypatch.setattr("dear.config.check.available_cpus", lambda: 64)  # a node with the CPUs the paper config asks for
    result = CliRunner().invoke(app, ["check", "--params", "configs/paper-vitb16.yaml"])
    assert result.exit_code == 1
    example = re.search(r"\n```\n(error: .*?)```", (ROOT / "docs/check.md").read_text(), re.DOTALL).group(1)
    assert result.stderr == example
