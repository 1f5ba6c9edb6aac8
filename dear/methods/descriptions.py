"""TAC's class descriptions: the authors' texts per class, read from a checkout of FushengHao/TAC or fetched.

Their VLPromptLearner reads `./descriptions/<name>_prompt.json` (a JSON object: the class name, as their
trainer writes it in a prompt, to a list of texts) and encodes each class's texts with the frozen CLIP: the
mean of the unnormalized features, normalized, is the class's feature that k-means clusters and the text L1
pulls towards. The texts are the authors' data, like a dataset or weights: the project holds none of them. A
recipe names them (`descriptions`, `descriptions_dir`; dear/methods/recipes/tac.yaml):
- a bare file name (`caltech_prompt.json`): the authors' file, read from `<descriptions_dir>/descriptions/`,
  a checkout of FushengHao/TAC or the folder `dear fetch-weights` fills at `COMMIT` (each file checked
  against the digest below);
- a path with a folder: a JSON file of the same format, of one's own;
- `templates`: PromptSRC's 60 templates of the recipe's `templates` key (ours: the embedded world);
- null: none known for the dataset (`dear check` says what to set).
Class names map onto the file's keys by the project's one rule (`prompts.classname`: "_" read as a space),
as their trainer's `gpt3_prompt[classname.replace("_", " ")]`. Nothing here imports torch (`dear check`).
"""

from __future__ import annotations

import hashlib
import json
import os
import urllib.request
from pathlib import Path
from typing import Callable

from dear.errors import DearError
from dear.runtime.io import write_bytes
from dear.methods import prompts

REPOSITORY = "FushengHao/TAC"
COMMIT = "563e7db131710389186553829eb0db87393d4357"  # the recipe's commit; the head 914c306 changes only README.md
URL = f"https://raw.githubusercontent.com/{REPOSITORY}/{COMMIT}/descriptions/{{name}}"
TEMPLATES = "templates"

# The files of descriptions/ at COMMIT: sha256 of the bytes, computed from a clone of the repository; the five
# ImageNet files (one blob, the same bytes under five names) are not in the stored clone: their git blob id,
# which the repository's tree names, sha1 of b"blob <size>\0" + the bytes.
DIGESTS: dict[str, tuple[str, str]] = {
    "caltech_prompt.json": ("sha256", "e98b2b4809f04d9055296696518a78584d4252235d523e3093e9c52b3dba7564"),
    "dtd_prompt.json": ("sha256", "b4ce4e4f64d655e8cf3db81db1e83ad55b40584c27f4c941502ba28d8b65b846"),
    "eurosat_prompt.json": ("sha256", "0be655a91b36395cb84c531f39b32d47481aefb86fd7ff838c900d5063e8ac14"),
    "fgvc_prompt.json": ("sha256", "a29ddbf5c1cab48b6fbcbb9e4930df55e69f83d20d0fc508969d7c75a2457fa2"),
    "food101_prompt.json": ("sha256", "a9564b8e8e371b06416f7ae9e5508853431fb3eae6a4212843802bd07e1a8c0d"),
    "oxford_flowers_prompt.json": ("sha256", "0202f638ed18a2633375f84175b3db70bfc14927c6c82d57a87d42a1e722f844"),
    "oxford_pets_prompt.json": ("sha256", "14a697c4e72e0115189b501a4be64ef033bf94fcb540819632cb34afe9d29ff2"),
    "stanford_cars_prompt.json": ("sha256", "3505d5d67a06b76af14e3e74d6543da3d59aa4b29869a30cbbb56adbc751fe8e"),
    "sun397_prompt.json": ("sha256", "f743422d1786b66b019c4f7d80b181a00be0b6a783a36c5fb928aa45d59662d4"),
    "ucf101_prompt.json": ("sha256", "39bc7fbf0e7e60d48cc9e50ed008e6a5d7003c2d68713f0f76ec823cbdce0d09"),
    **{f"{name}_prompt.json": ("git-blob", "86ab87f6934a4be4d628eae53c30b15dbb683f34")
       for name in ("imagenet", "imagenetv2", "imagenet_sketch", "imagenet_a", "imagenet_r")},
}


def source(recipe) -> Path | None:
    """The JSON file a recipe's `descriptions` names (None: `templates`, or none known)."""
    name = recipe.get("descriptions")
    if name is None or name == TEMPLATES:
        return None
    if os.sep in name or "/" in name:
        return Path(name)
    return Path(recipe.get("descriptions_dir") or ".") / "descriptions" / name


