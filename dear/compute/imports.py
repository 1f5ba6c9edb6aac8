"""Which libraries a served command has imported: `sys.modules` as the command's own process would have it.

A stage records torch's state in its provenance (kernels, threads, MKL's
branch: `dear.compute.reproducible.in_force`) and sets torch up only when it uses
torch: `dear world` and `dear prepare` never import it. In a plain `dear`
process, "torch is in sys.modules" says so. In a command the warm server
forked, torch is always there (the server imported it), so the child records
the top-level names its own code imports (`track`: every `import` statement
and `importlib.import_module`), and `loaded` answers from them.

Standard library only: `dear.compute.reproducible` reads this in every command.
"""

from __future__ import annotations

import builtins
import importlib
import sys

_SEEN = "dear_served_imports"  # the attribute of the tracking __import__ that holds the names imported
# what importing each of these brings into a process of its own, among what the server preloaded
_BRINGS = {"torchvision": ("torch",), "open_clip": ("torch", "torchvision", "timm"), "timm": ("torch", "torchvision")}


def track() -> None:
    """From now on, note the top-level name of every absolute import (in a served command, before it runs)."""
    seen: set[str] = set()
    plain_import, plain_import_module = builtins.__import__, importlib.import_module

    def tracking_import(name, globals=None, locals=None, fromlist=(), level=0):
        if level == 0:
            _note(seen, name)
        return plain_import(name, globals, locals, fromlist, level)

    def tracking_import_module(name, package=None):
        if not name.startswith("."):
            _note(seen, name)
        return plain_import_module(name, package)

    setattr(tracking_import, _SEEN, seen)
    builtins.__import__ = tracking_import
    importlib.import_module = tracking_import_module


def _note(seen: set[str], name: str) -> None:
    top = name.partition(".")[0]
    if top not in seen:
        seen.add(top)
        seen.update(_BRINGS.get(top, ()))


def loaded(name: str):
    """The module `name` if this command has imported it (as its own process would have), else None."""
    module = sys.modules.get(name)
    seen = getattr(builtins.__import__, _SEEN, None)
    if module is None or seen is None:
        return module
    return module if name.partition(".")[0] in seen else None
