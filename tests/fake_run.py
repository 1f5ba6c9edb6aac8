"""Tiny, fast inputs of `dear train`: a random backbone folder, a few-shot table of PNGs, a roles table, params."""

from __future__ import annotations

import errno
import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import torch
import yaml
from PIL import Image

from dear.data.manifest import FEWSHOT_SCHEMA
from dear.runtime.io import sha256_file, write_parquet
from dear.methods.trained import ROLES_SCHEMA

ROOT = Path(__file__).resolve().parent.parent
CLASSNAMES = ["apple", "rocket", "guitar", "turtle", "camera", "cactus", "bicycle", "whale"]


def backbone(folder: Path, arch: str = "dear-world-tiny", seed: int = 0) -> str:
    """A random-weight backbone as `dear backbone` leaves it: model.pt (state dict) and card.json."""
    from dear.model.clip import create_model

    torch.manual_seed(seed)
    model = create_model(arch, None)
    folder.mkdir(parents=True, exist_ok=True)
    torch.save(model.state_dict(), folder / "model.pt")
    sha = sha256_file(folder / "model.pt")
    (folder / "card.json").write_text(json.dumps({"arch": arch, "sha256": sha}))
    return sha


def fewshot(path: Path, image_dir: Path, shots: int = 4, size: int = 32, drop_base_label: int | None = None) -> Path:
    """A few-shot table over len(CLASSNAMES) classes (first half base), with one PNG per row."""
    rng = np.random.default_rng(0)
    image_dir.mkdir(parents=True, exist_ok=True)
    n_base = len(CLASSNAMES) // 2
    rows = []
    for label, name in enumerate(CLASSNAMES):
        subset, subset_label = ("base", label) if label < n_base else ("novel", label - n_base)
        if subset == "base" and subset_label == drop_base_label:
            continue
        for shot in range(shots + 1):
            file = image_dir / f"{label}_{shot}.png"
            pixels = rng.integers(0, 256, (size, size, 3), dtype=np.uint8)
            pixels[: size // 2, : size // 2] = (37 * label) % 256  # a class-specific patch
            Image.fromarray(pixels).save(file)
            use = "train" if shot < shots else "val"
            rows.append(dict(path=str(file), label=label, classname=name, split=use, subset=subset,
                             subset_label=subset_label, imagenet_label=None, width=size, height=size, sha256=None,
                             fewshot_split=use, manifest_row=len(rows)))
    table = pa.Table.from_pylist(rows, schema=FEWSHOT_SCHEMA)
    write_parquet(path, table, FEWSHOT_SCHEMA)
    return path


def roles(path: Path, model_sha256: str, layers: int = 2, heads: int = 4,
          kinds: tuple = (("attribute", "color"), ("attribute", "object"), ("generalization", None), ("mixed", None))) -> Path:
    """One row per head of every layer; head h gets kinds[h % len(kinds)] (mask_role, concept)."""
    rows = []
    for layer in range(1, layers + 1):
        for head in range(heads):
            kind, concept = kinds[head % len(kinds)]
            rows.append(dict(layer=layer, head=head, concept=concept or "other", mask_role=kind, model_sha256=model_sha256))
    write_parquet(path, pa.Table.from_pylist(rows, schema=ROLES_SCHEMA), ROLES_SCHEMA)
    return path


def params_file(path: Path, recipe: dict | None = None, **sections) -> Path:
    """The project's params.yaml with small training values; `sections` override keys per section, `recipe`
    keys of every training recipe."""
    raw = yaml.safe_load((ROOT / "params.yaml").read_text())
    small_recipes(raw["train"], epochs=2, batch_size=4, warmup_epochs=1, rep_dim=16)
    raw["train"].update(checkpoint_every=2)
    raw["compute"].update(device="cpu", workers=0)
    small_recipes(raw["train"], **(recipe or {}))
    for section, values in sections.items():
        raw[section].update(values)
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return path


def small_recipes(train: dict, **values) -> dict:
    """Set `values` (epochs, batch_size, ...) for every method of a raw `train` section (train.recipes.all),
    the transfer source's run and every per-dataset change included."""
    recipes = train.setdefault("recipes", {})
    for name, block in recipes.items():
        block = block or {}
        for key in values:
            block.pop(key, None)
            (block.get("transfer") or {}).pop(key, None)
            for changes in (block.get("datasets") or {}).values():
                (changes or {}).pop(key, None)
        recipes[name] = block
    recipes.setdefault("all", {}).update(values)
    return train


def tiny_depths(train: dict) -> dict:
    """Prompt depths that fit dear-world-tiny's 2 image and 2 text layers (as configs/smoke.yaml's): the planner
    refuses params.yaml's 3 on it."""
    recipes = train.setdefault("recipes", {})
    recipes["maple"] = {**(recipes.get("maple") or {}), "prompt_depth": 2}
    recipes["promptsrc"] = {**(recipes.get("promptsrc") or {}), "vision_depth": 2, "text_depth": 2}
    recipes["tac"] = {**(recipes.get("tac") or {}), "vision_depth": 2, "text_depth": 2}
    return train


def invoke(*args, code: int = 0):
    """`dear <args>` in this process (typer's runner); its exit code must be `code`."""
    from typer.testing import CliRunner

    from dear.cli import app

    result = CliRunner().invoke(app, [str(a) for a in args])
    assert result.exit_code == code, result.output
    return result


def prepared_project(root: Path, recipes: dict | None = None) -> Path:
    """A study's output root with a fake dataset prepared (4 classes, 2 shots, seed 1) and a random tiny backbone;
    its params file, whose training is one short epoch, with `recipes` ({method: {key: value}}) on top."""
    from tests.fake_coop import make_fake_dataset, write_params

    make_fake_dataset(root / "raw", "world_objects", n_classes=4, per_class=3)
    params = write_params(root / "params.yaml", root=root / "raw", datasets=["world_objects"], shots=2, val_shots=1,
                          seeds=[1])
    raw = yaml.safe_load(params.read_text())
    raw["train"] = yaml.safe_load(params_file(root / "small.yaml").read_text())["train"]
    small_recipes(raw["train"], epochs=1)
    for method, values in (recipes or {}).items():
        raw["train"]["recipes"][method] = {**(raw["train"]["recipes"].get(method) or {}), **values}
    params.write_text(yaml.safe_dump(raw, sort_keys=False))
    invoke("prepare", "--params", params, "--dataset", "world_objects", "--out", root / "data/world_objects")
    backbone(root / "backbone")
    return params


def save_that_fills_the_disk(real_save, failing_call: int = 2):
    """A `torch.save` stand-in whose `failing_call`-th call leaves a partial file and raises ENOSPC (a disk
    filling up during a checkpoint write); the other calls save for real."""
    calls = []

    def save(obj, target, *args, **kwargs):
        calls.append(1)
        if len(calls) == failing_call:
            Path(target).write_bytes(b"partial")
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_save(obj, target, *args, **kwargs)

    return save
