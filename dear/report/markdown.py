"""results.md: the aggregated numbers as the papers lay them out, pictures beside them, one page.

Pure text from the frames of `dear.report.tables`: no numbers are computed
here except formatting, so results.md and the CSV files cannot disagree.
Layout: the base-to-novel average table first, then one small table per
dataset, DeAR's paired differences and each stream's own accuracy, the
transfer protocols, the head roles and their validation, the published
reference numbers; the best mean of every column is in bold.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from dear.report import reference
from dear.report.tables import AVERAGE, B2N_METRICS, method_order

MISSING = "—"
PROTOCOL_TITLES = {"cross_dataset": "Cross-dataset", "domain_generalization": "Domain generalization"}
METRIC_NAMES = {"base": "Base", "novel": "Novel", "hm": "HM"}


@dataclass(frozen=True)
class Page:
    """What the page says besides the numbers."""

    decimals: int
    methods: list[str]
    seeds: list[int]
    ddof: int
    std_warning: float
    n_evals: int
    reference: bool
    heatmaps: list[str]        # file names under the report folder (roles/<ds>.png)
    has_loss: bool
    ablations: dict[str, list[str]] = field(default_factory=dict)  # dataset -> markdown table of the role validation
    notes: list[str] = field(default_factory=list)  # paragraphs under the first one: what the run was (dear/stages/report.py)


def render(results: pd.DataFrame, page: Page, differences: pd.DataFrame | None = None,
           streams: pd.DataFrame | None = None) -> str:
    std_kind = "sample std (n-1)" if page.ddof == 1 else "population std"
    lines = [
        "# Results",
        "",
        f"Aggregated from {page.n_evals} eval tables. Accuracy = 100 · correct / total, summed over the classes "
        f"of each split from the counts in eval.parquet (never from rounded percentages). Each cell is the mean "
        f"± {std_kind} over seeds; n = seeds the row holds, out of the {_seed_list(page.seeds)} expected "
        f"(data.seeds). {MISSING} = no result (missing, never zero). **Bold**: the best mean of its column.",
        "",
    ]
    lines += [line for note in page.notes for line in (note, "")]
    lines += _warnings(results, page)
    b2n = results[results["protocol"] == "base_to_novel"]
    lines += _base_to_novel(b2n, page)
    if differences is not None and not differences.empty:
        lines += _differences(differences, page)
    if streams is not None and not streams.empty:
        lines += _streams(streams, page)
    for protocol, title in PROTOCOL_TITLES.items():
        lines += _transfer(results[results["protocol"] == protocol], title, page)
    lines += _roles(page)
    if page.reference:
        lines += _reference()
    lines += _pictures(page)
    return "\n".join(lines).rstrip("\n") + "\n"


def _warnings(results: pd.DataFrame, page: Page) -> list[str]:
    flagged = results[results["std_warning"]]
    if flagged.empty:
        return []
    lines = ["## Warnings", ""]
    for row in flagged.itertuples(index=False):
        lines.append(f"- **seeds disagree**: {row.protocol} · {row.dataset} · {row.method} · {row.metric}: "
                     f"std {_num(row.std, page.decimals)} points over {row.n_seeds} seeds "
                     f"(above report.std_warning = {_num(page.std_warning, page.decimals)}); "
                     f"seeds: {_seed_values(row, page.decimals)}")
    return lines + [""]


def _base_to_novel(rows: pd.DataFrame, page: Page) -> list[str]:
    lines = ["## Base-to-novel", ""]
    if rows.empty:
        return lines + ["No eval table holds this protocol.", ""]
    datasets = list(dict.fromkeys(rows.loc[rows["row"] == "dataset", "dataset"]))
    methods = method_order(page.methods, rows["method"])
    count = f"{len(datasets)} dataset{'s' if len(datasets) != 1 else ''}"
    lines += [f"### {AVERAGE} over {count}", ""] + _b2n_table(rows, AVERAGE, methods, page) + [""]
    lines += [
        "Base and Novel are averaged over the datasets; HM is the HM of those two averages (the papers' "
        "convention), so it is not the mean of the datasets' HMs. Per dataset likewise: Base and Novel are each "
        "seed's accuracy averaged over seeds, HM = 2·B·N/(B+N) of those means; every ± is the std over seeds (for "
        "HM, of the per-seed HMs). An average is shown only when every dataset has the method.", ""]
    for dataset in datasets:
        lines += [f"### {dataset}", ""] + _b2n_table(rows, dataset, methods, page) + [""]
    return lines


def _b2n_table(rows: pd.DataFrame, dataset: str, methods: list[str], page: Page) -> list[str]:
    cells = {method: [_cell(rows, dataset, method, metric, page.decimals) for metric in B2N_METRICS]
             for method in methods}
    best = {metric: _best(rows, dataset, methods, metric) for metric in B2N_METRICS}
    body = []
    for method in methods:
        texts = [_bold(text, row, best[metric]) for (text, row), metric in zip(cells[method], B2N_METRICS)]
        body.append([method] + texts + [_n_text([r for _, r in cells[method]], page)])
    return _table(["Method", "Base", "Novel", "HM", "n"], body)


def _differences(frame: pd.DataFrame, page: Page) -> list[str]:
    """Per dataset, each pair's per-seed paired differences (whatever their sign)."""
    pairs = list(dict.fromkeys(zip(frame["method"], frame["baseline"])))
    header = ["Dataset"] + [f"{m} − {b}: {METRIC_NAMES[k]}" for m, b in pairs for k in B2N_METRICS] + ["n"]
    body = []
    for dataset in [AVERAGE] + [d for d in dict.fromkeys(frame["dataset"]) if d != AVERAGE]:
        mine = frame[frame["dataset"] == dataset]
        cells, counts = [], set()
        for method, baseline in pairs:
            for metric in B2N_METRICS:
                row = mine[(mine["method"] == method) & (mine["baseline"] == baseline) & (mine["metric"] == metric)]
                if row.empty or np.isnan(row.iloc[0]["mean"]):
                    cells.append(MISSING)
                    continue
                row = row.iloc[0]
                counts.add(int(row["n_seeds"]))
                std = "" if np.isnan(row["std"]) else f" ± {_num(row['std'], page.decimals)}"
                cells.append(f"{row['mean']:+.{page.decimals}f}{std}")
        label = f"**{AVERAGE}**" if dataset == AVERAGE else dataset
        body.append([label] + cells + ["–".join(map(str, sorted(counts))) or "0"])
    return ["### Paired differences", "",
            "Per seed, the first method's accuracy minus the baseline's on the same few-shot sample and the same "
            "test images, then mean ± std over the seeds both have (positive: the first method is better). "
            "The Average compares per-seed averages over the datasets (HM of the averaged Base and Novel).", ""] \
        + _table(header, body) + [""]


