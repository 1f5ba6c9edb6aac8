"""TAC's loss terms against PromptSRC's on the demo, from the train logs of two runs (docs/results.md, issue 45).

    python benchmarks/tac_terms.py demo-2026 [--promptsrc demo-2026] [--out docs/demo-2026/tac_terms.png]

Prints, per base-to-novel dataset, the mean of each weighted term over the first and the last ten steps of every
seed (CE; TAC: its text and image L1 times the run's recipe weights; PromptSRC: its regularizers' sum), and draws them
against the step. Why TAC trains below zero-shot on the embedded world is read there: its image L1 compares two
features each dropped out at p 0.3 (its authors' VisionTransformer), a floor the prompts cannot lower.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402

from dear.runtime.io import read_provenance  # noqa: E402

DATASETS = ("world_objects", "world_objects_sketch")


def terms(root: Path, method: str, dataset: str) -> pd.DataFrame:
    """[seeds x steps] rows of the train logs: step, ce, and the recipe-weighted regularizers."""
    logs = sorted((root / "runs" / method / dataset / "train").glob("seed*/train_log.parquet"))
    if not logs:
        raise SystemExit(f"error: {root}/runs/{method}/{dataset}/train: no train logs; run its study first")
    frame = pd.concat([pd.read_parquet(path) for path in logs])
    weighted = pd.DataFrame({"step": frame["step"], "CE": frame["loss_ce"], "loss": frame["loss"]})
    if method == "tac":  # their TAC.forward_backward: CE + w_text L1(text) + w_image L1(image), the run's recipe's
        recipe = read_provenance(logs[0])["params"]["recipe"]
        weighted[f"{recipe['text_loss_weight']:g} x text L1"] = recipe["text_loss_weight"] * frame["loss_txt"]
        weighted[f"{recipe['image_loss_weight']:g} x image L1"] = recipe["image_loss_weight"] * frame["loss_img"]
    else:
        weighted["regularizers"] = frame["loss"] - frame["loss_ce"]
    return weighted


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("tac_root", type=Path, help="a study's output root holding runs/tac (e.g. demo-2026)")
    parser.add_argument("--promptsrc", type=Path, help="the root holding runs/promptsrc (default: tac_root)")
    parser.add_argument("--out", type=Path, default=Path("docs/demo-2026/tac_terms.png"))
    args = parser.parse_args()
    figure, axes = plt.subplots(1, len(DATASETS), figsize=(11, 4), sharex=True)
    for ax, dataset in zip(axes, DATASETS):
        for method, root, style in (("tac", args.tac_root, "-"), ("promptsrc", args.promptsrc or args.tac_root, ":")):
            frame = terms(root, method, dataset)
            last = frame["step"].max() - 9
            for column in [c for c in frame.columns if c != "step"]:
                first_ten, last_ten = frame[frame["step"] < 10][column].mean(), frame[frame["step"] >= last][column].mean()
                print(f"{dataset:22s} {method:10s} {column:14s} first 10 steps {first_ten:.3f}  last 10 {last_ten:.3f}")
                if column != "loss":
                    curve = frame.groupby("step")[column].mean()
                    ax.plot(curve.index, curve.values, style, label=f"{method}: {column}")
        ax.set_title(dataset)
        ax.set_xlabel("step (mean over seeds)")
    axes[0].set_ylabel("loss term")
    axes[-1].legend(fontsize=8)
    figure.suptitle("TAC's loss terms against PromptSRC's on the embedded world (the demo's recipes)")
    figure.tight_layout()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(args.out, dpi=110)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
