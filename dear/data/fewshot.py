"""Few-shot subsets exactly as CoOp/Dassl draw them, and the base/novel halves.

Dassl (`DatasetBase.generate_fewshot_dataset`, `repeat=False`) after
`random.seed(seed)`: group the items by label in order of first appearance;
for each label take `random.sample(items, shots)`, or all items when the label
has fewer (drawing nothing). CoOp calls it on the train split with `shots`,
then on the val split with `min(shots, 4)`, on the same random stream.
`random.sample` depends only on the population's length, so sampling row
positions picks the same images as sampling Dassl's `Datum` objects.

Datasets with no val split of their own (ImageNet; CoOp validates on its test
set) draw validation shots, on the same stream right after the training
shots, from each label's train rows that were not picked for training.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class FewShot:
    """Picked rows (indices into the table sampled from), in Dassl's order."""

    train: np.ndarray  # [n_train_shots] int64
    val: np.ndarray    # [n_val_shots] int64


def groups_by_first_appearance(labels: np.ndarray) -> list[np.ndarray]:
    """Row indices of each label, labels in order of first appearance, rows in order (Dassl's tracker)."""
    labels = np.asarray(labels)
    if labels.size == 0:
        return []
    unique, first_row, counts = np.unique(labels, return_index=True, return_counts=True)
    by_label = np.argsort(labels, kind="stable")            # [N] rows grouped by label, in order
    groups = np.split(by_label, np.cumsum(counts)[:-1])     # one per unique label, ascending labels
    return [groups[i] for i in np.argsort(first_row, kind="stable")]


def dassl_sample(labels: np.ndarray, shots: int, rng: random.Random) -> np.ndarray:
    """Dassl's few-shot draw over one list; returns picked row indices in Dassl's output order."""
    picked: list[int] = []
    for rows in groups_by_first_appearance(labels):
        items = rows.tolist()
        picked.extend(rng.sample(items, shots) if len(items) >= shots else items)
    return np.asarray(picked, dtype=np.int64)


def sample_fewshot(labels: np.ndarray, splits: np.ndarray, shots: int, val_shots: int, seed: int,
                   val_from_train: bool, train_code: int = 0, val_code: int = 1) -> FewShot:
    """Training and validation shots for one seed, as rows of the table (`labels`, `splits`: [N]).

    `val_shots` is CoOp's `min(shots, 4)` when the caller passes `min(shots, data.val_shots)`.
    """
    rng = random.Random(seed)                               # == random.seed(seed) on Dassl's global stream
    train_rows = np.flatnonzero(splits == train_code)        # [N_train] the train list, in order
    train = train_rows[dassl_sample(labels[train_rows], shots, rng)]
    if val_shots < 1:
        return FewShot(train=train, val=np.zeros(0, dtype=np.int64))
    if val_from_train:
        left = np.setdiff1d(train_rows, train, assume_unique=True)  # sorted == original order
        val = left[dassl_sample(labels[left], val_shots, rng)]
    else:
        val_rows = np.flatnonzero(splits == val_code)
        val = val_rows[dassl_sample(labels[val_rows], val_shots, rng)]
    return FewShot(train=train, val=val)


def base_novel(n_classes: int, base: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Per label: is it novel (bool [n]) and its label within its half (int32 [n]).

    CoOp's `subsample_classes`: labels sorted, the first ceil(n/2) are base,
    each half relabelled from 0 in label order. `base` ([n] bool) gives the
    base classes instead (a dataset of one's own: `base_classes`).
    """
    if base is None:
        base = np.arange(n_classes) < math.ceil(n_classes / 2)
    is_novel = ~np.asarray(base, dtype=bool)
    subset_label = np.zeros(n_classes, dtype=np.int32)
    subset_label[~is_novel] = np.arange(int((~is_novel).sum()))
    subset_label[is_novel] = np.arange(int(is_novel.sum()))
    return is_novel, subset_label