def _streams(frame: pd.DataFrame, page: Page) -> list[str]:
    """Each stream's own accuracy: the CLS stream and every attribute / representation stream."""
    lines = ["### Each stream's own accuracy", "",
             "Top-1 of every logit stream alone (mean ± std over seeds): `cls` is the CLS feature, the concepts "
             "are DeAR's attribute streams, `rep` is MMRL's representation feature. The methods' outputs above "
             "fuse them on base classes and use `cls` alone on novel classes (fusion.novel).", ""]
    for dataset in dict.fromkeys(frame["dataset"]):
        mine = frame[(frame["dataset"] == dataset)]
        streams = list(dict.fromkeys(mine["stream"]))
        methods = [m for m in method_order(page.methods, mine["method"]) if m in set(mine["method"])]
        body = []
        for method in methods:
            for split in ("base", "novel"):
                cells = []
                for stream in streams:
                    row = mine[(mine["method"] == method) & (mine["stream"] == stream) & (mine["split"] == split)]
                    if row.empty or np.isnan(row.iloc[0]["mean"]):
                        cells.append(MISSING)
                    else:
                        std = row.iloc[0]["std"]
                        cells.append(_num(row.iloc[0]["mean"], page.decimals)
                                     + ("" if np.isnan(std) else f" ± {_num(std, page.decimals)}"))
                body.append([method, split] + cells)
        lines += [f"#### {dataset}", ""] + _table(["Method", "Split"] + streams, body) + [""]
    return lines


def _transfer(rows: pd.DataFrame, title: str, page: Page) -> list[str]:
    lines = [f"## {title}", ""]
    if rows.empty:
        return lines + ["No eval table holds this protocol.", ""]
    for source in dict.fromkeys(rows["source"]):
        of_source = rows[rows["source"] == source]
        targets = [t for t in dict.fromkeys(of_source["dataset"]) if t != AVERAGE]
        names = [f"{t} (source)" if t == source else t for t in targets]
        header = ["Method"] + names + [f"{AVERAGE} of targets", "n"]
        methods = method_order(page.methods, of_source["method"])
        best = {target: _best(of_source, target, methods, "accuracy") for target in targets + [AVERAGE]}
        body = []
        for method in methods:
            cells = [_cell(of_source, target, method, "accuracy", page.decimals) for target in targets + [AVERAGE]]
            texts = [_bold(text, row, best[target]) for (text, row), target in zip(cells, targets + [AVERAGE])]
            body.append([method] + texts + [_n_text([r for _, r in cells], page)])
        lines += [f"Source (training) dataset: **{source}**; accuracy on all classes of each dataset.", ""]
        lines += _table(header, body) + [""]
    return lines + ["The average is over the target datasets, the source left out (the papers' convention). "
                    "It is shown only when every target has the method.", ""]


