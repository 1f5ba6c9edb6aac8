"""Validation of head roles by mean-ablation: a head that carries a concept costs it more than random heads."""

import torch
import torch.nn.functional as F

from dear.model import ablation


def synthetic(n=400, heads=4, dim=8, seed=0):
    """Head 1 of layer 5 writes the colour class direction; every other head writes noise."""
    g = torch.Generator().manual_seed(seed)
    text = torch.eye(dim)[:4]  # 4 colour classes along the first axes
    labels = torch.randint(0, 4, (n,), generator=g)
    contributions = 0.3 * torch.randn(n, 2, heads, dim, generator=g)  # [N, Lp, H, E], layers 5-6
    contributions[:, 0, 1] += 2.0 * text[labels]
    return contributions, contributions.sum((1, 2)), ablation.Family("color", text, labels)


def test_the_head_carrying_a_concept_costs_it_more_than_random_heads():
    heads, embeddings, colour = synthetic()
    roles = [{"layer": 5 + layer, "head": head, "concept": "color" if (layer, head) == (0, 1) else "object",
              "role": "attribute" if (layer, head) == (0, 1) else "mixed"} for layer in range(2) for head in range(4)]
    objects = ablation.Family("object", F.normalize(torch.randn(3, 8), dim=-1), torch.full((400,), -1))
    rows = ablation.validate(heads, embeddings, 5, [colour, objects], roles, random_sets=30, seed=0)
    labelled = next(r for r in rows if r["concept"] == "color" and r["heads"] == "labelled")
    assert labelled["known"] and labelled["n_heads"] == 1 and labelled["head_list"] == "L5.H1"
    assert labelled["drop"] > 40 and labelled["random_drop_mean"] < labelled["drop"] and labelled["passed"]
    assert labelled["random_at_least"] < 0.3  # only random sets that happen to draw L5.H1 cost as much


def test_a_wrong_label_fails_and_a_concept_without_heads_is_not_judged():
    heads, embeddings, colour = synthetic()
    roles = [{"layer": 5 + layer, "head": head, "concept": "color" if (layer, head) == (1, 3) else "object",
              "role": "mixed"} for layer in range(2) for head in range(4)]
    shape = ablation.Family("shape", torch.eye(8)[4:6], torch.zeros(400, dtype=torch.long))
    rows = ablation.validate(heads, embeddings, 5, [colour, shape], roles, random_sets=30, seed=0)
    wrong = next(r for r in rows if r["concept"] == "color" and r["heads"] == "labelled")
    assert wrong["passed"] is False and wrong["drop"] < wrong["random_drop_mean"]
    empty = next(r for r in rows if r["concept"] == "shape" and r["heads"] == "labelled")
    assert empty["drop"] is None and empty["passed"] is None
    assert any("no head labelled" in line for line in ablation.markdown(rows))
