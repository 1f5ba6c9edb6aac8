"""Scoring a trained model: stream images once, reuse text features per class list.

Shared by `fuse` (validation shots) and `evaluate` (test splits). Images are
encoded once per image set into per-stream features [N, S+1, E]; logits for
any class list are then a matrix product with that list's text features,
which the adapted model computes once and caches.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import torch

from dear.compute import cpus
from dear.compute import device as devices
from dear.compute.transforms import test_transform
from dear.data.manifest import check_images_exist, read_rgb, select
from dear.data.manifest import classnames as manifest_classnames
from dear.errors import DearError, from_workers
from dear.methods.base import in_precision
from dear.model import internals as oc
from dear.config.params import Compute
from dear.runtime.progress import track


@dataclass(frozen=True)
class ImageSet:
    """Images with labels indexing `classnames` (one class list, one split)."""

    paths: list[str]
    labels: list[int]
    classnames: list[str]

    def __len__(self) -> int:
        return len(self.paths)


def image_set(table: pa.Table, manifest: pa.Table, split: str | None, subset: str, source: Path,
              fewshot_split: str | None = None) -> ImageSet:
    """Rows of `table` in one split and subset ("base" | "novel" | "all"), labelled within that subset.

    Class names come from the full `manifest` (a few-shot table may lack some).
    """
    rows = select(table, split=split, subset=subset, fewshot_split=fewshot_split)
    if rows.num_rows == 0:
        raise DearError(f"{source}: no {fewshot_split or split} images of the {subset} classes; rerun `dear prepare`")
    label_column = "label" if subset == "all" else "subset_label"
    names = manifest_classnames(manifest, subset=None if subset == "all" else subset)
    check_images_exist(rows["path"].to_pylist(), source, f"{fewshot_split or split} image")
    return ImageSet(paths=rows["path"].to_pylist(), labels=rows[label_column].to_pylist(), classnames=names)


class _Images(torch.utils.data.Dataset):
    def __init__(self, paths: list[str], transform):
        self.paths, self.transform = paths, transform

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, index: int) -> torch.Tensor:
        return self.transform(read_rgb(self.paths[index]))  # [3, S, S]


def eval_transform(model):
    """Dassl's test transform with the method's resize filter, at the backbone's own size and normalization."""
    mean, std = oc.image_normalization(model.clip)
    return test_transform(model.recipe.get("interpolation", "bicubic"), oc.image_size(model.clip), mean, std)


def prepared(model, compute: Compute):
    """`model` on the stages' device in its recipe's precision, and that precision (fuse and evaluate)."""
    device = devices.resolve(compute)
    devices.fast_matmuls(device)
    precision = devices.Precision(model.recipe.precision, device)
    return in_precision(model.to(device), precision), precision


@dataclass(frozen=True)
class Reuse:
    """Keep the frozen blocks' output for the next model on the same backbone (the next seed of a job)."""

    backbone: str  # the backbone weights' sha256 (its card's)
    megabytes: float  # at most this much kept in all (evaluate.reuse_mb)


# The frozen image blocks' output [B, 1+N, D] per batch, by backbone, image list and everything else it depends
# on. `dear evaluate` runs every seed of a job in one process and each seed's model shares the backbone, so
# only the blocks from the first token layer on run again (for zeroshot and coop, whose towers are frozen, none).
_kept: dict[tuple, list[torch.Tensor]] = {}


@torch.no_grad()
def encode_images(model, images: ImageSet, transform, batch_size: int, workers: int, precision,
                  description: str, reuse: Reuse | None = None) -> torch.Tensor:
    """Per-stream image features [N, S+1, E] (CPU, float32), streamed in batches on the model's device.

    With `reuse`, the frozen blocks' output is kept for (and taken from) other models on the same backbone.
    """
    device = model.device
    key = reuse and (reuse.backbone, model.frozen_depth, tuple(images.paths), repr(transform), batch_size,
                     str(device), precision.describe())
    kept = _kept.get(key) if key else None
    prefixes = track(kept, description, total=len(kept), unit="batches") if kept is not None \
        else _frozen_blocks(model, images, transform, batch_size, workers, precision, description)
    keeping = [] if key and kept is None else None  # this list's frozen output, while it fits reuse.megabytes
    room = reuse.megabytes * 2**20 - sum(_bytes(t) for ts in _kept.values() for t in ts) if reuse else 0.0
    chunks = []
    for prefix in prefixes:  # [B, 1+N, D]
        with precision.autocast(training=False):
            chunks.append(model.encode(prefix.to(device, non_blocking=True)).float().cpu())
        if keeping is not None:
            room -= _bytes(prefix)
            if room < 0:
                keeping = None
            else:
                keeping.append(prefix.cpu())
    if keeping is not None:
        _kept[key] = keeping
    return torch.cat(chunks)


def _bytes(tensor: torch.Tensor) -> int:
    return tensor.numel() * tensor.element_size()


def _frozen_blocks(model, images: ImageSet, transform, batch_size: int, workers: int, precision, description: str):
    """The frozen blocks' output [B, 1+N, D] per batch of images, decoded by `workers` processes."""
    device = model.device
    loader = torch.utils.data.DataLoader(_Images(images.paths, transform), batch_size=batch_size,
                                         num_workers=cpus.processes(workers), pin_memory=device.type == "cuda")
    for pixels in track(from_workers(loader), description, total=len(loader), unit="batches"):
        with precision.autocast(training=False):
            yield model.image_prefix(pixels.to(device, non_blocking=True))


@torch.no_grad()
def stream_logits(model, features: torch.Tensor, classnames: list[str], template: str | None = None,
                  batch_size: int = 4096) -> torch.Tensor:
    """[N, S+1, E] image features (CPU) x the class list's text features -> [N, S+1, C] (CPU, float32).

    `template`: the prompt of the dataset scored (a transfer target's own); None: the model's.
    """
    chunks = [model.logits(features[i:i + batch_size].to(model.device), list(classnames), template).float().cpu()
              for i in range(0, len(features), batch_size)]
    return torch.cat(chunks)


def fuse(logits: torch.Tensor, alpha: torch.Tensor) -> torch.Tensor:
    """Σ_k α_k s_k: [N, S+1, C] x [S+1] -> [N, C]."""
    return torch.einsum("nkc,k->nc", logits, alpha.to(logits.dtype))


def accuracy(logits: torch.Tensor, labels: list[int]) -> float:
    """Top-1 accuracy in percent of [N, C] logits."""
    return 100.0 * float((logits.argmax(1) == torch.tensor(labels)).float().mean())


def per_class_hits(logits: torch.Tensor, labels: list[int], n_classes: int) -> list[list[bool]]:
    """Per class, whether each of its images (in list order) is predicted right by [N, C] logits."""
    right = (logits.argmax(1) == torch.tensor(labels)).tolist()
    hits: list[list[bool]] = [[] for _ in range(n_classes)]
    for label, hit in zip(labels, right):
        hits[label].append(hit)
    return hits
