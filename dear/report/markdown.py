"""results.md: the aggregated numbers as the paper lays them out, with their conventions.

Pure text from the long frame of `dear.report.tables.aggregate`: no numbers
are computed here except formatting, so results.md and results.csv cannot
disagree.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from dear.report import reference
from dear.report.tables import AVERAGE, B2N_METRICS, method_order

MISSING = "—"
PROTOCOL_TITLES = {"cross_dataset": "Cross-dataset", "domain_generalization": "Domain generalization"}


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


def render(results: pd.DataFrame, page: Page) -> str:
    std_kind = "sample std (n-1)" if page.ddof == 1 else "population std"
    lines = [
        "# Results",
        "",
        f"Aggregated from {page.n_evals} eval tables. Accuracy = 100 · correct / total, summed over the classes "
        f"of each split from the counts in eval.parquet (never from rounded percentages). Each cell is the mean "
        f"± {std_kind} over seeds; n = seeds the row holds, out of the {_seed_list(page.seeds)} expected "
        f"(data.seeds). {MISSING} = no result (missing, never zero).",
        "",
    ]
    lines += _warnings(results, page)
    lines += _base_to_novel(results[results["protocol"] == "base_to_novel"], page)
    for protocol, title in PROTOCOL_TITLES.items():
        lines += _transfer(results[results["protocol"] == protocol], title, page)
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
    header = ["Dataset", "Method", "Base", "Novel", "HM", "n"]
    body = []
    datasets = [d for d in dict.fromkeys(rows.loc[rows["row"] == "dataset", "dataset"])]
    methods = method_order(page.methods, rows["method"])
    for dataset in datasets + [AVERAGE]:
        label = dataset if dataset != AVERAGE else f"**{AVERAGE}** ({len(datasets)} datasets)"
        for method in methods:
            cells = [_cell(rows, dataset, method, metric, page.decimals) for metric in B2N_METRICS]
            body.append([label, method] + [text for text, _ in cells] + [_n_text([r for _, r in cells], page)])
    return lines + _table(header, body) + [
        "",
        "Per dataset, Base and Novel are each seed's accuracy averaged over seeds, and HM is the mean over seeds "
        "of each seed's HM = 2·B·N/(B+N). The Average row averages Base and Novel over the datasets and takes "
        "the HM of those two averages (the papers' convention), so it is not the mean of the HM column; its ± is "
        "the std over the seeds present in every dataset. An average is shown only when every dataset has the "
        "method.",
        "",
    ]


def _transfer(rows: pd.DataFrame, title: str, page: Page) -> list[str]:
    lines = [f"## {title}", ""]
    if rows.empty:
        return lines + ["No eval table holds this protocol.", ""]
    for source in dict.fromkeys(rows["source"]):
        of_source = rows[rows["source"] == source]
        targets = [t for t in dict.fromkeys(of_source["dataset"]) if t != AVERAGE]
        names = [f"{t} (source)" if t == source else t for t in targets]
        header = ["Method"] + names + [f"{AVERAGE} of targets", "n"]
        body = []
        for method in method_order(page.methods, of_source["method"]):
            cells = [_cell(of_source, target, method, "accuracy", page.decimals) for target in targets + [AVERAGE]]
            body.append([method] + [text for text, _ in cells] + [_n_text([r for _, r in cells], page)])
        lines += [f"Source (training) dataset: **{source}**; accuracy on all classes of each dataset.", ""]
        lines += _table(header, body) + [""]
    return lines + [f"The average is over the target datasets, the source left out (the papers' convention). "
                    "It is shown only when every target has the method.", ""]


def _reference() -> list[str]:
    header = ["Method (published)", "Base", "Novel", "HM"]
    body = [[name] + [MISSING if v is None else f"{v:.2f}" for v in values]
            for name, *values in reference.BASE_TO_NOVEL]
    return ["## Reference: published numbers (not measured here)", "", reference.CAPTION, ""] + _table(header, body) + [""]


def _pictures(page: Page) -> list[str]:
    lines = ["## Pictures", "", "![Base, novel and HM accuracy per dataset and method](base_novel.png)", ""]
    if page.has_loss:
        lines += ["![Training loss per method](loss_curves.png)", ""]
    for name in page.heatmaps:
        lines += [f"![Head roles: {name}]({name})", ""]
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