def is_authors(recipe) -> bool:
    """The recipe names one of the authors' files (fetched or read from a checkout), not a file of one's own."""
    return recipe.get("descriptions") in DIGESTS


def missing(recipes, params_file: str) -> list[str]:
    """One line per recipe key whose descriptions are not on this machine, saying what to fetch or set."""
    authors: dict[tuple[str, Path], list[str]] = {}  # (recipe, folder) -> the authors' files missing there
    own: dict[str, None] = {}
    for recipe in recipes:
        path = source(recipe)
        if path is None or path.is_file():
            continue
        if is_authors(recipe):
            authors.setdefault((recipe.recipe, path.parent), []).append(path.name)
        else:
            own[f"train.recipes.{recipe.recipe}.descriptions: {path} not found; point it to a JSON file "
                "{class name: [texts]}"] = None
    lines = [f"train.recipes.{name}.descriptions: {REPOSITORY}'s {', '.join(dict.fromkeys(files))} not in {folder}; "
             f"run `dear fetch-weights --params {params_file}` where there is network (it fetches them at "
             f"{COMMIT[:7]}), or set train.recipes.{name}.descriptions_dir to a checkout of {REPOSITORY}"
             for (name, folder), files in authors.items()]
    return lines + list(own)


def read(path: Path, classnames: list[str]) -> list[list[str]]:
    """Each class's texts, in class order, from a file {class name: [texts]} (`prompts.classname` of each name)."""
    if not path.is_file():
        raise DearError(f"{path}: class descriptions not found; `dear check` says what to fetch or set")
    try:
        table = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        raise DearError(f"{path}: not a readable JSON file of class descriptions ({err}); fetch it again "
                        "(`dear fetch-weights`) or fix it") from None
    names = [prompts.classname(name) for name in classnames]
    missing = [name for name in names if not isinstance(table, dict) or name not in table]
    if missing:
        raise DearError(f"{path}: no descriptions of class {missing[0]!r} ({len(missing)} of {len(names)} classes "
                        "missing); its keys are the class names with '_' read as a space: add them")
    empty = [name for name in names if not table[name] or not all(isinstance(t, str) for t in table[name])]
    if empty:
        raise DearError(f"{path}: the descriptions of class {empty[0]!r} are not a non-empty list of texts; fix them")
    return [list(table[name]) for name in names]


def digest(data: bytes, kind: str) -> str:
    if kind == "git-blob":
        return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()
    return hashlib.sha256(data).hexdigest()


def fetch(name: str, folder: Path, opener: Callable[[str], bytes] | None = None, url: str | None = None) -> Path:
    """`descriptions/<name>` at COMMIT into `<folder>/descriptions/` (kept when already there with its digest),
    checked against `DIGESTS` before it is written (atomically)."""
    if name not in DIGESTS:
        raise DearError(f"{name}: not a descriptions file of {REPOSITORY}@{COMMIT[:7]}; known: {', '.join(DIGESTS)}")
    kind, expected = DIGESTS[name]
    path = folder / "descriptions" / name
    if path.is_file() and digest(path.read_bytes(), kind) == expected:
        return path
    address = (url or URL).format(name=name)
    data = (opener or _download)(address)
    if digest(data, kind) != expected:
        raise DearError(f"{address}: {kind} {digest(data, kind)[:12]}..., not {REPOSITORY}@{COMMIT[:7]}'s "
                        f"{expected[:12]}...; nothing written: check the address or fetch it again")
    path.parent.mkdir(parents=True, exist_ok=True)
    write_bytes(path, data)
    return path


def fetch_all(recipes, opener: Callable[[str], bytes] | None = None, url: str | None = None) -> list[Path]:
    """Every authors' file the recipes name, fetched into its recipe's `descriptions_dir` (`dear fetch-weights`)."""
    wanted = dict.fromkeys((recipe.descriptions, Path(recipe.get("descriptions_dir") or "."))
                           for recipe in recipes if is_authors(recipe))
    return [fetch(name, folder, opener, url) for name, folder in wanted]


def _download(address: str) -> bytes:
    try:
        with urllib.request.urlopen(address, timeout=60) as response:  # noqa: S310 (a pinned address)
            return response.read()
    except OSError as err:  # URLError, timeouts, refused connections
        raise DearError(f"cannot download {address}: {getattr(err, 'reason', err)}; run `dear fetch-weights` where "
                        f"there is network, or set train.recipes.tac.descriptions_dir to a checkout of {REPOSITORY}") from None
