"""The report's pictures: base/novel/HM bars, accuracy against shots, training-loss curves and what DeAR's head
roles change in each `+roles` variant, as PNG bytes.

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
from dear.scoring.results import shots_of

PNG_METADATA = {"Software": None}
LINESTYLES = ("-", "--", ":", "-.")


def method_colors(methods: list[str]) -> dict[str, tuple]:
    """One fixed colour per method, by its position in the method order: tab10's ten (tab20's dark ones, the same
    values), then tab20's light ones for methods 11 to 20 (the few-shot figure's twelve), then around again."""
    from matplotlib import colormaps

    palette = colormaps["tab20"]
    return {method: palette(2 * (index % 10) + (index // 10) % 2) for index, method in enumerate(methods)}


def base_novel_png(results: pd.DataFrame, listed_methods: list[str], confidence: float, dpi: int) -> bytes:
    return _png(base_novel_figure(results, listed_methods, confidence), dpi)


def base_novel_figure(results: pd.DataFrame, listed_methods: list[str], confidence: float) -> Figure:
    """One panel per dataset (and the Average): Base, Novel, HM bars per method that has a number, whiskers its
    interval over seeds at `confidence` (the tables' Student's t interval, `report.confidence`)."""
    rows = results[results["protocol"] == "base_to_novel"]
    datasets = list(dict.fromkeys(rows.loc[rows["row"] == "dataset", "dataset"]))
    if not datasets:
        return _message("Base-to-novel: no results in the eval tables")
    panels = datasets + [AVERAGE]
    colors = method_colors(method_order(listed_methods, rows["method"]))  # a method's colour in every picture
    methods = _with_numbers(rows, listed_methods)  # a listed method without a number would be an empty group
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
    _legend(figure, [Line2D([], [], color=colors[m], linewidth=8) for m in methods], methods)
    intervals = rows[rows["method"].isin(methods)]["ci_low"].notna().any()
    whiskers = (f"whiskers its {confidence * 100:g}% interval over seeds (Student's t, as in the tables)"
                if intervals else "no whiskers: one seed has no interval")
    missing = " n/a: no number." if _has_gaps(rows, methods) else ""
    figure.suptitle(f"Base-to-novel accuracy: bars the mean over seeds, {whiskers}.{missing}", fontsize=11, wrap=True)
    return figure


def _with_numbers(rows: pd.DataFrame, listed: list[str]) -> list[str]:
    """The methods, in the tables' order, with at least one number among `rows`."""
    having = set(rows.loc[rows["mean"].notna(), "method"])
    return [method for method in method_order(listed, rows["method"]) if method in having]


def _has_gaps(rows: pd.DataFrame, methods: list[str]) -> bool:
    """Whether a shown method lacks a number of some panel and metric (drawn as n/a)."""
    return bool(rows.loc[rows["method"].isin(methods) & rows["metric"].isin(B2N_METRICS), "mean"].isna().any())


def _bars(ax, rows: pd.DataFrame, methods: list[str], colors: dict) -> None:
    width = 0.8 / max(1, len(methods))
    x = np.arange(len(B2N_METRICS))
    top = 100.0
    for index, method in enumerate(methods):
        mine = rows[rows["method"] == method].set_index("metric").reindex(B2N_METRICS)
        offset = x - 0.4 + width * (index + 0.5)
        means = mine["mean"].to_numpy(float)                                          # [3]
        low, high = mine["ci_low"].to_numpy(float), mine["ci_high"].to_numpy(float)  # [3], NaN: one seed
        present = ~np.isnan(means)
        errors = np.nan_to_num(np.stack([means - low, high - means])[:, present])    # [2, present]
        ax.bar(offset[present], means[present], width, yerr=errors, color=colors[method], capsize=2,
               error_kw={"linewidth": 0.8})
        top = max(top, float(np.nanmax(np.append(high[present], 0.0))))
        for position in offset[~present]:
            ax.text(position, 2, "n/a", rotation=90, ha="center", va="bottom", fontsize=7, color="0.4")
    ax.set_xticks(x, [m.upper() if m == "hm" else m.capitalize() for m in B2N_METRICS])
    ax.set_ylim(0, top if top == 100.0 else top + 2)  # an interval reaching past 100 is drawn whole
    ax.set_ylabel("accuracy (%)")
    ax.grid(axis="y", alpha=0.3)


def few_shot_png(results: pd.DataFrame, listed_methods: list[str], confidence: float, dpi: int) -> bytes:
    return _png(few_shot_figure(results, listed_methods, confidence), dpi)


