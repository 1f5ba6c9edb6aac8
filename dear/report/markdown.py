"""results.md: the aggregated numbers as the papers lay them out, pictures beside them, one page.

Pure text from the frames of `dear.report.tables`: no numbers are computed
here except formatting, so results.md and the CSV files cannot disagree.
Layout: the base-to-novel average table first, then one small table per
dataset, unseen classes under both inferences, each stream's own accuracy,
the transfer protocols, few-shot learning (a column per shot count), the
paired differences with their intervals and
verdicts, what DeAR's head roles change in each method run with and without
them (`+roles`), the head roles and their validation, the published numbers
beside ours (or why there are none); the best mean of every column is in bold.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from dear.report.tables import AVERAGE, B2N_METRICS, INFERENCES, few_shot_protocols, method_order, shots_label
from dear.scoring.results import shots_of

MISSING = "—"
PROTOCOL_TITLES = {"cross_dataset": "Cross-dataset", "domain_generalization": "Domain generalization"}
METRIC_NAMES = {"base": "Base", "novel": "Novel", "hm": "HM"}
FEW_SHOT_PUBLISHED = (
    "Few-shot learning: only CLIP-LoRA's 11-dataset Averages per shot count stand beside ours (its paper's "
    "few-shot table, ViT-B/16; in the table above when this run covers those eleven datasets). None of the other "
    "authors' repositories prints its few-shot results as text (KaiyangZhou/CoOp's README.md and lpclip/README.md, "
    "the READMEs of KgCoOp, PromptSRC and MMRL); CoOp gives them as a figure (its Figure 3, no table), "
    "Tip-Adapter's exp.log holds RN50's (another backbone), and the few-shot tables of the KgCoOp, PromptSRC and "
    "MMRL papers are not transcribed here, so no value could be checked against its source.")


@dataclass(frozen=True)
class Page:
    """What the page says besides the numbers."""

    decimals: int
    methods: list[str]
    seeds: list[int]
    std_warning: float
    confidence: float
    resamples: int           # of the paired bootstrap
    n_evals: int
    reference: bool
    heatmaps: list[str]        # file names under the report folder (roles/<ds>.png)
    has_loss: bool
    ablations: dict[str, list[str]] = field(default_factory=dict)  # dataset -> markdown table of the role validation
    setting_problems: list[str] = field(default_factory=list)  # why the published numbers are not comparable
    inference: str = "cls"   # fusion.novel of the eval tables: what the main tables use on unseen classes
    notes: list[str] = field(default_factory=list)  # paragraphs under the first one: what the run was (dear/stages/report.py)
    limits: dict[str, str] = field(default_factory=dict)  # method -> why it has no number for some class lists


def render(results: pd.DataFrame, page: Page, differences: pd.DataFrame | None = None,
           streams: pd.DataFrame | None = None, published: pd.DataFrame | None = None,
           inferences: pd.DataFrame | None = None, role_changes: pd.DataFrame | None = None) -> str:
    """The page; `role_changes`: the paired differences of each `+roles` variant against its plain method."""
    lines = [
        "# Results",
        "",
        f"Aggregated from {page.n_evals} eval tables. Accuracy = 100 · correct / total, summed over the classes "
        f"of each split from the counts in eval.parquet (never from rounded percentages). Each cell is the mean "
        f"over seeds ± the half-width of its {page.confidence:.0%} interval over seeds (Student's t with n − 1 "
        f"degrees of freedom: t · s/√n, so a wide ± with few seeds is honest, not a bug; a single seed has none; "
        f"std and the interval's ends: results.csv); n = seeds the row holds, out of the {_seed_list(page.seeds)} "
        f"expected (data.seeds). {MISSING} = no result (missing, never zero). **Bold**: the best mean of its column, "
        "whether or not it is better beyond noise (that is what the paired differences below say).",
        "",
    ]
    lines += [line for note in page.notes for line in (note, "")]
    lines += _warnings(results, page)
    b2n = results[results["protocol"] == "base_to_novel"]
    lines += _base_to_novel(b2n, page)
    if inferences is not None and not inferences.empty:
        lines += _inferences(inferences, page)
    if streams is not None and not streams.empty:
        lines += _streams(streams, page)
    for protocol, title in PROTOCOL_TITLES.items():
        lines += _transfer(results[results["protocol"] == protocol], title, page)
    few = results[results["protocol"].map(shots_of).notna()]
    if not few.empty:
        lines += _few_shot(few, page)
    if differences is not None and not differences.empty:
        lines += _differences(differences, page)
    if role_changes is not None and not role_changes.empty:
        lines += role_changes_section(role_changes, page)
    lines += _roles(page)
    if page.reference:
        lines += _published(published, page.setting_problems, page)
        lines += [FEW_SHOT_PUBLISHED, ""] if not few.empty else []
    lines += _pictures(page, few_shot=not few.empty)
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
        "seed's accuracy averaged over seeds, HM = 2·B·N/(B+N) of those means; an HM's ± comes from the spread of "
        "the per-seed HMs. An average is shown only when every dataset has the method.", ""]
    lines += _limits(rows, page)
    for dataset in datasets:
        lines += [f"### {dataset}", ""] + _b2n_table(rows, dataset, methods, page) + [""]
    return lines


def _limits(rows: pd.DataFrame, page: Page) -> list[str]:
    """Why a method with a stated limit (the linear probe) shows "—" in these rows, when it does."""
    found = []
    for method, text in page.limits.items():
        mine = rows[rows["method"] == method]
        if len(mine) and mine["mean"].isna().any():
            found.append(f"{MISSING} for **{method}** where it has no number: {text}.")
    return found + [""] if found else []


def _b2n_table(rows: pd.DataFrame, dataset: str, methods: list[str], page: Page) -> list[str]:
    cells = {method: [_cell(rows, dataset, method, metric, page.decimals) for metric in B2N_METRICS]
             for method in methods}
    best = {metric: _best(rows, dataset, methods, metric) for metric in B2N_METRICS}
    body = []
    for method in methods:
        texts = [_bold(text, row, best[metric]) for (text, row), metric in zip(cells[method], B2N_METRICS)]
        body.append([method] + texts + [_n_text([r for _, r in cells[method]], page)])
    return _table(["Method", "Base", "Novel", "HM", "n"], body)


def _inferences(frame: pd.DataFrame, page: Page) -> list[str]:
    """Unseen classes under both inferences, Averages only (every dataset: inference.csv); nothing when no protocol
    with unseen classes ran (a few-shot study)."""
    averages = frame[frame["row"] == "average"]
    columns = []
    if (averages["protocol"] == "base_to_novel").any():
        columns += [("base_to_novel", "", "novel", "Novel"), ("base_to_novel", "", "hm", "HM")]
    for protocol in ("cross_dataset", "domain_generalization"):
        for source in dict.fromkeys(averages.loc[averages["protocol"] == protocol, "source"]):
            columns.append((protocol, source, "accuracy", f"{PROTOCOL_TITLES[protocol]} from {source}"))
    if not columns:
        return []
    header = ["Method"] + [f"{title} · {inference}" for *_, title in columns for inference in INFERENCES]
    body = []
    for method in [m for m in method_order(page.methods, averages["method"]) if m in set(averages["method"])]:
        cells = []
        for protocol, source, metric, _ in columns:
            for inference in INFERENCES:
                rows = averages[(averages["inference"] == inference) & (averages["protocol"] == protocol)
                                & (averages["source"] == source)]
                cells.append(_cell(rows, AVERAGE, method, metric, page.decimals)[0])
        body.append([method] + cells)
    return ["### Unseen classes both ways", "",
            f"The tables on this page use `fusion.novel: {page.inference}` on unseen classes (novel classes, "
            "cross-dataset and domain targets), as the eval tables record; MMRL keeps its authors' decoupled "
            "inference (CLS alone on unseen classes) whatever it says. Beside it, each method that fuses several "
            "streams under both inferences, from the same trained model and the same evaluation: `cls` = the CLS "
            "stream alone (MMRL's decoupled inference), `fused` = the fused logits with the α fitted on base "
            "classes. Seen classes (Base, a transfer model's source) use the fused logits either way. Averages, "
            "mean ± interval over seeds as above; every dataset: inference.csv.", ""] + _table(header, body) + [""]


def _differences(frame: pd.DataFrame, page: Page) -> list[str]:
    """The Averages of every pair first, then per pair one table per dataset row (base-to-novel, transfer)."""
    pct = f"{page.confidence:.0%}"
    lines = ["## Paired differences", "",
             f"Δ = the first method's number minus the other's, per seed on the same few-shot sample and the same "
             f"test images, averaged over the seeds both have (positive: the first method is better). Then the {pct} "
             f"interval over seeds (paired Student's t) and the {pct} interval over test images (paired percentile "
             f"bootstrap of the images, {page.resamples} resamples, the seeds held fixed). **better** / **worse**: "
             "both intervals exclude 0 on that side; otherwise *within noise*. With one seed the verdict rests on the "
             "test images alone and says so. The intervals are per comparison, not adjusted for the many comparisons "
             "of this page: read the Averages first. Every number: differences.csv.", ""]
    averages = frame[frame["dataset"] == AVERAGE]
    body = [[f"{row.method} − {row.baseline}", _where(row), METRIC_NAMES.get(row.metric, "Accuracy"),
             _delta(row.mean, page), _interval(row.seed_low, row.seed_high, page),
             _interval(row.image_low, row.image_high, page), _verdict(row.verdict), str(row.n_seeds)]
            for row in averages.itertuples(index=False)]
    lines += ["### Averages", ""] + _table(["Pair", "Protocol", "Metric", "Δ", f"{pct} seeds", f"{pct} images",
                                             "Verdict", "n"], body) + [""]
    for (method, baseline), pair in frame.groupby(["method", "baseline"], sort=False):
        lines += [f"### {method} − {baseline}", ""]
        if pair["mean"].isna().all():
            lines += [f"No seed holds both {method} and {baseline}.", ""]
            continue
        lines += ["Each cell: Δ [interval over seeds] [interval over test images] verdict.", ""]
        b2n = pair[pair["protocol"] == "base_to_novel"]
        if not b2n.empty:
            rows = [[f"**{d}**" if d == AVERAGE else d] + [_difference(b2n, d, metric, page) for metric in B2N_METRICS]
                    + [_seeds_of(b2n[b2n["dataset"] == d])] for d in _average_first(b2n["dataset"])]
            lines += _table(["Dataset", "Base", "Novel", "HM", "n"], rows) + [""]
        few = pair[pair["protocol"].map(shots_of).notna()]
        if not few.empty:
            protocols = few_shot_protocols(few["protocol"])
            rows = [[f"**{d}**" if d == AVERAGE else d]
                    + [_difference(few[few["protocol"] == p], d, "accuracy", page) for p in protocols]
                    + [_seeds_of(few[few["dataset"] == d])] for d in _average_first(few["dataset"])]
            lines += ["Few-shot learning:", ""]
            lines += _table(["Dataset"] + [shots_label(p) for p in protocols] + ["n"], rows) + [""]
        transfer = pair[pair["protocol"].isin(list(PROTOCOL_TITLES))]
        if not transfer.empty:
            rows = [[_where(row), row.dataset + (" (source)" if row.dataset == row.source else ""),
                     _difference(transfer[(transfer["protocol"] == row.protocol) & (transfer["source"] == row.source)],
                                 row.dataset, "accuracy", page), str(row.n_seeds)]
                    for row in transfer.itertuples(index=False)]
            lines += _table(["Protocol", "Target", "Accuracy", "n"], rows) + [""]
    return lines


def role_changes_section(frame: pd.DataFrame, page: Page) -> list[str]:
    """"What the roles change": each variant minus its plain method, the Averages of every protocol."""
    pct = f"{page.confidence:.0%}"
    return ["## What the roles change", "",
            "Each method with DeAR's head roles (`+roles`: the Generalization heads of the study's roles table never "
            "read the method's image tokens, nor take its weight updates) minus the same method without them: the "
            "same recipe, few-shot samples, seeds and test images, so the difference is the roles' alone. Each "
            f"cell: Δ [{pct} interval over seeds] [{pct} interval over test images] verdict, computed as the paired "
            "differences above; every dataset's: differences.csv.", "",
            *role_changes_tables(frame, page), role_changes_picture("roles_change.png"), ""]


def role_changes_picture(path: str) -> str:
    return f"![What the roles change: each variant minus its plain method]({path})"


def role_changes_tables(frame: pd.DataFrame, page: Page) -> list[str]:
    """The section's two tables (also docs/results.md's, from a `make demo-roles` snapshot: dear.docs.demo)."""
    lines = []
    b2n = frame[(frame["protocol"] == "base_to_novel") & (frame["dataset"] == AVERAGE)]
    pairs = list(dict.fromkeys(zip(frame["method"], frame["baseline"])))
    if not b2n.empty:
        rows = [[f"{method} − {baseline}"] + [_difference(b2n[b2n["method"] == method], AVERAGE, metric, page)
                                              for metric in B2N_METRICS] + [_seeds_of(b2n[b2n["method"] == method])]
                for method, baseline in pairs if (b2n["method"] == method).any()]
        lines += ["Base-to-novel, Average:", ""]
        lines += _table(["Pair", "ΔBase", "ΔNovel", "ΔHM", "n"], rows) + [""]
    others = frame[(frame["protocol"] != "base_to_novel") & (frame["dataset"] == AVERAGE)]
    if not others.empty:
        rows = [[f"{row.method} − {row.baseline}", _where(row),
                 _difference(others[(others["method"] == row.method) & (others["protocol"] == row.protocol)
                                    & (others["source"] == row.source)], AVERAGE, "accuracy", page),
                 str(row.n_seeds)] for row in others.itertuples(index=False)]
        lines += ["Transfer and few-shot learning, Average over the targets (datasets):", ""]
        lines += _table(["Pair", "Protocol", "ΔAccuracy", "n"], rows) + [""]
    return lines


def _where(row) -> str:
    if row.protocol == "base_to_novel":
        return "base-to-novel"
    if shots_of(row.protocol) is not None:
        return f"few-shot, {shots_label(row.protocol)}"
    return f"{PROTOCOL_TITLES[row.protocol]} from {row.source}"


def _average_first(datasets) -> list[str]:
    found = list(dict.fromkeys(datasets))
    return [AVERAGE] * (AVERAGE in found) + [d for d in found if d != AVERAGE]


def _difference(rows: pd.DataFrame, dataset: str, metric: str, page: Page) -> str:
    match = rows[(rows["dataset"] == dataset) & (rows["metric"] == metric)]
    if match.empty or np.isnan(match.iloc[0]["mean"]):
        return MISSING
    row = match.iloc[0]
    return (f"{_delta(row['mean'], page)} {_interval(row['seed_low'], row['seed_high'], page)} "
            f"{_interval(row['image_low'], row['image_high'], page)} {_verdict(row['verdict'])}")


def _delta(value: float, page: Page) -> str:
    return MISSING if np.isnan(value) else f"{value:+.{page.decimals}f}"


def _interval(low: float, high: float, page: Page) -> str:
    if np.isnan(low) or np.isnan(high):
        return "[—]"
    return f"[{low:+.{page.decimals}f}, {high:+.{page.decimals}f}]"


def _verdict(text: str) -> str:
    word, _, rest = text.partition(" ")
    return f"**{word}**{' ' + rest if rest else ''}" if word in ("better", "worse") else f"*{text}*"


def _seeds_of(rows: pd.DataFrame) -> str:
    counts = sorted(set(rows["n_seeds"]))
    return "–".join(map(str, [counts[0], counts[-1]] if len(counts) > 1 else counts)) if counts else "0"


def _streams(frame: pd.DataFrame, page: Page) -> list[str]:
    """Each stream's own accuracy: the CLS stream and every attribute / representation stream."""
    lines = ["### Each stream's own accuracy", "",
             "Top-1 of every logit stream alone (mean ± interval over seeds, as above): `cls` is the CLS feature, the concepts "
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
                        cells.append(_num(row.iloc[0]["mean"], page.decimals) + _pm(row.iloc[0], page.decimals))
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
                    "It is shown only when every target has the method.", ""] + _limits(rows, page)


