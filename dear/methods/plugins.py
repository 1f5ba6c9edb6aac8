"""Methods from installed packages: the `dear.methods` entry-point group.

A package declares its methods the way pytest plugins, Snakemake executors
and DVC plugins are declared, in its `pyproject.toml`:

    [project.entry-points."dear.methods"]
    clip_adapter = "clip_adapter:METHOD"

where `METHOD` is a `dear.contract.Method`: what `dear.methods.REGISTRY`
gives for a built-in method (the model class, the recipe file, a title,
which classes it scores), plus the contract version it was written for. The
entry point's name is the method's name in `study.methods`; it may not be a
built-in method's or recipe's name. Nothing here imports torch or the
plugin's model module: `dear recipe` and `dear check` read a plugin's entry
and recipe as they read a built-in one's, and the model class is imported
only when a model is built (`dear.methods.model_class`) or checked
(`problems`).
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from dear.errors import DearError

GROUP = "dear.methods"
PROTOCOLS = ("base_to_novel", "transfer", "few_shot")  # the protocols a method may run in (dear.methods.recipe)
# dear.contract.VERSION: raised when a name of the contract changes meaning or goes (docs/your-method.md#versions)
CONTRACT_VERSION = 1
# hooks a method's class must define itself (else it is the base's, which raises): always / when its recipe trains
TEXT_HOOK = "compute_text_features"
TRAIN_HOOK = "step"
FIT_HOOK = "fit"


@dataclass(frozen=True)
class Method:
    """A plugin method's declaration, the object its entry point names.

    model: "package.module:Class", a `dear.contract.MethodModel` subclass;
    recipe: "package:path/inside/it.yaml", the recipe file (docs/your-method.md#the-recipe);
    title: one line for tables and `dear recipe`;
    contract: the `dear.contract.VERSION` the method was written for;
    scores: "" when a prompt names any class, else why it scores only some (a linear probe: its own classes);
    protocols: those its author runs it in, each exercised by `dear.testing` (default: all of them);
    roles: True when the method can run with DeAR's head roles: `<name>+roles` is then a method too, whose model
    receives the roles table's heads in `build(roles)` (docs/your-method.md#head-roles).
    """

    model: str
    recipe: str
    title: str
    contract: int
    scores: str = ""
    protocols: tuple[str, ...] = PROTOCOLS
    roles: bool = False


@dataclass(frozen=True)
class Plugin:
    """One entry point of the group, loaded: its method's declaration and the distribution that installed it."""

    name: str  # the entry point's name: the method's name
    method: Method
    target: str  # the entry point's value, e.g. clip_adapter:METHOD
    distribution: str  # the installed distribution (pip's name), e.g. clip-adapter
    version: str

    @property
    def module(self) -> str:
        return self.method.model.partition(":")[0]

    @property
    def class_name(self) -> str:
        return self.method.model.partition(":")[2]

    @property
    def label(self) -> str:
        """How messages name it: the method, its entry point and distribution."""
        return label(self.name, self.target, self.distribution, self.version)

    def recipe_path(self) -> Path:
        """The recipe file the declaration names ("package:file"), found without importing the package."""
        package, _, relative = self.method.recipe.partition(":")
        return package_folder(package) / relative


@dataclass(frozen=True)
class Broken:
    """An entry point that could not be loaded as a method: its name and the one-line problem."""

    name: str
    problem: str


def label(name: str, target: str, distribution: str, version: str) -> str:
    return f"plugin method {name!r} ({target} in {distribution} {version})"


def package_folder(package: str) -> Path:
    """The folder of an importable package (its `__init__`'s), found without running it."""
    spec = importlib.util.find_spec(package.split(".")[0])
    if spec is None:
        raise DearError(f"package {package!r} is not importable; install it (pip install -e <its folder>)")
    folder = Path(spec.submodule_search_locations[0]) if spec.submodule_search_locations else Path(spec.origin).parent
    return folder.joinpath(*package.split(".")[1:])


@lru_cache(maxsize=None)
def discovered() -> tuple[Plugin | Broken, ...]:
    """Every installed entry point of the group, loaded once per process, in name order."""
    found = []
    for point in sorted(importlib.metadata.entry_points(group=GROUP), key=lambda p: p.name):
        dist = getattr(point, "dist", None)
        distribution, version = (dist.name, dist.version) if dist else ("?", "?")
        where = label(point.name, point.value, distribution, version)
        uninstall = f"pip uninstall {distribution}" if dist else "uninstall its package"
        try:
            declared = point.load()
        except Exception as error:  # the plugin's own code: any failure is its problem, reported in one line
            found.append(Broken(point.name, f"{where}: cannot be imported ({type(error).__name__}: {error}); "
                                            + (shadowed(point.module) or f"fix the package or {uninstall}")))
            continue
        if not isinstance(declared, Method):
            found.append(Broken(point.name, f"{where}: names a {type(declared).__name__}, not a "
                                            "dear.contract.Method; declare the method as docs/your-method.md shows"))
            continue
        found.append(Plugin(point.name, declared, point.value, distribution, version))
    return tuple(found)


def shadowed(module: str) -> str | None:
    """Why a plugin's module may have come from the wrong place: a folder of its name without __init__.py (a
    namespace package), found on sys.path before the installed package, as a flat `name/name/` package is seen
    from its parent folder under an editable install. The cure, or None when the module is a regular one."""
    try:
        spec = importlib.util.find_spec(module.split(".")[0])
    except (ImportError, ValueError):
        return None
    if spec is None or spec.origin not in (None, "namespace") or not spec.submodule_search_locations:
        return None
    folders = ", ".join(str(folder) for folder in spec.submodule_search_locations)
    return (f"likely cause: Python imported the folder {folders} (no __init__.py) instead of the installed package; "
            f"start Python in another folder, or move the package to the src layout (src/{module.split('.')[0]}/, "
            "as `dear new-method` writes it) and reinstall it")


def clear() -> None:
    """Forget what was discovered (after a package was installed or removed in this process: tests)."""
    discovered.cache_clear()


def shadows(plugin: Plugin, name: str) -> str:
    return (f"{plugin.label}: its name shadows the built-in {name!r}; rename its entry point in the package's "
            f"pyproject.toml ([project.entry-points.\"{GROUP}\"]) and reinstall it")


def wrong_contract(plugin: Plugin) -> str:
    return (f"{plugin.label}: written for method contract {plugin.method.contract!r}, but this dear provides "
            f"contract {CONTRACT_VERSION}; install the plugin's version for contract {CONTRACT_VERSION}, or a dear "
            f"that provides {plugin.method.contract!r} (docs/your-method.md#versions)")


def required_hooks(cls, trains: bool) -> list[str]:
    """The hooks a method's class must define: a probe fitted on features its `fit`, any other the text hook, and
    the loss of a training step when its recipe trains."""
    if getattr(cls, "fits_features", False):
        return [FIT_HOOK]
    return [TEXT_HOOK, *([TRAIN_HOOK] if trains else [])]