def _roles(page: Page) -> list[str]:
    if not page.heatmaps and not page.ablations:
        return []
    lines = ["## Head roles", ""]
    for name in page.heatmaps:
        lines += [f"![Head roles: {name}]({name})", ""]
    for dataset, table in page.ablations.items():
        lines += [f"Validation of the roles profiled on {dataset} by mean-ablation: zero-shot accuracy lost on each "
                  "concept when the heads labelled with it (dominant concept; and those of them with the attribute "
                  "role) lose their image-specific direct contribution, against random head sets of the same size. "
                  "A concept is judged when the backbone knows it (zero-shot >= 2x chance).", ""] + table + [""]
    return lines


def _reference() -> list[str]:
    header = ["Method (published)", "Base", "Novel", "HM"]
    body = [[name] + ["not reported" if v is None else f"{v:.2f}" for v in values]
            for name, *values in reference.BASE_TO_NOVEL]
    return ["## Reference: published numbers (not measured here)", "", reference.CAPTION, ""] + _table(header, body) + [""]


def _pictures(page: Page) -> list[str]:
    lines = ["## Pictures", "", "![Base, novel and HM accuracy per dataset and method](base_novel.png)", ""]
    if page.has_loss:
        lines += ["![Training loss per method](loss_curves.png)", ""]
    return lines


# --- formatting ------------------------------------------------------------------

def _cell(rows: pd.DataFrame, dataset: str, method: str, metric: str, decimals: int) -> tuple[str, pd.Series | None]:
    """'mean ± std' of one number, '—' when it is missing; also the row it came from."""
    match = rows[(rows["dataset"] == dataset) & (rows["method"] == method) & (rows["metric"] == metric)]
    if match.empty or np.isnan(match.iloc[0]["mean"]):
        return MISSING, None
    row = match.iloc[0]
    text = _num(row["mean"], decimals)
    if not np.isnan(row["std"]):
        text += f" ± {_num(row['std'], decimals)}"
    return text, row


def _best(rows: pd.DataFrame, dataset: str, methods: list[str], metric: str) -> float:
    """The highest mean of a column (NaN when the column is empty)."""
    match = rows[(rows["dataset"] == dataset) & (rows["method"].isin(methods)) & (rows["metric"] == metric)]
    values = match["mean"].dropna()
    return float(values.max()) if len(values) else np.nan


def _bold(text: str, row: pd.Series | None, best: float) -> str:
    """Bold a cell whose mean is the column's best (ties are all bold)."""
    if row is None or np.isnan(best) or not np.isclose(row["mean"], best, rtol=0, atol=1e-9):
        return text
    return f"**{text}**"


def _n_text(cells: list[pd.Series | None], page: Page) -> str:
    """Seeds the row holds: '3', or '2 (no seed 3)'; a range when its cells differ."""
    present = [set(_seeds(row["seeds"])) for row in cells if row is not None]
    if not present:
        return "0"
    counts = sorted({len(s) for s in present})
    text = str(counts[0]) if len(counts) == 1 else f"{counts[0]}–{counts[-1]}"
    absent = sorted(set(page.seeds) - set.intersection(*present))
    if absent:
        text += f" (no seed {', '.join(map(str, absent))})"
    return text


def _seeds(text: str) -> list[int]:
    return [int(part) for part in str(text).split(";") if part]


def _seed_values(row, decimals: int) -> str:
    return ", ".join(f"{seed}: {_num(getattr(row, f'seed{seed}'), decimals)}" for seed in _seeds(row.seeds))


def _seed_list(seeds: list[int]) -> str:
    return f"{len(seeds)} seeds ({', '.join(map(str, seeds))})"


def _num(value: float, decimals: int) -> str:
    return f"{value:.{decimals}f}"


def _table(header: list[str], body: list[list[str]]) -> list[str]:
    rows = [header, ["---"] * len(header)] + body
    return ["| " + " | ".join(cells) + " |" for cells in rows]
