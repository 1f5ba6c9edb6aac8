"""The code a job runs, read from the package's imports: its modules and their fingerprints.

A job's code is the import closure inside `dear/` of the modules it starts
from (`dear.pipeline.jobs.code_roots`): every `import dear...`, `from dear... import`
and relative import, at module level or inside a function, followed to the
module it names (and the packages above it, whose `__init__` runs first),
plus an `importlib.import_module` of a constant name. A module imported
only under `if TYPE_CHECKING:` runs nothing and is left out. The import
graph is the provenance graph, so a module imports only what it uses.

The params schema (`dear/config/params.py`, `VALUES`) is not code but the shape of
the values: every job records the values it reads, validated and resolved,
and both engines compare them key by key (`dear.config.keys`, `dear.pipeline.stale`).

Package data counts with the modules that read it: a file of `dear/resources/`
whose name or stem a module spells as a string (`"text_bank.tsv"`,
`"dear-world"`) belongs to that module's code.

A module's fingerprint is the sha256 of its syntax tree (`ast.dump`) without
docstrings and without the help texts of parameters and options
(`description=` of a pydantic `Field`, `help=` of a Typer option), so
comments, docstrings, help and formatting do not count and any change to
what runs does; a data file's, of its bytes (YAML: of its parsed values).

A registry (`REGISTRIES`: the methods, the datasets) is a table of entries
keyed by name; its entries are fingerprinted one by one, apart from the
rest of their module, and a job counts only the entries its names (method,
dataset) pick. So adding a method or a dataset changes no existing job's code.

A method from an installed package (`dear.methods.plugins`) is code of the
study too: its package is added as a root (`add_root`) and followed like
`dear/` (every import inside it, with the `dear` modules it imports), so an
edit of the plugin's module replans that method's jobs, and installing a
package changes no other job's code. Files are named by their path from the
folder that holds their top-level package (`dear/methods/coop.py`,
`clip_adapter/method.py`).
"""

from __future__ import annotations

import ast
import contextlib
import hashlib
import importlib.metadata
import json
import os
import sys
from functools import lru_cache
from pathlib import Path

import yaml

PACKAGE = Path(__file__).resolve().parents[1]
NAME = "dear"
RESOURCES = PACKAGE / "resources"
# module -> the module-level dict of entries keyed by name (a method, a dataset) that jobs pick from
REGISTRIES = {"dear.methods": "REGISTRY", "dear.data.coop": "SPECS"}
# the schema of the values: a job's values are recorded and compared key by key once validated (dear.config.keys,
# dear.pipeline.stale), so a new key or a reworded check there changes no job's code; not counted, not followed
VALUES = {"dear.config.params"}
HELP_KEYWORDS = {"Field": "description", "Option": "help", "Argument": "help"}  # call -> its help text
# what an analysis on disk was made by: this module's own source, Python's syntax trees, PyYAML's reading
_ANALYSER = hashlib.sha256(b"\0".join([Path(__file__).read_bytes(), sys.version.encode(),
                                        yaml.__version__.encode()])).hexdigest()


# top-level package or module -> its folder (a package) or file (a module): dear's, and each plugin's a job runs
ROOTS: dict[str, Path] = {NAME: PACKAGE}


def add_root(top: str) -> None:
    """Follow the imports of the top-level package (or module) `top` too: a plugin method's code (looked up
    again each time: a package installed anew may lie elsewhere)."""
    if top == NAME:
        return
    import importlib.util

    spec = importlib.util.find_spec(top)
    if spec is None or spec.origin is None and not spec.submodule_search_locations:
        raise ValueError(f"{top}: not an importable package or module")
    ROOTS[top] = Path(next(iter(spec.submodule_search_locations)) if spec.submodule_search_locations
                      else spec.origin).resolve()


def module_file(module: str) -> Path | None:
    """dear.a.b -> dear/a/b.py or dear/a/b/__init__.py (None: not a module of a root: dear or an added plugin)."""
    parts = module.split(".")
    root = ROOTS.get(parts[0])
    if root is None:
        return None
    if root.is_file():  # a plugin that is one module
        return root if len(parts) == 1 else None
    base = root.joinpath(*parts[1:])
    for path in (base.with_suffix(".py"), base / "__init__.py"):
        if path.is_file():
            return path
    return None


def file_key(path: Path) -> str:
    """How a job's code names a file: its path from the folder holding its root (dear/methods/coop.py)."""
    path = Path(path).resolve()
    for root in ROOTS.values():
        if path == root or root in path.parents:
            return str(path.relative_to(root.parent))
    raise ValueError(f"{path}: not a file of dear or of a plugin whose code is followed")


def key_path(key: str) -> Path:
    """The file a code key names (the inverse of `file_key`)."""
    top = key.split("/", 1)[0]
    root = ROOTS.get(top) or ROOTS.get(top.removesuffix(".py"))
    if root is None:
        raise ValueError(f"{key}: not a file of dear or of a plugin whose code is followed")
    return root.parent / key


def is_package(module: str) -> bool:
    path = module_file(module)
    return path is not None and path.name == "__init__.py"


