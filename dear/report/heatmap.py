"""The head-role heatmap: layers x heads, colour = Concept Entropy, letter = role."""

from __future__ import annotations

import io
from typing import Sequence

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

ROLE_LETTERS = {"attribute": "A", "generalization": "G", "mixed": "M"}


def role_heatmap(layers: Sequence[int], heads: int, entropy: np.ndarray, roles: Sequence[Sequence[str]],
                 concepts: Sequence[Sequence[str]], title: str) -> bytes:
    """PNG bytes of the heatmap.

    entropy: [Lp, H] bits; roles/concepts: [Lp][H]. Attribute cells also show
    their concept's first three letters, so the picture reads on its own.
    """
    fig_w = max(4.0, 0.75 * heads + 2.0)
    fig_h = max(2.5, 0.7 * len(layers) + 1.5)
    fig, ax = plt.subplots(figsize=(fig_w, fig_h), dpi=120)
    image = ax.imshow(entropy, cmap="viridis", aspect="auto", vmin=0.0, vmax=max(float(np.max(entropy)), 1e-6))
    span = max(float(np.max(entropy)), 1e-6)
    for i in range(len(layers)):
        for h in range(heads):
            label = ROLE_LETTERS[roles[i][h]]
            if roles[i][h] == "attribute":
                label += "\n" + concepts[i][h][:3]
            light = entropy[i, h] < 0.6 * span  # dark cells get white text
            ax.text(h, i, label, ha="center", va="center", fontsize=8, color="white" if light else "black")
    ax.set_xticks(range(heads), [str(h) for h in range(heads)])
    ax.set_yticks(range(len(layers)), [f"L{layer}" for layer in layers])
    ax.set_xlabel("head (0-based)")
    ax.set_ylabel("layer (1-based)")
    ax.set_title(title, fontsize=9)
    fig.colorbar(image, ax=ax, label="Concept Entropy (bits)")
    shown = sorted({concepts[i][h] for i in range(len(layers)) for h in range(heads) if roles[i][h] == "attribute"})
    legend = "A attribute  G generalization  M mixed"
    if shown:
        legend += "   " + "  ".join(f"{concept[:3]} = {concept}" for concept in shown)
    fig.text(0.01, 0.01, legend, fontsize=7)
    fig.tight_layout(rect=(0, 0.04, 1, 1))
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", metadata={"Software": None})
    plt.close(fig)
    return buffer.getvalue()