def _few_shot(rows: pd.DataFrame, page: Page) -> list[str]:
    """The Average over datasets, then one table per dataset: a row per method, a column per shot count."""
    protocols = few_shot_protocols(rows["protocol"])
    datasets = sorted(rows.loc[rows["row"] == "dataset", "dataset"].unique())
    methods = method_order(page.methods, rows["method"])
    header = ["Method"] + [shots_label(p) for p in protocols] + ["n"]
    lines = ["## Few-shot learning", "",
             "Trained on K shots of every class of a dataset (Dassl's draw for that K and seed) and tested on all "
             "its classes, as CoOp's few-shot experiment; one column per K. Each cell: mean ± the half-width of its "
             "interval over seeds, as above. The Average is over the datasets, shown only when every dataset has the "
             "method at that K. Picture: few_shot.png; every number: results.csv (protocol few_shot_<K>).", ""]
    for dataset in [AVERAGE] + datasets:
        mine = rows[rows["dataset"] == dataset]
        body = []
        for method in methods:
            cells = [_cell(mine[mine["protocol"] == p], dataset, method, "accuracy", page.decimals) for p in protocols]
            best = [_best(mine[mine["protocol"] == p], dataset, methods, "accuracy") for p in protocols]
            body.append([method] + [_bold(text, row, b) for (text, row), b in zip(cells, best)]
                        + [_n_text([r for _, r in cells], page)])
        title = f"{AVERAGE} over {len(datasets)} dataset{'s' if len(datasets) != 1 else ''}" if dataset == AVERAGE \
            else dataset
        lines += [f"### {title}", ""] + _table(header, body) + [""]
    return lines + _limits(rows, page)


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


