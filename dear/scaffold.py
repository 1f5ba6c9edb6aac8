"""`dear new-method NAME`: the package skeleton of a method of one's own, which passes its own test as written.

It writes what docs/your-method.md builds by hand for CLIP-Adapter (examples/clip-adapter/):
- `pyproject.toml`, declaring the method under the `dear.methods` entry-point group;
- `src/<name>/__init__.py`, its `dear.contract.Method` (model class, recipe file, title, contract version), in
  the src layout the packaging guide recommends: a flat `<name>/<name>/` is shadowed by its outer folder when
  Python starts in the parent folder of an editable install;
- `src/<name>/model.py`, a `MethodModel` with every hook a method fills, each at its default: the class features
  of the hand-written prompt and CLIP's own image feature, so the skeleton is zero-shot CLIP with a learnable
  nothing, and its title says so;
- `src/<name>/recipe.yaml`, its values (zero-shot CLIP's prompt per dataset, resize filter, precision) with their
  sources, as every recipe gives them;
- `tests/test_<name>.py`, `dear.testing`'s kit on it: the checks every built-in method passes.
Nothing is overwritten: an existing folder is refused.
"""

from __future__ import annotations

import keyword
import re
from pathlib import Path

from dear.errors import DearError
from dear.runtime.io import output_folder
from dear.methods import RESERVED, available
from dear.methods.plugins import CONTRACT_VERSION, GROUP

NAME = re.compile(r"^[a-z][a-z0-9_]*$")

PYPROJECT = '''# The method `{name}` of dear, as a package of its own (docs/your-method.md).
#   pip install -e .      (into the environment dear is installed in; then name `{name}` in study.methods)
#   pytest tests          (dear.testing's kit: the checks every built-in method passes)
[build-system]
requires = ["setuptools>=77"]
build-backend = "setuptools.build_meta"

[project]
name = "{dist}"
version = "0.1.0"
description = "{name}: a method of dear"
requires-python = ">=3.11"
dependencies = ["dear"]

[project.entry-points."{group}"]
{name} = "{name}:METHOD"

# the src layout: Python started in this folder's parent (or here) imports the installed package, never the
# folder of the same name (packaging.python.org, "src layout vs flat layout")
[tool.setuptools]
package-dir = {{"" = "src"}}
packages = ["{name}"]

[tool.setuptools.package-data]
{name} = ["recipe.yaml"]
'''

INIT = '''"""The method `{name}` as dear finds it: its declaration, read without importing torch."""

from dear.contract import Method

METHOD = Method(
    model="{name}.model:Model",
    recipe="{name}:recipe.yaml",
    title="{name}: zero-shot CLIP with a learnable nothing (a dear new-method skeleton: fill in its hooks)",
    contract={contract},
)
'''

MODEL = '''"""The method `{name}`: its learnable parts, how they change CLIP's towers, its loss and its inference.

As generated, every hook is at its default and the method is zero-shot CLIP: nothing learns. To make it
yours (docs/your-method.md#hooks has each hook's shapes and when the stages call it):
- `build(roles)`: create the learnable tensors (nn.Parameter, nn.Module) under the run's seed;
- `compute_text_features(classnames, template)`: the class features [C, E], normalized;
- `encode(prefix)`: the image features [B, S+1, E] from the frozen blocks' output [B, 1+N, D] (after ln_pre
  and blocks 1..frozen_depth);
- `frozen_depth` (property): the image blocks before the first one your tokens enter; a method that inserts
  tokens into the image tower at layer 1 returns 0 and runs every block in `encode` (else they run twice);
- `zero_effect()`: set the learnable tensors to values without effect and return True, where such values exist
  (the kit then checks the features are zero-shot CLIP's);
- `step(prefix, labels, classnames, frozen_image)`: the loss of one batch (a `Step`), once the recipe trains
  (`base: dassl` in recipe.yaml, with the optimizer, lr, schedule and precision of your paper);
- `output(logits, alpha, seen, novel)`: the prediction from the stream logits (default: stream 0).
Shapes: B images, C classes, E embedding width, D image tower width, N patches, S extra streams.
"""

from __future__ import annotations

import torch

from dear.contract import MethodModel, prompts, towers


class Model(MethodModel):
    def build(self, roles) -> None:
        """Nothing learnable yet."""

    def compute_text_features(self, classnames: list[str], template: str | None) -> torch.Tensor:
        """[C, E]: the frozen CLIP's features of the hand-written prompt of each class."""
        texts = [prompts.hand_written(template, name).text for name in classnames]
        return towers.encode_texts(self.clip, self.text, self.tokenizer, texts)
'''

RECIPE = '''# The recipe of `{name}`: every value its runs use, each with its source (docs/your-method.md#the-recipe).
# As generated it takes zero-shot CLIP's prompt per dataset, resize filter and precision (`inherit`, shown as our
# choice of the zeroshot recipe's values). To train, add `base: dassl` (the trainer's keys: optimizer, lr, epochs,
# batch_size, ...) and a `recipe:` layer of your paper's values with their source; declare each key of your own
# under `keys:` with its type and help.
title: "{name} (a dear new-method skeleton)"
prompt: template
keys:
  template: {{type: str, help: "the hand-written prompt of the class features; {{}} is the class name"}}
  interpolation: {{type: "bicubic|bilinear", help: "resize filter of the test transform"}}
  precision: {{type: "fp16|fp32|bf16", help: "fp16: CLIP in half precision; fp32; bf16 autocast. On CPU every one runs fp32"}}
inherit:
  recipe: zeroshot
  keys: [template, interpolation, precision]
'''

TEST = '''"""`{name}` through dear's testing kit: the checks every built-in method passes (docs/your-method.md#testing)."""

from dear.testing import Kit


def test_{name}_passes_the_kit(tmp_path):
    Kit("{name}", tmp_path).check()
'''


def run(name: str, out: Path) -> list[Path]:
    """Write the package of method `name` into the new folder `out`; the files written."""
    if not NAME.match(name) or keyword.iskeyword(name):
        raise DearError(f"{name!r}: a method's name is its Python package's too: lower-case letters, digits and _, "
                        "starting with a letter (e.g. my_adapter)")
    if name in RESERVED or name in available():
        raise DearError(f"{name!r}: already the name of a {'built-in' if name in RESERVED else 'installed'} method; "
                        "choose another")
    if out.exists():
        raise DearError(f"{out}: already exists; choose a new folder (--out)")
    values = {"name": name, "dist": name.replace("_", "-"), "group": GROUP, "contract": CONTRACT_VERSION}
    files = {"pyproject.toml": PYPROJECT, f"src/{name}/__init__.py": INIT, f"src/{name}/model.py": MODEL,
             f"src/{name}/recipe.yaml": RECIPE, f"tests/test_{name}.py": TEST}
    with output_folder(out, owns=["*"]) as staging:  # all of it or nothing
        for relative, template in files.items():
            (staging / relative).parent.mkdir(parents=True, exist_ok=True)
            (staging / relative).write_text(template.format(**values))
    return [out / relative for relative in files]
