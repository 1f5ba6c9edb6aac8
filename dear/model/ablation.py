"""Do the head roles mean something? Mean-ablation on images whose attributes are known.

Every image of the embedded world carries its true object, colour, shape,
texture and position. For each core concept the backbone knows (zero-shot at
least twice chance), the heads labelled with that concept by `dear profile`
have their direct contributions replaced by their mean over the images
(`dear.model.decompose.mean_ablate`), and the zero-shot accuracy lost on that
concept is compared with the loss from random head sets of the same size. A
role table that means something costs its own concept more than chance sets
do. Nothing here is tuned: the roles are read as `dear profile` wrote them.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import torch
import torch.nn.functional as F

from dear.model.decompose import decompose, mean_ablate
from dear.model.zeroshot import class_text_features

ABLATION_SCHEMA = pa.schema([
    pa.field("concept", pa.string(), nullable=False),
    pa.field("heads", pa.string(), nullable=False),  # which heads: labelled (dominant concept) | attribute (role)
    pa.field("n_heads", pa.int32(), nullable=False),
    pa.field("profiled_heads", pa.int32(), nullable=False),  # heads the random sets are drawn from
    pa.field("head_list", pa.string(), nullable=False),  # "L5.H2 L6.H0"
    pa.field("chance", pa.float64(), nullable=False),  # percent
    pa.field("zero_shot", pa.float64(), nullable=False),  # percent, nothing ablated
    pa.field("known", pa.bool_(), nullable=False),  # zero_shot >= 2 x chance
    pa.field("drop", pa.float64()),  # points lost with these heads ablated (null: no such head)
    pa.field("random_drop_mean", pa.float64()),  # mean points lost over random sets of the same size
    pa.field("random_drop_std", pa.float64()),
    pa.field("random_at_least", pa.float64()),  # share of random sets losing at least `drop`
    pa.field("passed", pa.bool_()),  # drop > random_drop_mean (null: not known, no such head, or every head)
])


@dataclass(frozen=True)
class Family:
    """One concept's zero-shot task: its classes' text features and each image's label (-1: not defined)."""

    concept: str
    text: torch.Tensor  # [C, E] normalized class features (the world's prompt for the concept)
    labels: torch.Tensor  # [N]


def family(model, tokenizer, concept: str, classnames: list[str], template: str, labels: torch.Tensor) -> Family:
    return Family(concept, class_text_features(model, tokenizer, classnames, [template]).cpu(), labels)


@dataclass(frozen=True)
class HeadSet:
    concept: str
    kind: str  # labelled | attribute
    heads: list[tuple[int, int]]  # (layer 1-based, head)


@torch.no_grad()
def decomposed(model, batches, layers: int) -> tuple[torch.Tensor, torch.Tensor, int]:
    """Per-head contributions [N, Lp, H, E], embeddings [N, E] and the first profiled layer (1-based)."""
    heads, embeddings, first = [], [], 1
    for images in batches:
        parts = decompose(model, images, layers)
        heads.append(parts.heads.float().cpu())  # the sets are compared on the CPU, whatever ran the model
        embeddings.append(parts.embedding.float().cpu())
        first = parts.first_layer
    return torch.cat(heads), torch.cat(embeddings), first


def head_sets(roles: list[dict], concepts: list[str]) -> list[HeadSet]:
    """For each concept: the heads whose dominant concept it is, and those of them with the attribute role."""
    sets = []
    for concept in concepts:
        labelled = [(int(r["layer"]), int(r["head"])) for r in roles if r["concept"] == concept]
        attribute = [(int(r["layer"]), int(r["head"])) for r in roles if r["concept"] == concept and r["role"] == "attribute"]
        sets += [HeadSet(concept, "labelled", labelled), HeadSet(concept, "attribute", attribute)]
    return sets


@torch.no_grad()
def validate(heads: torch.Tensor, embeddings: torch.Tensor, first_layer: int, families: list[Family],
             roles: list[dict], random_sets: int, seed: int) -> list[dict]:
    """One row per (concept, head set): accuracy lost when those heads are mean-ablated, vs random sets.

    heads [N, Lp, H, E] and embeddings [N, E] from `decomposed`; roles: rows of roles.parquet.
    """
    means = heads.mean(0)  # [Lp, H, E]
    every_head = [(layer, head) for layer in range(heads.shape[1]) for head in range(heads.shape[2])]
    by_concept = {f.concept: f for f in families}
    rng = np.random.default_rng(seed)
    rows = []
    for head_set in head_sets(roles, [f.concept for f in families]):
        task = by_concept[head_set.concept]

        def accuracy(ablated):
            return _accuracy(mean_ablate(embeddings, heads, means, ablated), task.text, task.labels)

        base = accuracy([])
        chance = 100.0 / len(task.text)
        row = {"concept": task.concept, "heads": head_set.kind, "n_heads": len(head_set.heads),
               "profiled_heads": len(every_head),
               "head_list": " ".join(f"L{layer}.H{head}" for layer, head in head_set.heads),
               "chance": chance, "zero_shot": base, "known": base >= 2 * chance, "drop": None,
               "random_drop_mean": None, "random_drop_std": None, "random_at_least": None, "passed": None}
        if head_set.heads:
            chosen = [(layer - first_layer, head) for layer, head in head_set.heads]
            whole = len(chosen) == len(every_head)  # random sets of this size are this very set: nothing to compare
            drop = base - accuracy(chosen)
            random_drops = np.array([base - accuracy([every_head[i] for i in rng.choice(len(every_head), len(chosen),
                                                                                       replace=False)])
                                     for _ in range(random_sets)])
            row.update(drop=drop, random_drop_mean=float(random_drops.mean()), random_drop_std=float(random_drops.std()),
                       random_at_least=float((random_drops >= drop).mean()),
                       passed=bool(drop > random_drops.mean()) if row["known"] and not whole else None)
        rows.append(row)
    return rows


def _accuracy(embeddings: torch.Tensor, text: torch.Tensor, labels: torch.Tensor) -> float:
    """Zero-shot top-1 (percent) over the images whose label is defined."""
    keep = labels >= 0
    predicted = (F.normalize(embeddings, dim=-1) @ text.T).argmax(-1)  # [N]
    return 100.0 * float((predicted[keep] == labels[keep]).float().mean())


def markdown(rows: list[dict]) -> list[str]:
    """The ablation table for roles.md and the report."""
    lines = ["| concept | heads | n | zero-shot (chance) | drop | random sets: mean ± std | random >= drop | "
             "costs its concept more than random |", "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for row in rows:
        known = "" if row["known"] else " (not known)"
        if row["drop"] is None:
            lines.append(f"| {row['concept']} | {row['heads']} | 0 | {row['zero_shot']:.1f}% ({row['chance']:.1f}%){known} "
                         "| - | - | - | no head labelled |")
            continue
        if row["passed"] is not None:
            verdict = "yes" if row["passed"] else "no"
        elif row["n_heads"] == row["profiled_heads"]:
            verdict = "not judged (every profiled head)"
        else:
            verdict = "not judged (concept not known)"
        lines.append(f"| {row['concept']} | {row['heads']} ({row['head_list']}) | {row['n_heads']} | "
                     f"{row['zero_shot']:.1f}% ({row['chance']:.1f}%){known} | {row['drop']:+.1f} | "
                     f"{row['random_drop_mean']:+.1f} ± {row['random_drop_std']:.1f} | {row['random_at_least']:.0%} | "
                     f"{verdict} |")
    return lines