def _published(frame: pd.DataFrame, problems: list[str], page: Page) -> list[str]:
    """Published numbers beside ours, in their own section; or why there are none for this run."""
    lines = ["## Published numbers beside ours", ""]
    if problems:
        return lines + ["Not shown: the published numbers were measured with OpenAI's ViT-B/16, 16 shots per class, "
                        "on CoOp's datasets, and this run is not in that setting (" + "; ".join(problems) + "), so "
                        "none of its numbers is comparable to a paper's.", ""]
    pct = f"{page.confidence:.0%}"
    lines += [f"Comparable in setting: this run uses OpenAI's ViT-B/16, 16 shots per class and CoOp's datasets and "
              f"splits, as the papers do. Published: the authors' means over their own seeds; ours: the means of the "
              f"tables above (our implementations of their recipes). Δ = ours − published; *in our interval*: the "
              f"published value lies inside our {pct} interval over seeds (— with one seed). An Average is compared "
              f"only when ours covers the published datasets exactly. Kept out of the measured tables; every row: "
              f"published.csv.", ""]
    if frame.empty:
        return lines + ["No method and dataset of this run has a published number.", ""]
    body = [[row.method, _where_published(row), METRIC_NAMES.get(row.metric, "Accuracy"),
             _num(row.published, page.decimals), _num(row.ours, page.decimals), _delta(row.difference, page),
             MISSING if row.inside is None else ("yes" if row.inside else "no"),
             row.published_source + (" ⚠" if row.flag else "")]
            for row in frame.itertuples(index=False)]
    lines += _table(["Method", "Dataset", "Metric", "Published", "Ours", "Δ", "In our interval", "Source"], body)
    flags = [f"- ⚠ {row.method} · {row.dataset} · {METRIC_NAMES.get(row.metric, row.metric)}: {row.flag} "
             "(shown as published)" for row in frame.itertuples(index=False) if row.flag]
    return lines + [""] + (flags + [""] if flags else [])


