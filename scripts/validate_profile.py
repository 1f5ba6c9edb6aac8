"""Does a head labelled `color` really carry colour? Mean-ablation on the embedded world.

Every world image carries its true object, colour, shape, texture and
position (`world/<ds>/attributes.parquet`), so each head's role can be
checked against what the model loses without it. For the images of one
split, the embedding is decomposed (`dear.model.decompose`); ablating a
set of heads replaces their direct contributions by their mean over these
images (`e' = e - c_h + mean(c_h)`), and zero-shot accuracy is measured on
each attribute family with the world's own prompts.

Reported (Markdown on stdout, JSON with --json):
- accuracy drop per family when one head is ablated, for every head, with
  its role and concept from roles.parquet;
- per group (attribute heads of each concept, all generalization heads,
  all mixed heads, and seeded random head sets of the same sizes): the drop
  per family when the whole group is ablated;
- with --components, where each family reaches the embedding at all: every
  layer's heads together and its MLP, each mean-ablated, and each as the only
  term that varies (all others at their mean), over the whole image tower.
Nothing here is tuned: read the roles as they came out of `dear profile`.

    python scripts/validate_profile.py --backbone backbone --world world --roles roles/world_objects/roles.parquet
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import torch
import torch.nn.functional as F
from PIL import Image

FAMILIES = {"object": "world_objects", "color": "world_colors", "shape": "world_shapes",
            "texture": "world_textures", "position": "world_positions"}


def load_images(world: Path, dataset: str, split: str, preprocess, limit: int):
    table = pq.read_table(world / dataset / "attributes.parquet").to_pandas()
    table = table[table["split"] == split].sort_values("impath").reset_index(drop=True)
    if len(table) > limit:
        table = table.iloc[np.sort(np.random.default_rng(0).choice(len(table), limit, replace=False))]
    pixels = torch.stack([preprocess(Image.open(world / dataset / "images" / p).convert("RGB"))
                          for p in table["impath"]])
    return table.reset_index(drop=True), pixels


@torch.no_grad()
def decompose_all(model, pixels, layers, batch) -> dict[str, torch.Tensor]:
    """Every direct term of the last `layers` layers, over all images (`dear.model.decompose`, batch by batch).

    A term's mean-ablation (`e - c + mean(c)`) does not depend on how many layers
    were decomposed: the per-term constant (μ/T, β/T) cancels.
    """
    from dear.model.decompose import decompose

    parts = [decompose(model, pixels[start:start + batch], layers) for start in range(0, len(pixels), batch)]
    names = ("residual", "heads", "mlp", "embedding")  # [M, E], [M, Lp, H, E], [M, Lp, E], [M, E]
    return {name: torch.cat([getattr(part, name) for part in parts]) for name in names}


@torch.no_grad()
def classifiers(model, tokenizer, card, table):
    from dear.model.zeroshot import class_text_features

    result = {}
    for family, dataset in FAMILIES.items():
        spec = card["datasets"].get(dataset)
        if spec is None:
            continue
        names = list(spec["classnames"])
        labels = table[family].map({n: i for i, n in enumerate(names)})
        keep = labels.notna().to_numpy()
        text = class_text_features(model, tokenizer, names, spec["templates"])
        result[family] = (text, torch.tensor(labels.fillna(-1).to_numpy(), dtype=torch.long), torch.tensor(keep))
    return result


def accuracies(embeddings, heads_, ablated, means, tasks):
    """Zero-shot accuracy per family with the heads in `ablated` (list of (i, h)) mean-ablated."""
    from dear.model.decompose import mean_ablate

    return zero_shot(mean_ablate(embeddings, heads_, means, ablated), tasks)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backbone", type=Path, default=Path("backbone"))
    parser.add_argument("--world", type=Path, default=Path("world"))
    parser.add_argument("--roles", type=Path, required=True)
    parser.add_argument("--dataset", default="world_objects", help="images (all five attributes are known)")
    parser.add_argument("--split", default="test")
    parser.add_argument("--max-images", type=int, default=2500)
    parser.add_argument("--random-sets", type=int, default=20, help="random head sets per group size")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--components", action="store_true", help="also: each layer's heads and MLP, whole tower")
    args = parser.parse_args()
    from dear.model.clip import load_backbone

    torch.set_grad_enabled(False)
    backbone = load_backbone(args.backbone)
    roles = pq.read_table(args.roles).to_pandas()
    layers = int(roles["layer"].nunique())
    first = int(roles["layer"].min())
    card = json.loads((args.world / "card.json").read_text())
    table, pixels = load_images(args.world, args.dataset, args.split, backbone.preprocess, args.max_images)
    from dear.model import internals

    depth = internals.vision_tower(backbone.model).layers
    terms = decompose_all(backbone.model, pixels, depth if args.components else layers, 256)  # one pass
    heads_, embeddings = terms["heads"][:, -layers:], terms["embedding"]  # the profiled layers' heads
    means = heads_.mean(0)  # [Lp, H, E]
    tasks = classifiers(backbone.model, backbone.tokenizer, card, table)
    base = accuracies(embeddings, heads_, [], means, tasks)
    families = list(tasks)

    per_head = []
    for row in roles.itertuples():
        acc = accuracies(embeddings, heads_, [(row.layer - first, row.head)], means, tasks)
        per_head.append({"layer": row.layer, "head": row.head, "role": row.role, "concept": row.concept,
                         "entropy_bits": row.entropy_bits, **{f: base[f] - acc[f] for f in families}})

    groups = {f"attribute:{c}": g for c, g in roles[roles.role == "attribute"].groupby("concept")}
    groups["generalization"] = roles[roles.role == "generalization"]
    groups["mixed"] = roles[roles.role == "mixed"]
    all_heads = [(r.layer - first, r.head) for r in roles.itertuples()]
    rng = np.random.default_rng(0)
    group_rows = []
    for name, group in groups.items():
        members = [(r.layer - first, r.head) for r in group.itertuples()]
        if not members:
            continue
        acc = accuracies(embeddings, heads_, members, means, tasks)
        random_drops = {f: [] for f in families}
        for _ in range(args.random_sets):
            pick = [all_heads[i] for i in rng.choice(len(all_heads), len(members), replace=False)]
            r_acc = accuracies(embeddings, heads_, pick, means, tasks)
            for f in families:
                random_drops[f].append(base[f] - r_acc[f])
        group_rows.append({"group": name, "heads": len(members),
                           **{f: base[f] - acc[f] for f in families},
                           **{f"random_{f}": float(np.mean(random_drops[f])) for f in families}})

    report = {"n_images": len(table), "dataset": args.dataset, "split": args.split, "base_accuracy": base,
              "per_head": per_head, "groups": group_rows}
    if args.components:
        report["components"] = components(terms, tasks)
    if args.json:
        args.json.write_text(json.dumps(report, indent=2) + "\n")
    sys.stdout.write(markdown(report, families))


def components(terms: dict[str, torch.Tensor], tasks) -> list[dict]:
    """Per layer: its heads (summed) and its MLP, mean-ablated and alone; the embedding term entering layer 1.

    terms: `decompose_all` over the whole tower.
    """
    embedding, heads, mlp = terms["embedding"], terms["heads"], terms["mlp"]  # [M, E], [M, L, H, E], [M, L, E]
    parts = {"embeddings (entering layer 1)": terms["residual"]}
    for layer in range(heads.shape[1]):
        parts[f"L{layer + 1} heads"] = heads[:, layer].sum(1)
        parts[f"L{layer + 1} MLP"] = mlp[:, layer]
    mean = embedding.mean(0, keepdim=True)
    rows = []
    for name, values in parts.items():
        centred = values - values.mean(0, keepdim=True)  # [M, E]
        rows.append({"term": name, "ablated": zero_shot(embedding - centred, tasks),
                     "alone": zero_shot(mean + centred, tasks)})
    return rows


def zero_shot(embeddings, tasks) -> dict:
    """Top-1 (0..1) per family of unnormalized embeddings [M, E] against each family's class texts."""
    e = F.normalize(embeddings, dim=-1)
    return {family: float(((e @ text.T).argmax(-1)[keep] == labels[keep]).float().mean())
            for family, (text, labels, keep) in tasks.items()}


