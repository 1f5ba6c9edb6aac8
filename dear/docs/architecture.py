"""The layers of the package, read from its imports: docs/architecture.md's table and tests/test_architecture.py.

A unit is a folder of `dear/` (`dear.methods`, `dear.runtime`, ...) or a module at its top level
(`dear.api`, `dear.errors`). `LAYERS` orders the units from the bottom up: a module may import a
module of its own unit or of a unit on a lower layer, never one of its own layer's other units or
above. Every import counts, at module level or inside a function, with `importlib.import_module` of
a constant name: what `dear.pipeline.codegraph` follows for a job's code. An import under
`if TYPE_CHECKING:` runs nothing and is left out, as it is from a job's code.
"""

from __future__ import annotations

import ast
from pathlib import Path

from dear.pipeline import codegraph

# bottom first: (units, what the layer is)
LAYERS: tuple[tuple[tuple[str, ...], str], ...] = (
    (("errors",), "the one exception type users see"),
    (("compute",), "the machine and how floats are made on it"),
    (("runtime",), "what runs around a stage: atomic files, provenance, progress, how it stopped"),
    (("data",), "datasets: declarations, readers, manifests, few-shot sampling, the embedded world"),
    (("model",), "CLIP: loading, open_clip's internals, head decomposition, roles"),
    (("methods",), "one module per method behind a registry, their shared blocks and recipes"),
    (("config",), "reading a config: the strict YAML reader, params, `dear check`, what each job reads"),
    (("scoring",), "how answers become counts and counts accuracies"),
    (("train",), "the trainer, its data order, checkpoints, the view bank"),
    (("report",), "tables, plots and the published numbers"),
    (("pipeline",), "the study's jobs, their code fingerprints, what a run records and costs"),
    (("stages",), "one module per stage: run(params, inputs, outputs)"),
    (("api", "contract", "fingerprint", "scaffold", "docs", "resources"),
     "the public library, the method contract, the setting's fingerprint, `dear new-method`, the docs' generator"),
    (("cli",), "the `dear` command: dear/cli.py and its warm server (dear/server/), the console script's front door"),
    (("testing",), "the testing kit a method's author runs (it drives the command)"),
)
# folders that belong to another unit: the warm server is the `dear` command's front door (its `main` runs
# dear.cli.main; `dear server` asks the servers), one unit with the command
JOINED = {"server": "cli"}


def package_root(root: Path) -> Path:
    return Path(root) / "dear"


def modules(root: Path) -> dict[str, Path]:
    """dear.a.b -> its file, for every module of the package."""
    package = package_root(root)
    found = {}
    for path in sorted(package.rglob("*.py")):
        parts = list(path.relative_to(package.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found[".".join(parts)] = path
    return found


def unit(module: str) -> str:
    """The unit a module belongs to: its folder under dear/, or its own name at the top level ('dear' for dear/__init__)."""
    parts = module.split(".")
    name = parts[1] if len(parts) > 1 else "dear"
    return JOINED.get(name, name)


def layer(name: str) -> int:
    for index, (units, _) in enumerate(LAYERS):
        if name in units:
            return index
    if name == "dear":  # dear/__init__.py: the public names, above everything it re-exports
        return len(LAYERS)
    raise KeyError(name)


def imports(root: Path) -> dict[str, set[str]]:
    """module -> the package modules it imports (each import resolved to the module it names: `from dear.config
    import keys` names dear.config.keys, `from dear.methods import REGISTRY` names dear.methods)."""
    found = modules(root)
    graph: dict[str, set[str]] = {}
    for module, path in found.items():
        package = module if path.name == "__init__.py" else module.rpartition(".")[0]
        named = codegraph._named(ast.parse(path.read_text()), package)
        targets = set()
        for base, aliases in named["from"]:
            for alias in aliases:
                targets.add(f"{base}.{alias}" if f"{base}.{alias}" in found else base)
        froms = {base for base, _ in named["from"]}
        targets.update(name for name in named["modules"] if name not in froms)
        graph[module] = {name for name in targets if name in found and name != module}
    return graph


def against_layers(graph: dict[str, set[str]]) -> list[str]:
    """'a imports b' for each import that runs sideways or upward."""
    wrong = []
    for module, targets in sorted(graph.items()):
        for target in sorted(targets):
            here, there = unit(module), unit(target)
            if here != there and layer(there) >= layer(here):
                wrong.append(f"{module} imports {target} ({there} is not below {here})")
    return wrong


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The import circles among modules: each strongly connected set of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph.get(node, ())):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            group = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                group.append(top)
                if top == node:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def unit_imports(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """unit -> the other units its modules import."""
    found: dict[str, set[str]] = {}
    for module, targets in graph.items():
        found.setdefault(unit(module), set()).update(unit(target) for target in targets)
    return {name: targets - {name} for name, targets in found.items()}


def layers_table(root: Path) -> str:
    """docs/architecture.md's table: each layer, top first, and the units each one's modules import (from the code)."""
    used = unit_imports(imports(root))

    def shown(name: str) -> str:
        return "`dear/__init__.py`" if name == "dear" else \
            f"`dear/{name}/`" if package_root(root).joinpath(name).is_dir() else f"`dear/{name}.py`"

    lines = ["| layer | units | what it is | imports (read from the code) |", "| --- | --- | --- | --- |"]
    for number, (units, what) in reversed(list(enumerate(LAYERS))):
        names = [*units, *(folder for folder, into in JOINED.items() if into in units)]
        below = sorted({target for name in units for target in used.get(name, ())}, key=lambda n: (-layer(n), n))
        lines.append(f"| {number} | {', '.join(shown(name) for name in names)} | {what} | "
                     f"{', '.join(f'`{name}`' for name in below) or '—'} |")
    return "\n".join(lines) + "\n"
