"""The data layer stands alone: importing `dear.data` or any module under it loads neither the params schema
nor the methods (the schema calls the data layer's checks, never the reverse), and the built-in datasets
are declarations of the formats a dataset of one's own uses."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from dear.data import coop
from dear.data.formats import FORMATS, READERS

ROOT = Path(__file__).resolve().parents[2]
MODULES = sorted(path.relative_to(ROOT).with_suffix("").as_posix().replace("/", ".").removesuffix(".__init__")
                 for path in (ROOT / "dear/data").rglob("*.py"))  # every module of the data layer
PROBE = """
import importlib, json, sys
importlib.import_module(sys.argv[1])
print(json.dumps(sorted(name for name in sys.modules if name.startswith("dear."))))
"""


@pytest.mark.parametrize("module", MODULES)
def test_importing_a_data_module_loads_neither_params_nor_methods(module):
    done = subprocess.run([sys.executable, "-c", PROBE, module], capture_output=True, text=True, cwd=ROOT,
                          timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    loaded = json.loads(done.stdout.splitlines()[-1])
    assert module in loaded
    upward = [name for name in loaded if name == "dear.config.params" or name.split(".")[:2] == ["dear", "methods"]]
    assert upward == [], f"{module} loads {upward}"


def test_the_built_in_datasets_are_declarations_of_the_formats():
    assert {spec.format for spec in coop.SPECS.values()} <= set(FORMATS)
    json_sets = [name for name, spec in coop.SPECS.items() if spec.format == "coop-json"]
    assert len(json_sets) == 9 + 8  # CoOp's split JSONs and the embedded world's: the format of one's own
    assert FORMATS["coop-json"] is READERS["coop-json"]


def test_the_data_layer_has_no_import_circle():
    """Read from the code (`dear.pipeline.codegraph.imports`, function-level imports included): no module of dear.data
    reaches itself again through the others."""
    from dear.pipeline import codegraph

    within = {module: {name for name in codegraph.imports(module) if name in MODULES} for module in MODULES}

    def reaches(start: str) -> set[str]:
        seen, todo = set(), list(within[start])
        while todo:
            module = todo.pop()
            if module not in seen:
                seen.add(module)
                todo.extend(within[module])
        return seen

    assert [module for module in MODULES if module in reaches(module)] == []