def _type_checking_only(node: ast.AST) -> bool:
    test = getattr(node, "test", None)
    return isinstance(node, ast.If) and (
        (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING")
        or (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"))


def _nodes(node: ast.AST):
    """Every node below `node`, but not the bodies of `if TYPE_CHECKING:` (their `else` runs)."""
    for child in ast.iter_child_nodes(node):
        if _type_checking_only(child):
            for other in child.orelse:
                yield other
                yield from _nodes(other)
            continue
        yield child
        yield from _nodes(child)


def imports(module: str) -> set[str]:
    """The package modules `module` imports anywhere in its code (each with the packages above it)."""
    return set(_imports(module, *_stamped(module)))


@lru_cache(maxsize=None)
def _imports(module: str, path: Path, mtime_ns: int) -> frozenset[str]:
    named = _analysis(path, mtime_ns)["named"]
    found = set(named["modules"])
    for base, aliases in named["from"]:
        found.update(f"{base}.{alias}" for alias in aliases if module_file(f"{base}.{alias}"))
    return frozenset({above for name in found if module_file(name) for above in _with_parents(name)} - {module})


def _named(tree: ast.Module, package: str) -> dict:
    """The modules a syntax tree names in its imports: `modules` (import x, from x import, import_module("x")) and
    `from` ([base, [names]]: each name may be a module too; the package's files decide, `_imports`)."""
    modules, froms = set(), []
    for node in _nodes(tree):
        if isinstance(node, ast.Import):
            modules.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[:len(anchor) - node.level + 1]
                base = ".".join([*anchor, *([base] if base else [])])
            modules.add(base)
            froms.append([base, [alias.name for alias in node.names]])
        elif isinstance(node, ast.Call) and _is_import_module(node.func) and node.args \
                and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str):
            modules.add(node.args[0].value)
    return {"modules": sorted(modules), "from": froms}


def _is_import_module(func: ast.AST) -> bool:
    return (isinstance(func, ast.Attribute) and func.attr == "import_module") or \
        (isinstance(func, ast.Name) and func.id == "import_module")


def _with_parents(module: str) -> list[str]:
    parts = module.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts) + 1)]


def closure(roots: list[str] | tuple[str, ...]) -> list[str]:
    """`roots` (with the packages above them) and every package module they import, directly or not; sorted."""
    seen: set[str] = set()
    todo = [above for root in roots for above in _with_parents(root)]
    while todo:
        module = todo.pop()
        if module in seen or module in VALUES:
            continue
        if module_file(module) is None:
            raise ValueError(f"{module}: no such module in the package")
        seen.add(module)
        todo.extend(imports(module) - seen)
    return sorted(seen)


def resources(modules: list[str]) -> list[str]:
    """The files of dear/resources/ that `modules` name as a string (by file name or stem), as code keys."""
    names = {}
    for path in sorted(RESOURCES.iterdir()) if RESOURCES.is_dir() else ():
        if path.is_file():
            names.setdefault(path.name, path)
            names.setdefault(path.stem, path)
    found = {names[text] for module in modules for text in _strings(*_stamped(module)) if text in names}
    return sorted(file_key(path) for path in found)


def _stamped(module: str) -> tuple[Path, int]:
    """(file, modification time): the key of the per-file caches below, so an edited file is read again."""
    path = module_file(module)
    return path, path.stat().st_mtime_ns


def _strings(path: Path, mtime_ns: int) -> frozenset[str]:
    """The string constants of a module's code (docstrings and help texts left out)."""
    return frozenset(_analysis(path, mtime_ns)["strings"])


def _without_docstrings(module: ast.Module) -> ast.Module:
    """`module` without the docstrings of the module, its classes and functions, and without help texts (in place:
    the tree is parsed for this alone)."""
    for node in ast.walk(module):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
                    and isinstance(body[0].value.value, str):
                node.body = body[1:] or [ast.Pass()]
        elif isinstance(node, ast.Call):
            name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", None)
            if name in HELP_KEYWORDS:
                node.keywords = [k for k in node.keywords if k.arg != HELP_KEYWORDS[name]]
    return module


def _registry(module: ast.Module, name: str) -> ast.Dict | None:
    """The dict literal assigned to `name` at the top level of `module` (None: there is none)."""
    for node in module.body:
        target = node.target if isinstance(node, ast.AnnAssign) else \
            (node.targets[0] if isinstance(node, ast.Assign) and len(node.targets) == 1 else None)
        if isinstance(target, ast.Name) and target.id == name and isinstance(node.value, ast.Dict):
            return node.value
    return None


def _module_name(path: Path) -> str:
    parts = Path(file_key(path)).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def registry_entries(module: str) -> dict[str, str]:
    """{key: sha256 of its entry's syntax tree} of the registry of `module` ({} if it has none)."""
    return dict(_analysis(*_stamped(module))["registry"])


def file_fingerprint(key: str) -> str:
    """sha256 of one file of the code (`file_key`): a module's syntax tree without docstrings, a YAML file's
    values, other bytes."""
    path = key_path(key)
    return _analysis(path, path.stat().st_mtime_ns)["fingerprint"]


