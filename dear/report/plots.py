"""The report's pictures: base/novel/HM bars, accuracy against shots and training-loss curves, as PNG bytes.

Drawn with matplotlib's object API on the Agg canvas (no pyplot state, no
display). Each method keeps one colour in every picture. PNGs carry no
software/version text, so the same numbers give the same bytes.
"""

from __future__ import annotations

import io

import numpy as np
import pandas as pd
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch
from matplotlib.ticker import MaxNLocator

from dear.report.tables import AVERAGE, B2N_METRICS, method_order
from dear.results import shots_of

PNG_METADATA = {"Software": None}
LINESTYLES = ("-", "--", ":", "-.")


def method_colors(methods: list[str]) -> dict[str, tuple]:
    """One fixed colour per method, by its position in the method order: tab10's ten (tab20's dark ones, the same
    values), then tab20's light ones for methods 11 to 20 (the few-shot figure's twelve), then around again."""
    from matplotlib import colormaps

    palette = colormaps["tab20"]
    return {method: palette(2 * (index % 10) + (index // 10) % 2) for index, method in enumerate(methods)}


def base_novel_png(results: pd.DataFrame, listed_methods: list[str], dpi: int) -> bytes:
    """One panel per dataset (and the Average): Base, Novel, HM bars per method, ± std over seeds."""
    rows = results[results["protocol"] == "base_to_novel"]
    datasets = list(dict.fromkeys(rows.loc[rows["row"] == "dataset", "dataset"]))
    if not datasets:
        return _message_png("Base-to-novel: no results in the eval tables", dpi)
    panels = datasets + [AVERAGE]
    methods = method_order(listed_methods, rows["method"])
    colors = method_colors(methods)
    columns = min(len(panels), 3)
    lines = -(-len(panels) // columns)
    figure = Figure(figsize=(4.2 * columns, 3.4 * lines + 0.9), layout="constrained")
    axes = figure.subplots(lines, columns, squeeze=False).ravel()
    for ax, panel in zip(axes, panels):
        _bars(ax, rows[rows["dataset"] == panel], methods, colors)
        ax.set_title(panel if panel != AVERAGE else f"{AVERAGE} of {len(datasets)} datasets (HM of averages)",
                     fontsize=10)
    for ax in axes[len(panels):]:
        ax.set_visible(False)
    handles = [Line2D([], [], color=colors[m], linewidth=8) for m in methods]
    figure.legend(handles, methods, loc="outside lower center", ncols=len(methods), frameon=False)
    figure.suptitle("Base-to-novel accuracy (mean ± std over seeds; n/a = missing)", fontsize=11)
    return _png(figure, dpi)


def _bars(ax, rows: pd.DataFrame, methods: list[str], colors: dict) -> None:
    width = 0.8 / len(methods)
    x = np.arange(len(B2N_METRICS))
    for index, method in enumerate(methods):
        mine = rows[rows["method"] == method].set_index("metric").reindex(B2N_METRICS)
        offset = x - 0.4 + width * (index + 0.5)
        means, stds = mine["mean"].to_numpy(float), mine["std"].to_numpy(float)
        present = ~np.isnan(means)
        ax.bar(offset[present], means[present], width, yerr=np.nan_to_num(stds[present]),
               color=colors[method], capsize=2, error_kw={"linewidth": 0.8})
        for position in offset[~present]:
            ax.text(position, 2, "n/a", rotation=90, ha="center", va="bottom", fontsize=7, color="0.4")
    ax.set_xticks(x, [m.upper() if m == "hm" else m.capitalize() for m in B2N_METRICS])
    ax.set_ylim(0, 100)
    ax.set_ylabel("accuracy (%)")
    ax.grid(axis="y", alpha=0.3)


def few_shot_png(results: pd.DataFrame, listed_methods: list[str], dpi: int) -> bytes:
    """Accuracy against shots, the papers' figure: the Average panel first, then one per dataset.

    One line per method (its colour in every picture), the seeds' interval as a band around it, a log-scale
    x axis with a tick at each shot count; a point without a number (missing) is left out, not drawn at 0.
    """
    rows = results[results["protocol"].map(shots_of).notna()].assign(shots=lambda f: f["protocol"].map(shots_of))
    if rows.empty:
        return _message_png("Few-shot learning: no results in the eval tables", dpi)
    datasets = sorted(rows.loc[rows["row"] == "dataset", "dataset"].unique())
    panels = [AVERAGE] + datasets
    methods = method_order(listed_methods, rows["method"])
    colors = method_colors(methods)
    shots = sorted(rows["shots"].unique())
    columns = min(len(panels), 3)
    lines = -(-len(panels) // columns)
    figure = Figure(figsize=(4.2 * columns, 3.4 * lines + 0.9), layout="constrained")
    axes = figure.subplots(lines, columns, squeeze=False).ravel()
    drawn = []
    for ax, panel in zip(axes, panels):
        for method in methods:
            mine = rows[(rows["dataset"] == panel) & (rows["method"] == method)].sort_values("shots")
            mine = mine[mine["mean"].notna()]
            if mine.empty:
                continue
            x = mine["shots"].to_numpy(float)
            ax.plot(x, mine["mean"], color=colors[method], marker="o", markersize=3.5, linewidth=1.4)
            band = mine["ci_low"].notna().to_numpy()
            if band.any():
                ax.fill_between(x[band], mine["ci_low"][band], mine["ci_high"][band], color=colors[method],
                                alpha=0.18, linewidth=0)
            drawn.append(method)
        ax.set_xscale("log", base=2)
        ax.set_xticks(shots, [str(k) for k in shots])
        ax.minorticks_off()
        ax.set_xlabel("shots per class")
        ax.set_ylabel("accuracy (%)")
        ax.grid(alpha=0.3)
        ax.set_title(f"{AVERAGE} over {len(datasets)} datasets" if panel == AVERAGE else panel, fontsize=10)
    for ax in axes[len(panels):]:
        ax.set_visible(False)
    shown = [m for m in methods if m in drawn]
    handles = [Line2D([], [], color=colors[m], marker="o", markersize=3.5, linewidth=1.4) for m in shown]
    figure.legend(handles, shown, loc="outside lower center", ncols=max(1, min(len(shown), 6)), frameon=False)
    figure.suptitle("Few-shot learning: accuracy against shots per class (mean over seeds, band: its interval)",
                    fontsize=11)
    return _png(figure, dpi)


def loss_png(logs: pd.DataFrame, listed_methods: list[str], smoothing: int, dpi: int) -> bytes:
    """One panel per training dataset: total loss per step, a colour per method, a line style per seed.

    The steps where the tokens were still fading in (`fade` < 1) are shaded: there the
    token methods' loss may rise, as their streams leave the CLS feature they start from.
    """
    if logs.empty:
        return _message_png("Training loss: no train logs given (zero-shot runs do not train)", dpi)
    datasets = sorted(logs["dataset"].unique())
    methods = method_order(listed_methods, logs["method"])
    methods = [m for m in methods if m in set(logs["method"])]
    colors = method_colors(method_order(listed_methods, logs["method"]))
    seeds = sorted(logs["seed"].unique())
    styles = {seed: LINESTYLES[index % len(LINESTYLES)] for index, seed in enumerate(seeds)}
    columns = min(len(datasets), 3)
    lines = -(-len(datasets) // columns)
    figure = Figure(figsize=(4.6 * columns, 3.4 * lines + 0.9), layout="constrained")
    axes = figure.subplots(lines, columns, squeeze=False).ravel()
    window = max(1, min(smoothing, int(logs.groupby(["method", "dataset", "seed"]).size().max()) // 2))
    for ax, dataset in zip(axes, datasets):
        for (method, seed), run in logs[logs["dataset"] == dataset].groupby(["method", "seed"], sort=True):
            smooth = run["loss"].rolling(window, min_periods=1).mean()
            ax.plot(run["step"], smooth, color=colors[method], linestyle=styles[seed], linewidth=1.2)
        fading = logs[(logs["dataset"] == dataset) & (logs["fade"] < 1)] if "fade" in logs else logs.iloc[:0]
        if len(fading):
            ax.axvspan(-0.5, fading["step"].max() + 0.5, color="0.9", zorder=0)
        ax.set_title(f"trained on {dataset}", fontsize=10)
        ax.set_xlabel("step")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_ylabel("training objective")
        ax.grid(alpha=0.3)
    for ax in axes[len(datasets):]:
        ax.set_visible(False)
    handles = [Line2D([], [], color=colors[m], linewidth=2) for m in methods]
    handles += [Line2D([], [], color="0.3", linestyle=styles[s]) for s in seeds]
    labels = methods + [f"seed {s}" for s in seeds]
    if "fade" in logs and (logs["fade"] < 1).any():
        handles.append(Patch(color="0.9"))
        labels.append("tokens fading in")
    figure.legend(handles, labels, loc="outside lower center", ncols=len(labels), frameon=False)
    shown = "raw values" if window == 1 else f"moving average over {window} steps"
    figure.suptitle(f"Training loss: each method's own objective ({shown})", fontsize=11)
    return _png(figure, dpi)


def _message_png(text: str, dpi: int) -> bytes:
    figure = Figure(figsize=(6, 1.5))
    figure.text(0.5, 0.5, text, ha="center", va="center")
    return _png(figure, dpi)


def _png(figure: Figure, dpi: int) -> bytes:
    FigureCanvasAgg(figure)
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=dpi, metadata=PNG_METADATA)
    return buffer.getvalue()
