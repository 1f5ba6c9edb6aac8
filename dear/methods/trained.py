"""model.pt: the learnable tensors of a run plus what rebuilds its method's model.

The file holds no frozen CLIP weight: the method's name, its resolved recipe
(every value and its source), the learnable tensors, and the hashes that tie
it to its backbone, its roles table and its params. `load_trained` refuses a
mismatched backbone, roles table or recipe instead of silently evaluating the
wrong model.
"""

from __future__ import annotations

import io
import json
from pathlib import Path

import pyarrow as pa
import torch

from dear.errors import DearError
from dear.runtime.io import load_torch, read_parquet, sha256_file, write_bytes
from dear.methods import create
from dear.methods.recipe import Recipe, lengthened
from dear.model import internals as oc
from dear.model.masks import HeadRole, roles_from_rows

FORMAT = "dear-trained/2"  # /1: before recipes (a method config of flags): retrain
ROLES_SCHEMA = pa.schema([
    pa.field("layer", pa.int64()),
    pa.field("head", pa.int64()),
    pa.field("concept", pa.string()),
    pa.field("mask_role", pa.string()),
    pa.field("model_sha256", pa.string()),
])


def backbone_sha256(backbone, folder: Path | None = None) -> str:
    """The backbone's weights hash: the card's `sha256`, else the hash of `folder/model.pt`."""
    sha = backbone.card.get("sha256")
    if sha:
        return str(sha)
    if folder is not None and (Path(folder) / "model.pt").is_file():
        return sha256_file(Path(folder) / "model.pt")
    raise DearError(f"{folder}: backbone card has no sha256; rerun `dear backbone`")


def read_roles(path: Path, backbone, model_sha256: str) -> list[HeadRole]:
    """The roles table's heads, checked against the backbone they are applied to."""
    table = read_parquet(path, ROLES_SCHEMA)
    shas = set(table["model_sha256"].to_pylist())
    if shas and shas != {model_sha256}:
        raise DearError(f"{path}: roles were profiled on another backbone (model_sha256 {sorted(shas)[0][:12]}..., "
                        f"this backbone {model_sha256[:12]}...); rerun `dear profile` with this backbone")
    tower = oc.vision_tower(backbone.model)
    return roles_from_rows(table.to_pylist(), tower.layers, tower.heads, str(path))


def save_trained(path: Path, model, record: dict) -> None:
    """Write model.pt atomically; `record` holds the hashes (backbone, roles, params) and run facts."""
    meta = {"method": model.name, "recipe": model.recipe.to_dict(), **record}
    # metadata as canonical JSON: pickle's memo would make equal dicts from two processes differ in bytes
    payload = {"format": FORMAT, "meta": json.dumps(meta, sort_keys=True, default=str), "state": model.trainable_state()}
    buffer = io.BytesIO()
    torch.save(payload, buffer)
    write_bytes(path, buffer.getvalue())


def read_trained(path: Path) -> dict:
    if not Path(path).is_file():
        raise DearError(f"{path}: trained model not found; run `dear train` first")
    try:
        payload = load_torch(path)
    except DearError:
        raise
    except Exception as err:  # torch raises many types on a damaged file
        raise DearError(f"{path}: not a readable model.pt ({type(err).__name__}); delete it and rerun `dear train`") from err
    if not isinstance(payload, dict) or payload.get("format") != FORMAT or not isinstance(payload.get("state"), dict):
        raise DearError(f"{path}: not a model.pt written by this version of `dear train` ({FORMAT}); rerun `dear train`")
    broken = [name for name, tensor in payload["state"].items()
              if isinstance(tensor, torch.Tensor) and not torch.isfinite(tensor).all()]
    if broken:
        raise DearError(f"{path}: the learned tensor {broken[0]} holds NaN or inf ({len(broken)} such tensors), so "
                        "every prediction would be garbage; retrain with a lower learning rate (train.recipes.*.lr)")
    return {**json.loads(payload["meta"]), "state": payload["state"]}


def load_trained(model_pt: Path, backbone, roles_path: Path | None = None, params=None, method: str | None = None):
    """Rebuild the model of a `dear train` run on `backbone` (eval mode, CPU).

    `roles_path` is needed by the `dear` method only; when `params` is given,
    its recipe for this run must still be the one the model was trained with;
    when `method` is given (the job's --method), the model must be of that method.
    """
    payload = read_trained(Path(model_pt))
    if method is not None and payload["method"] != method:
        raise DearError(f"{model_pt}: a model of method {payload['method']}, not --method {method}; pass the model.pt "
                        f"of a {method} run, or --method {payload['method']}")
    recipe = Recipe.from_dict(payload["recipe"])
    sha = backbone_sha256(backbone)
    if payload["backbone_sha256"] != sha:
        raise DearError(f"{model_pt}: trained on backbone {payload['backbone_sha256'][:12]}..., not this one "
                        f"({sha[:12]}...); pass the backbone it was trained on or retrain")
    if params is not None:
        current = params.train.recipe(payload["method"], recipe.dataset, recipe.protocol, recipe.shots)
        if payload.get("train_images") is not None:  # the epochs min_steps asked for on its training images
            current = lengthened(current, payload["train_images"])
        changed = sorted(k for k in set(current.values) | set(recipe.values)
                         if current.values.get(k) != recipe.values.get(k))
        if changed:
            raise DearError(f"{model_pt}: trained with other recipe values than the current params "
                            f"({', '.join(changed[:5])}); rerun `dear train`")
    roles = None
    if payload.get("roles_sha256"):
        if roles_path is None:
            raise DearError(f"{model_pt}: method {payload['method']} needs its roles table (--roles)")
        if sha256_file(roles_path) != payload["roles_sha256"]:
            raise DearError(f"{roles_path}: not the roles table this model was trained with; pass that one or retrain")
        roles = read_roles(Path(roles_path), backbone, sha)
    model = create(payload["method"], backbone, recipe, roles)
    model.load_trainable(payload["state"], str(model_pt))
    return model.eval()
