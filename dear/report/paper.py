"""Tables ready for a paper: the papers' layouts as CSV, Markdown and LaTeX (booktabs), best per column in bold.

- base-to-novel: one small table per dataset, the Average first (Method, Base,
  Novel, HM), as CoCoOp, MaPLe, PromptSRC and MMRL lay out their Table 1;
- cross-dataset and domain generalization: one row per method, the source
  then each target, then the Average over the targets (their transfer tables);
- few-shot learning (`few_shot.*`): one small table per dataset, the Average
  first, a row per method and a column per shot count.

Means only (the papers' convention; the intervals are in results.csv and
results.md). Numbers come from `dear.report.tables.aggregate`: nothing is
computed here but the best of a column. A LaTeX file is a fragment to
`\\input` inside a table environment; it needs `\\usepackage{booktabs}`.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from dear.report.tables import AVERAGE, B2N_METRICS, few_shot_protocols, method_order, shots_label
from dear.scoring.results import shots_of

TITLES = {"base_to_novel": "Base-to-novel generalization", "cross_dataset": "Cross-dataset evaluation",
          "domain_generalization": "Domain generalization", "few_shot": "Few-shot learning"}
METRIC_NAMES = {"base": "Base", "novel": "Novel", "hm": "HM"}
MISSING = "—"


def tables(results: pd.DataFrame, methods: list[str], decimals: int,
           limits: dict[str, str] | None = None) -> dict[str, bytes]:
    """{"paper/<protocol>.<csv|md|tex>": bytes} for every protocol the results hold.

    `limits`: {method: why it has no number for some class lists} (a linear probe's), said under a table where
    that method shows "—".
    """
    files = {}
    for protocol in TITLES:
        few = protocol == "few_shot"
        rows = results[results["protocol"].map(shots_of).notna()] if few else results[results["protocol"] == protocol]
        if rows.empty:
            continue
        blocks = _b2n_blocks(rows, methods) if protocol == "base_to_novel" else \
            _few_shot_blocks(rows, methods) if few else _transfer_blocks(rows, methods)
        why = _why_missing(blocks, limits or {})
        files[f"paper/{protocol}.csv"] = _csv(blocks, decimals)
        files[f"paper/{protocol}.md"] = (_markdown(protocol, blocks, decimals)
                                         + "".join(f"{MISSING} {method}: {text}.\n" for method, text in why)).encode()
        files[f"paper/{protocol}.tex"] = (_latex(protocol, blocks, decimals)
                                          + "".join(f"% -- {method}: {text}.\n" for method, text in why)).encode()
    return files


def _why_missing(blocks: list, limits: dict[str, str]) -> list[tuple[str, str]]:
    """(method, why) of each method with a stated limit and a missing number in these tables."""
    return [(method, text) for method, text in limits.items()
            if any(method in block.methods and any(np.isnan(block.values[(method, c)]) for c in block.columns)
                   for block in blocks)]


class Block:
    """One table of the layout: a title, column names, and a mean per (method, column) (NaN = missing)."""

    def __init__(self, title: str, key: dict, columns: list[str], names: list[str], methods: list[str],
                 values: dict[tuple[str, str], float]):
        self.title, self.key, self.columns, self.names, self.methods = title, key, columns, names, methods
        self.values = values
        self.best = {column: np.nanmax([values[(m, column)] for m in methods])
                     if any(not np.isnan(values[(m, column)]) for m in methods) else np.nan for column in columns}

    def is_best(self, method: str, column: str) -> bool:
        value, best = self.values[(method, column)], self.best[column]
        return not np.isnan(value) and np.isclose(value, best, rtol=0, atol=1e-9)


def _b2n_blocks(rows: pd.DataFrame, listed: list[str]) -> list[Block]:
    methods = method_order(listed, rows["method"])
    datasets = list(dict.fromkeys(rows.loc[rows["row"] == "dataset", "dataset"]))
    blocks = []
    for dataset in [AVERAGE] + datasets:
        mine = rows[rows["dataset"] == dataset]
        title = f"Average over {len(datasets)} datasets" if dataset == AVERAGE else dataset
        blocks.append(Block(title, {"dataset": dataset}, list(B2N_METRICS), [METRIC_NAMES[m] for m in B2N_METRICS],
                            methods, _means(mine, methods, B2N_METRICS, "metric")))
    return blocks


def _transfer_blocks(rows: pd.DataFrame, listed: list[str]) -> list[Block]:
    blocks = []
    for source in dict.fromkeys(rows["source"]):
        mine = rows[rows["source"] == source]
        methods = method_order(listed, mine["method"])
        columns = list(dict.fromkeys(mine["dataset"]))  # the source first (when scored), the targets, the Average
        names = [f"{c} (source)" if c == source else c for c in columns]
        blocks.append(Block(f"Source: {source}", {"source": source}, columns, names, methods,
                            _means(mine, methods, columns, "dataset")))
    return blocks


def _few_shot_blocks(rows: pd.DataFrame, listed: list[str]) -> list[Block]:
    """One table per dataset, the Average first: a row per method, a column per shot count (KgCoOp's, MMRL's
    few-shot tables)."""
    methods = method_order(listed, rows["method"])
    protocols = few_shot_protocols(rows["protocol"])
    names = [shots_label(p) for p in protocols]
    datasets = list(dict.fromkeys(sorted(rows.loc[rows["row"] == "dataset", "dataset"])))
    return [Block(f"Average over {len(datasets)} datasets" if dataset == AVERAGE else dataset, {"dataset": dataset},
                  protocols, names, methods, _means(rows[rows["dataset"] == dataset], methods, protocols, "protocol"))
            for dataset in [AVERAGE] + datasets]


def _means(rows: pd.DataFrame, methods: list[str], columns, by: str) -> dict[tuple[str, str], float]:
    found = {(row.method, getattr(row, by)): row.mean for row in rows.itertuples(index=False)}
    return {(method, column): float(found.get((method, column), np.nan)) for method in methods for column in columns}


def _number(block: Block, method: str, column: str, decimals: int) -> str:
    value = block.values[(method, column)]
    return MISSING if np.isnan(value) else f"{value:.{decimals}f}"


# --- the three formats ----------------------------------------------------------------

def _csv(blocks: list[Block], decimals: int) -> bytes:
    """Wide, one row per table row: the block's key, method, each column's mean, and the columns it is best in."""
    frames = []
    for block in blocks:
        records = [{**block.key, "method": method,
                    **{name: block.values[(method, column)] for column, name in zip(block.columns, block.names)},
                    "best": ";".join(name for column, name in zip(block.columns, block.names)
                                     if block.is_best(method, column))}
                   for method in block.methods]
        frames.append(pd.DataFrame(records))
    frame = pd.concat(frames, ignore_index=True)
    frame = frame[[c for c in frame.columns if c != "best"] + ["best"]]
    return frame.to_csv(index=False, float_format=f"%.{decimals}f", lineterminator="\n").encode()


def _markdown(protocol: str, blocks: list[Block], decimals: int) -> str:
    lines = [f"# {TITLES[protocol]}", "", "Means over seeds; **bold**: the best of its column (ties all bold).", ""]
    for block in blocks:
        lines += [f"## {block.title}", "", "| Method | " + " | ".join(block.names) + " |",
                  "| --- |" + " --- |" * len(block.columns)]
        for method in block.methods:
            cells = [f"**{text}**" if block.is_best(method, column) else text
                     for column in block.columns for text in [_number(block, method, column, decimals)]]
            lines.append(f"| {method} | " + " | ".join(cells) + " |")
        lines.append("")
    return "\n".join(lines)


LATEX_SPECIAL = {"\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#", "_": r"\_",
                 "{": r"\{", "}": r"\}", "~": r"\textasciitilde{}", "^": r"\textasciicircum{}"}


def latex_escape(text: str) -> str:
    return "".join(LATEX_SPECIAL.get(char, char) for char in text)


def _latex(protocol: str, blocks: list[Block], decimals: int) -> str:
    lines = [f"% {TITLES[protocol]}: means over seeds, best of each column in bold. Written by `dear report`;",
             "% needs \\usepackage{booktabs}. Intervals over seeds: results.csv."]
    for index, block in enumerate(blocks):
        width = len(block.columns)
        if index:
            lines.append("\\hfill" if protocol == "base_to_novel" else "\\par\\medskip")
        lines += [f"\\begin{{tabular}}{{l{'c' * width}}}", "\\toprule",
                  f"\\multicolumn{{{width + 1}}}{{c}}{{{latex_escape(block.title)}}} \\\\", "\\midrule",
                  "Method & " + " & ".join(latex_escape(name) for name in block.names) + " \\\\", "\\midrule"]
        for method in block.methods:
            cells = [f"\\textbf{{{text}}}" if block.is_best(method, column) else text.replace(MISSING, "--")
                     for column in block.columns for text in [_number(block, method, column, decimals)]]
            lines.append(f"{latex_escape(method)} & " + " & ".join(cells) + " \\\\")
        lines += ["\\bottomrule", "\\end{tabular}"]
    return "\n".join(lines) + "\n"