def markdown(report: dict, families: list[str]) -> str:
    pct = lambda v: f"{100 * v:+.1f}"  # noqa: E731
    lines = [f"Zero-shot accuracy on {report['dataset']} {report['split']} ({report['n_images']} images): "
             + ", ".join(f"{f} {100 * a:.1f}%" for f, a in report["base_accuracy"].items()), "",
             "Drop (points) when a group of heads is mean-ablated (random: mean over random sets of the same size):",
             "", "| group | heads | " + " | ".join(families) + " | " + " | ".join(f"random {f}" for f in families) + " |",
             "|" + " --- |" * (2 + 2 * len(families))]
    for g in report["groups"]:
        lines.append(f"| {g['group']} | {g['heads']} | " + " | ".join(pct(g[f]) for f in families) + " | "
                     + " | ".join(pct(g[f"random_{f}"]) for f in families) + " |")
    lines += ["", "Drop (points) per head:", "", "| head | role | concept | H (bits) | " + " | ".join(families) + " |",
              "|" + " --- |" * (4 + len(families))]
    for h in report["per_head"]:
        lines.append(f"| L{h['layer']}.H{h['head']} | {h['role']} | {h['concept']} | {h['entropy_bits']:.2f} | "
                     + " | ".join(pct(h[f]) for f in families) + " |")
    if "components" in report:
        base = report["base_accuracy"]
        lines += ["", "Each term of the embedding over the whole tower: drop (points) when it is mean-ablated, and "
                  "accuracy (%) when it alone varies (every other term at its mean):", "",
                  "| term | " + " | ".join(f"drop {f}" for f in families) + " | "
                  + " | ".join(f"alone {f}" for f in families) + " |", "|" + " --- |" * (1 + 2 * len(families))]
        for row in report["components"]:
            lines.append(f"| {row['term']} | " + " | ".join(pct(base[f] - row["ablated"][f]) for f in families)
                         + " | " + " | ".join(f"{100 * row['alone'][f]:.1f}" for f in families) + " |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