def few_shot_figure(results: pd.DataFrame, listed_methods: list[str], confidence: float) -> Figure:
    """Accuracy against shots, the papers' figure: the Average panel first, then one per dataset.

    One line per method (its colour in every picture), the seeds' interval as a band around it, a log-scale
    x axis with a tick at each shot count; a point without a number (missing) is left out, not drawn at 0.
    """
    rows = results[results["protocol"].map(shots_of).notna()].assign(shots=lambda f: f["protocol"].map(shots_of))
    if rows.empty:
        return _message("Few-shot learning: no results in the eval tables")
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
    _legend(figure, handles, shown)
    figure.suptitle(f"Few-shot learning: accuracy against shots per class (line: the mean over seeds; band: its "
                    f"{confidence * 100:g}% interval over seeds, Student's t, as in the tables)", fontsize=11,
                    wrap=True)
    return figure


def loss_png(logs: pd.DataFrame, listed_methods: list[str], smoothing: int, dpi: int) -> bytes:
    return _png(loss_figure(logs, listed_methods, smoothing), dpi)


def loss_figure(logs: pd.DataFrame, listed_methods: list[str], smoothing: int) -> Figure:
    """One panel per training dataset: total loss per step, a colour per method, a line style per seed.

    The steps where the tokens were still fading in (`fade` < 1) are shaded: there the
    token methods' loss may rise, as their streams leave the CLS feature they start from.
    """
    if logs.empty:
        return _message("Training loss: no train logs given (zero-shot runs do not train)")
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
    _legend(figure, handles, labels)
    shown = "raw values" if window == 1 else f"moving average over {window} steps"
    figure.suptitle(f"Training loss: each method's own objective ({shown})", fontsize=11, wrap=True)
    return figure


def role_changes_png(changes: pd.DataFrame, listed_methods: list[str], confidence: float, dpi: int) -> bytes:
    return _png(role_changes_figure(changes, listed_methods, confidence), dpi)


def role_changes_figure(changes: pd.DataFrame, listed_methods: list[str], confidence: float) -> Figure:
    """What the roles change, as a forest plot: one row per pair (`<method>+roles − <method>`) and Average (the
    base-to-novel Base, Novel and HM; each transfer and few-shot protocol's accuracy), the point its Δ, the thin
    whisker its interval over test images, the thick one its interval over seeds (when there are two or more)."""
    rows = changes[(changes["dataset"] == AVERAGE) & changes["mean"].notna()]
    if rows.empty:
        return _message("What the roles change: no variant and plain method share a seed")
    colors = method_colors(method_order(listed_methods, changes["method"]))
    labels = [f"{row.method} − {row.baseline} · {_change_label(row)}" for row in rows.itertuples(index=False)]
    figure = Figure(figsize=(8.5, 0.32 * len(rows) + 1.6), layout="constrained")
    ax = figure.subplots()
    y = np.arange(len(rows))[::-1]
    for at, row in zip(y, rows.itertuples(index=False)):
        color = colors[row.method]
        if not np.isnan(row.image_low):
            ax.plot([row.image_low, row.image_high], [at, at], color=color, linewidth=1.0)
        if not np.isnan(row.seed_low):
            ax.plot([row.seed_low, row.seed_high], [at, at], color=color, linewidth=3.5, alpha=0.45)
        ax.plot([row.mean], [at], "o", color=color, markersize=5)
    ax.axvline(0.0, color="0.3", linewidth=0.8)
    ax.set_yticks(y, labels, fontsize=8)
    ax.set_xlabel("Δ accuracy (points): with the roles minus without")
    ax.grid(axis="x", alpha=0.3)
    pct = f"{confidence * 100:g}%"
    figure.suptitle(f"What the roles change (Averages): thin whisker the {pct} interval over test images, thick "
                    f"the {pct} interval over seeds", fontsize=10, wrap=True)
    return figure


def _change_label(row) -> str:
    if row.protocol == "base_to_novel":
        return {"base": "Base", "novel": "Novel", "hm": "HM"}[row.metric]
    shots = shots_of(row.protocol)
    return f"few-shot {shots} shots" if shots is not None else row.protocol.replace("_", " ")


def _legend(figure: Figure, handles: list, labels: list[str]) -> None:
    """The figure's legend below its panels, in as many columns as fit its width (a row of every entry was cut
    off at both edges of a narrow figure: issue 39)."""
    canvas = FigureCanvasAgg(figure)
    for columns in range(max(1, len(labels)), 0, -1):
        legend = figure.legend(handles, labels, loc="outside lower center", ncols=columns, frameon=False)
        if columns == 1 or _inside(legend.get_window_extent(canvas.get_renderer()), figure):
            return
        legend.remove()


def _inside(box, figure: Figure) -> bool:
    return box.x0 >= figure.bbox.x0 - 0.5 and box.x1 <= figure.bbox.x1 + 0.5


def _message(text: str) -> Figure:
    figure = Figure(figsize=(6, 1.5))
    figure.text(0.5, 0.5, text, ha="center", va="center", wrap=True)
    return figure


def _png(figure: Figure, dpi: int) -> bytes:
    FigureCanvasAgg(figure)
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=dpi, metadata=PNG_METADATA)
    return buffer.getvalue()
