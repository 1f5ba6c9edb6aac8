"""Plugin methods for tests: a package written and installed as pip installs one, into a folder of its own.

`write_plugin` writes a package and the `.dist-info` pip would write beside it (METADATA, entry_points.txt,
RECORD);
`installed_plugin` puts that folder on sys.path for a `with` block, with a fresh discovery of entry points,
and takes both away after. `pip_install` installs a real package (the example, a generated skeleton) with pip
into a folder, for subprocesses (`PYTHONPATH=<folder>`).
"""

from __future__ import annotations

import base64
import contextlib
import functools
import hashlib
import importlib
import subprocess
import sys
from pathlib import Path

from dear.methods import plugins

ROOT = Path(__file__).resolve().parents[1]

MODEL = '''"""A test plugin method: CLIP with the hand-written prompt, and whatever the test adds."""

import time

import torch
from torch import nn

from dear.contract import MethodModel, Step, cross_entropy, prompts, towers


class Model(MethodModel):
    TERMS = ("ce",)
{body}
    def compute_text_features(self, classnames, template):
        texts = [prompts.hand_written(template, name).text for name in classnames]
        return towers.encode_texts(self.clip, self.text, self.tokenizer, texts)

    def step(self, prefix, labels, classnames, frozen_image=None):
        logits = self.logits(self.encode(prefix), classnames)[:, 0]
        ce = cross_entropy(logits, labels)
        return Step(ce, {{"ce": ce}}, logits)
'''

RECIPE = '''title: "a test plugin"
{base}prompt: template
keys:
  template: {{type: str, help: "the hand-written prompt"}}
  precision: {{type: "fp16|fp32|bf16", help: "the run's precision"}}
recipe:
  - source: "tests/plugins.py"
    kind: ours
    values: {values}
'''


def write_plugin(site: Path, package: str, method: str | None = None, model_body: str = "", trains: bool = False,
                 contract: int = 1, init: str | None = None, recipe: str | None = None, model: str | None = None,
                 version: str = "0.1.0") -> str:
    """Write package `package` (its Method declared in __init__) and its dist-info under `site`; the method's name."""
    method = method or package
    folder = site / package
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "model.py").write_text(MODEL.format(body=model_body))
    (folder / "recipe.yaml").write_text(recipe if recipe is not None else RECIPE.format(
        base="base: dassl\n" if trains else "",
        values='{template: "a photo of a {}.", optimizer: sgd, lr: 2.0e-3, schedule: cosine, precision: fp32}'
        if trains else '{template: "a photo of a {}.", precision: fp32}'))
    (folder / "__init__.py").write_text(init if init is not None else (
        "from dear.contract import Method\n\n"
        f"METHOD = Method(model={model or package + '.model:Model'!r}, recipe='{package}:recipe.yaml', "
        f"title='a test plugin', contract={contract})\n"))
    dist = site / f"{package}-{version}.dist-info"
    dist.mkdir(exist_ok=True)
    (dist / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {package.replace('_', '-')}\nVersion: {version}\n")
    (dist / "entry_points.txt").write_text(f"[{plugins.GROUP}]\n{method} = {package}:METHOD\n")
    (dist / "RECORD").write_text("".join(f"{path.relative_to(site)},sha256={_urlsafe_sha256(path)},"
                                         f"{path.stat().st_size}\n" for path in sorted(folder.iterdir())
                                         if path.is_file()))
    return method


def _urlsafe_sha256(path: Path) -> str:
    """A file's hash as a wheel's RECORD writes it (PEP 376/427: urlsafe base64 of the sha256, no padding)."""
    return base64.urlsafe_b64encode(hashlib.sha256(path.read_bytes()).digest()).rstrip(b"=").decode()


@contextlib.contextmanager
def installed_plugin(site: Path, package: str, **kwargs):
    """The plugin of `write_plugin`, importable and discovered for the block; gone after."""
    method = write_plugin(site, package, **kwargs)
    sys.path.insert(0, str(site))
    importlib.invalidate_caches()
    plugins.clear()
    try:
        yield method
    finally:
        sys.path.remove(str(site))
        for name in [name for name in sys.modules if name == package or name.startswith(package + ".")]:
            del sys.modules[name]
        plugins.clear()


def fresh_discovery(patch, site: Path) -> None:
    """For a MonkeyPatch's lifetime: `site` on sys.path and the entry points discovered anew (then as before)."""
    patch.syspath_prepend(str(site))
    importlib.invalidate_caches()
    patch.setattr(plugins, "discovered", functools.lru_cache(maxsize=None)(plugins.discovered.__wrapped__))


def pip_install(package: Path, site: Path) -> Path:
    """`pip install` a package folder into `site` (no dependencies: dear is the one they have; no build isolation:
    offline), as a user installs a plugin; `site` goes on PYTHONPATH of the processes that use it."""
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation",
                    "--target", str(site), str(package)], check=True, capture_output=True, text=True)
    return site