def _where_published(row) -> str:
    if row.protocol == "base_to_novel":
        return row.dataset
    if shots_of(row.protocol) is not None:
        return f"Few-shot, {shots_label(row.protocol)}: {row.dataset}"
    return f"{PROTOCOL_TITLES[row.protocol]} from {row.source}: {row.dataset}"


def _pictures(page: Page, few_shot: bool = False) -> list[str]:
    lines = ["## Pictures", "", "![Base, novel and HM accuracy per dataset and method](base_novel.png)", ""]
    if few_shot:
        lines += ["![Few-shot learning: accuracy against shots per class, per dataset and averaged](few_shot.png)", ""]
    if page.has_loss:
        lines += ["![Training loss per method](loss_curves.png)", ""]
    return lines


# --- formatting ------------------------------------------------------------------

def _cell(rows: pd.DataFrame, dataset: str, method: str, metric: str, decimals: int) -> tuple[str, pd.Series | None]:
    """'mean ± half-width of its interval' of one number, '—' when it is missing; also the row it came from."""
    match = rows[(rows["dataset"] == dataset) & (rows["method"] == method) & (rows["metric"] == metric)]
    if match.empty or np.isnan(match.iloc[0]["mean"]):
        return MISSING, None
    row = match.iloc[0]
    return _num(row["mean"], decimals) + _pm(row, decimals), row


def _pm(row: pd.Series, decimals: int) -> str:
    """' ± h', h the half-width of the row's interval over seeds ('' without one)."""
    if np.isnan(row["ci_low"]) or np.isnan(row["ci_high"]):
        return ""
    return f" ± {_num((row['ci_high'] - row['ci_low']) / 2, decimals)}"


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
