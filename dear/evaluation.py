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

from dear import device as devices
from dear.data.manifest import check_images_exist, read_rgb, select
from dear.data.manifest import classnames as manifest_classnames
from dear.errors import DearError, from_workers
from dear.model import internals as oc
from dear.params import Compute
from dear.progress import track
from dear.train.data import test_transform


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


def eval_transform(adapted, augmentation):
    """CoOp's test transform at the backbone's own size and normalization."""
    mean, std = oc.image_normalization(adapted.clip)
    return test_transform(augmentation, oc.image_size(adapted.clip), mean, std)


@torch.no_grad()
def encode_images(adapted, images: ImageSet, transform, batch_size: int, compute: Compute,
                  description: str) -> torch.Tensor:
    """Per-stream image features [N, S+1, E] (CPU, float32), streamed in batches on the model's device."""
    device = adapted.device
    loader = torch.utils.data.DataLoader(_Images(images.paths, transform), batch_size=batch_size,
                                         num_workers=compute.workers, pin_memory=device.type == "cuda")
    chunks = []
    for pixels in track(from_workers(loader), description, total=len(loader)):
        with devices.autocast(device, compute.precision):
            chunks.append(adapted.image_features(pixels.to(device, non_blocking=True)).float().cpu())
    return torch.cat(chunks)


@torch.no_grad()
def stream_logits(adapted, features: torch.Tensor, classnames: list[str]) -> torch.Tensor:
    """[N, S+1, E] image features x the class list's text features -> [N, S+1, C]."""
    text = adapted.text_features(list(classnames)).float().cpu()  # [C, E]
    return adapted.logit_scale().float().cpu() * torch.einsum("nke,ce->nkc", features, text)


def fuse(logits: torch.Tensor, alpha: torch.Tensor) -> torch.Tensor:
    """Σ_k α_k s_k: [N, S+1, C] x [S+1] -> [N, C]."""
    return torch.einsum("nkc,k->nc", logits, alpha.to(logits.dtype))


def accuracy(logits: torch.Tensor, labels: list[int]) -> float:
    """Top-1 accuracy in percent of [N, C] logits."""
    return 100.0 * float((logits.argmax(1) == torch.tensor(labels)).float().mean())


def per_class_counts(logits: torch.Tensor, labels: list[int], n_classes: int) -> tuple[list[int], list[int]]:
    """(correct, total) per class of [N, C] logits: counts, never percentages."""
    target = torch.tensor(labels)
    hits = (logits.argmax(1) == target).long()
    correct = torch.zeros(n_classes, dtype=torch.long).index_add_(0, target, hits)
    total = torch.bincount(target, minlength=n_classes)
    return correct.tolist(), total.tolist()