@lru_cache(maxsize=None)
def _analysis(path: Path, mtime_ns: int) -> dict:
    """What the code graph reads of one file, cached in this process by the file's time and on disk by its bytes.

    Why cached: planning the paper's study asks for the same ~60 files' prints once per job's code (342 jobs),
    and every job records its own code: analysing ~55 modules took a job ~3 s of its start. The disk cache
    (`_cache_folder`) is keyed by the file's bytes, its module name and this module's own source, so an edit of
    either is analysed anew; a folder that cannot be written only costs the analysis.
    """
    data = path.read_bytes()
    name = _module_name(path) if path.suffix == ".py" else ""
    digest = hashlib.sha256(b"\0".join([_ANALYSER.encode(), name.encode(), path.suffix.encode(), data])).hexdigest()
    cached = _cache_folder() / digest[:2] / f"{digest}.json"
    with contextlib.suppress(OSError, ValueError):
        return json.loads(cached.read_text())
    found = _analyse(path, name, data)
    with contextlib.suppress(OSError):
        cached.parent.mkdir(parents=True, exist_ok=True)
        partial = cached.with_name(f"{cached.name}.{os.getpid()}.tmp")
        partial.write_text(json.dumps(found))
        os.replace(partial, cached)
    return found


def _analyse(path: Path, module: str, data: bytes) -> dict:
    """fingerprint (a module's normalised syntax tree, a YAML file's values, other bytes), and of a module the string
    constants, the modules its imports name and the fingerprint of each entry of its registry."""
    if path.suffix in (".yaml", ".yml"):
        values = json.dumps(yaml.safe_load(data.decode()), sort_keys=True, default=str)
        return {"fingerprint": hashlib.sha256(values.encode()).hexdigest()}
    if path.suffix != ".py":
        return {"fingerprint": hashlib.sha256(data).hexdigest()}
    tree = ast.parse(data.decode(), str(path))
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    named = _named(tree, package)
    tree = _without_docstrings(tree)
    strings = sorted({node.value for node in _nodes(tree)
                      if isinstance(node, ast.Constant) and isinstance(node.value, str)})
    table = _registry(tree, REGISTRIES[module]) if module in REGISTRIES else None
    registry = {} if table is None else \
        {key.value: hashlib.sha256(ast.dump(value, include_attributes=False).encode()).hexdigest()
         for key, value in zip(table.keys, table.values) if isinstance(key, ast.Constant)}
    if table is not None:
        table.keys, table.values = [], []  # the registry counts by entry (`registry`), not as part of the module
    fingerprint = hashlib.sha256(ast.dump(tree, include_attributes=False).encode()).hexdigest()
    return {"fingerprint": fingerprint, "strings": strings, "named": named, "registry": registry}


def _cache_folder() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "dear" / "codegraph"


def relative_file(module: str) -> str:
    """The code key of a module's file (dear.methods.coop -> dear/methods/coop.py)."""
    return file_key(module_file(module))


def fingerprints(files: list[str]) -> dict[str, str]:
    """{code key: its fingerprint}, sorted by key."""
    return {name: file_fingerprint(name) for name in sorted(files)}


def fingerprint(prints: dict[str, str]) -> str:
    """One sha256 over {file: fingerprint}: names and fingerprints."""
    digest = hashlib.sha256()
    for name, value in sorted(prints.items()):
        digest.update(f"{name}\0{value}\n".encode())
    return digest.hexdigest()


def code_record(plugin, counted: dict[str, str]) -> dict:
    """What a run records of a plugin's code: the fingerprint of each of its files a job counted (dear.pipeline.jobs.code),
    one sha256 over them, and whether those files are still the installed distribution's (its RECORD's sha256):
    `as installed`, `edited since installed` (naming the files), or `not in its RECORD` (an editable install: its files
    are a source tree, which RECORD does not list). The tree state of `dear`'s own checkout says nothing of these."""
    tops = {plugin.module.split(".")[0], plugin.target.partition(":")[0].split(".")[0]}
    files = {key: value for key, value in sorted(counted.items()) if key.split("/")[0].removesuffix(".py") in tops}
    return {"code_sha256": fingerprint(files), "code_files": files,
            **against_record(plugin.distribution, list(files))}


def against_record(distribution: str, keys: list[str]) -> dict:
    """{"installed": state, "edited": [files]} of code keys (package/file.py) against the distribution's RECORD."""
    import base64
    import hashlib

    try:
        listed = {str(path): path for path in importlib.metadata.distribution(distribution).files or [] if path.hash}
    except importlib.metadata.PackageNotFoundError:
        return {"installed": "unknown: the distribution is not installed"}
    if not keys or any(key not in listed for key in keys):
        return {"installed": "not in its RECORD (an editable install: a source tree, which RECORD does not list)"}

    def sha(key: str) -> str:
        digest = hashlib.sha256(key_path(key).read_bytes()).digest()
        return base64.urlsafe_b64encode(digest).rstrip(b"=").decode()

    edited = [key for key in keys if listed[key].hash.mode != "sha256" or sha(key) != listed[key].hash.value]
    return {"installed": "edited since installed" if edited else "as installed", "edited": edited}
