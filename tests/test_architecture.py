"""The package's layers hold: no import runs sideways or upward, no module reaches itself again through others,
and every folder says what it owns and what it may import (docs/architecture.md, dear/docs/architecture.py).

Imports are read from the code with `ast`, at module level and inside functions (and `importlib.import_module`
of a constant name), as `dear.pipeline.codegraph` reads a job's code; an import under `if TYPE_CHECKING:` runs
nothing and is exempt, as it is from a job's code."""

from __future__ import annotations

import ast
from pathlib import Path

from dear.docs import architecture

ROOT = Path(__file__).resolve().parents[1]
GRAPH = architecture.imports(ROOT)


def test_no_import_runs_against_the_layers():
    assert architecture.against_layers(GRAPH) == []


def test_no_import_circle():
    assert architecture.circles(GRAPH) == []


def test_every_module_belongs_to_a_layer():
    unplaced = sorted({architecture.unit(module) for module in GRAPH} - {"dear"}
                      - {name for units, _ in architecture.LAYERS for name in units}
                      - set(architecture.JOINED))
    assert unplaced == [], f"place {unplaced} in dear/docs/architecture.py LAYERS"


def test_the_top_level_holds_the_public_faces_and_folders():
    modules = sorted(path.name for path in (ROOT / "dear").glob("*.py"))
    assert len(modules) <= 8, modules


def test_every_folder_says_what_it_owns_and_what_it_may_import():
    for init in sorted((ROOT / "dear").glob("*/__init__.py")):
        doc = ast.get_docstring(ast.parse(init.read_text()))
        assert doc, f"{init.relative_to(ROOT)}: no docstring"


def test_the_checks_catch_an_upward_import_and_a_circle():
    graph = {"dear.compute.cpus": {"dear.model.internals"}, "dear.model.internals": {"dear.compute.cpus"},
             "dear.methods.base": {"dear.model.internals"}}
    assert architecture.against_layers(graph) == [
        "dear.compute.cpus imports dear.model.internals (model is not below compute)"]
    assert architecture.circles(graph) == [["dear.compute.cpus", "dear.model.internals"]]


def test_a_function_level_import_counts(tmp_path):
    package = tmp_path / "dear"
    (package / "compute").mkdir(parents=True)
    (package / "model").mkdir()
    for init in (package / "__init__.py", package / "compute" / "__init__.py", package / "model" / "__init__.py"):
        init.write_text("")
    (package / "model" / "internals.py").write_text("")
    (package / "compute" / "device.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from dear.model import internals\n"
        "def prepare():\n    from dear.model import internals\n")
    graph = architecture.imports(tmp_path)
    assert graph["dear.compute.device"] == {"dear.model.internals"}
    (package / "compute" / "device.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from dear.model import internals\n")
    assert architecture.imports(tmp_path)["dear.compute.device"] == set()
