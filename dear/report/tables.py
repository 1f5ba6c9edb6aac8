"""Aggregation of per-seed accuracies into the paper's table layout.

Input: `dear.scoring.results.seed_accuracy` (one row per method, source, seed,
protocol, target). Output: one long frame, one row per number shown:
(protocol, source, dataset, row, method, metric) with mean, std, the seeds it
holds and each seed's value. Conventions, stated once here and under each
table of results.md:

- A dataset's Base and Novel are the mean ± std over seeds of that seed's
  counts-based accuracy; its HM is the HM of those two means (the papers'
  convention), its ± the std of the per-seed HMs.
- The base-to-novel Average row averages Base and Novel over datasets and
  takes the HM of those two averages (the same convention), so it is not
  the mean of the HM column.
- Every mean has a 95% (`report.confidence`) interval over its seeds:
  mean ± t_{n-1} · s/√n (dear.report.stats); an HM's is centred on the HM
  of the means, with the spread of the per-seed HMs.
- Transfer protocols (cross-dataset, domain generalization): one accuracy
  per target; the Average is over the targets, the source left out.
- Few-shot learning (protocol few_shot_<K>, one per shot count K): one
  accuracy per dataset (all its classes); the Average is over the datasets.
- An average holds a number only when every dataset (target) of the table
  has one for that method; its std is over the seeds present in all of them.
- Missing is NaN (shown "—"), never 0; every row records its seeds.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from dear.report import stats
from dear.scoring.results import FUSED, OUTPUT, harmonic_mean, seed_accuracy, shots_of

B2N_METRICS = ("base", "novel", "hm")
AVERAGE = "Average"
COLUMNS = ["protocol", "source", "dataset", "row", "method", "metric", "mean", "std", "ci_low", "ci_high",
           "n_seeds", "seeds", "missing_seeds", "std_warning"]


@dataclass(frozen=True)
class Conventions:
    """What shapes the aggregation (from params: data.seeds and the report section)."""

    methods: list[str]      # row order; listed methods always get rows (missing if absent)
    seeds: list[int]        # expected seeds
    ddof: int               # std over seeds: 1 sample, 0 population
    std_warning: float      # points; a dataset row's std above it is flagged
    confidence: float = 0.95  # of the interval over seeds


def method_order(listed: list[str], found) -> list[str]:
    """Listed methods first (in their order), then any other found method, sorted."""
    return list(listed) + sorted(set(found) - set(listed))


def aggregate(per_seed: pd.DataFrame, conv: Conventions) -> pd.DataFrame:
    """Every number of the report, long format (COLUMNS + one `seed<S>` column per seed)."""
    methods = method_order(conv.methods, per_seed["method"])
    seed_columns = sorted(set(conv.seeds) | set(per_seed["seed"].astype(int)))
    records = base_to_novel(per_seed[per_seed["protocol"] == "base_to_novel"], methods, conv)
    for protocol in ("cross_dataset", "domain_generalization"):
        records += transfer(per_seed[per_seed["protocol"] == protocol], protocol, methods, conv)
    records += few_shot(per_seed[per_seed["protocol"].map(shots_of).notna()], methods, conv)
    frame = pd.DataFrame(records, columns=COLUMNS + ["values"])
    for seed in seed_columns:
        frame[f"seed{seed}"] = [values.get(seed, np.nan) for values in frame["values"]]
    return frame.drop(columns="values")


def base_to_novel(rows: pd.DataFrame, methods: list[str], conv: Conventions) -> list[dict]:
    records: list[dict] = []
    datasets = sorted(rows["target"].unique())
    if not datasets:
        return records
    for dataset in datasets:
        for method in methods:
            mine = rows[(rows["target"] == dataset) & (rows["method"] == method)]
            values = {metric: _by_seed(mine, metric) for metric in B2N_METRICS}
            means = {metric: np.mean(list(values[metric].values())) if values[metric] else np.nan
                     for metric in ("base", "novel")}
            means["hm"] = float(harmonic_mean(means["base"], means["novel"]))
            for metric in B2N_METRICS:
                records.append(_record("base_to_novel", dataset, dataset, "dataset", method, metric, values[metric],
                                       conv, mean=float(means[metric])))
    for method in methods:
        records += _b2n_average(rows[rows["method"] == method], datasets, method, conv)
    return records


def _b2n_average(mine: pd.DataFrame, datasets: list[str], method: str, conv: Conventions) -> list[dict]:
    """Average row: mean Base and Novel over datasets, HM of those means (papers' convention)."""
    base = _mean_of_means(mine, datasets, "base")
    novel = _mean_of_means(mine, datasets, "novel")
    seeds = _complete_seeds(mine, datasets, ["base", "novel"])
    per_seed = {metric: {s: _mean_over(mine, datasets, s, metric) for s in seeds} for metric in ("base", "novel")}
    per_seed["hm"] = {s: float(harmonic_mean(per_seed["base"][s], per_seed["novel"][s])) for s in seeds}
    means = {"base": base, "novel": novel, "hm": float(harmonic_mean(base, novel))}
    return [_record("base_to_novel", "", AVERAGE, "average", method, metric, per_seed[metric], conv,
                    mean=means[metric]) for metric in B2N_METRICS]


def transfer(rows: pd.DataFrame, protocol: str, methods: list[str], conv: Conventions) -> list[dict]:
    """Cross-dataset / domain generalization: the source, each target, the average of the targets."""
    records = []
    for source in sorted(rows["source"].unique()):
        of_source = rows[rows["source"] == source]
        targets = transfer_targets(of_source["target"], source)
        for method in methods:
            mine = of_source[of_source["method"] == method]
            for target in ([source] if source in set(of_source["target"]) else []) + targets:
                values = _by_seed(mine[mine["target"] == target], "all")
                records.append(_record(protocol, source, target, "dataset", method, "accuracy", values, conv))
            seeds = _complete_seeds(mine, targets, ["all"])
            values = {s: _mean_over(mine, targets, s, "all") for s in seeds}
            mean = _mean_of_means(mine, targets, "all") if targets else np.nan
            records.append(_record(protocol, source, AVERAGE, "average", method, "accuracy", values, conv, mean=mean))
    return records


def few_shot(rows: pd.DataFrame, methods: list[str], conv: Conventions) -> list[dict]:
    """Few-shot learning: per shot count K (protocol few_shot_<K>), each dataset and the Average over the datasets.

    Every K averages the same datasets (all those of the few-shot runs), so a K missing a dataset has no
    Average rather than an average of fewer datasets.
    """
    records: list[dict] = []
    datasets = sorted(rows["target"].unique())
    for protocol in few_shot_protocols(rows["protocol"]):
        of_k = rows[rows["protocol"] == protocol]
        for method in methods:
            mine = of_k[of_k["method"] == method]
            for dataset in datasets:
                values = _by_seed(mine[mine["target"] == dataset], "all")
                records.append(_record(protocol, dataset, dataset, "dataset", method, "accuracy", values, conv))
            seeds = _complete_seeds(mine, datasets, ["all"])
            values = {s: _mean_over(mine, datasets, s, "all") for s in seeds}
            records.append(_record(protocol, "", AVERAGE, "average", method, "accuracy", values, conv,
                                   mean=_mean_of_means(mine, datasets, "all")))
    return records


def shots_label(protocol: str) -> str:
    """'1 shot', '4 shots': the column name of a few_shot_<K> protocol."""
    k = shots_of(protocol)
    return f"{k} shot{'s' if k != 1 else ''}"


def few_shot_protocols(protocols) -> list[str]:
    """The few_shot_<K> protocols among `protocols`, by K."""
    return sorted({p for p in protocols if shots_of(p) is not None}, key=shots_of)


def transfer_targets(targets, source: str) -> list[str]:
    """Targets of a transfer table, sorted, the source itself left out."""
    return sorted(set(targets) - {source})


def _by_seed(rows: pd.DataFrame, metric: str) -> dict[int, float]:
    """{seed: value} of one cell, missing seeds and NaN values left out."""
    return {int(seed): float(value) for seed, value in zip(rows["seed"], rows[metric]) if not np.isnan(value)}


def _mean_of_means(mine: pd.DataFrame, datasets: list[str], metric: str) -> float:
    """Mean over datasets of each dataset's mean over its seeds; NaN if a dataset has none."""
    means = [np.mean(list(v.values())) if (v := _by_seed(mine[mine["target"] == d], metric)) else np.nan
             for d in datasets]
    return float(np.mean(means)) if means and not np.isnan(means).any() else np.nan


def _complete_seeds(mine: pd.DataFrame, datasets: list[str], metrics: list[str]) -> list[int]:
    """Seeds with a value for every dataset and metric."""
    if not datasets:
        return []
    sets = [set(_by_seed(mine[mine["target"] == d], m)) for d in datasets for m in metrics]
    return sorted(set.intersection(*sets))


def _mean_over(mine: pd.DataFrame, datasets: list[str], seed: int, metric: str) -> float:
    return float(np.mean([_by_seed(mine[mine["target"] == d], metric)[seed] for d in datasets]))


def _record(protocol: str, source: str, dataset: str, row: str, method: str, metric: str,
            values: dict[int, float], conv: Conventions, mean: float | None = None) -> dict:
    seeds = sorted(values)
    array = np.array([values[s] for s in seeds], dtype=float)
    if mean is None:
        mean = float(array.mean()) if len(array) else np.nan
    std = float(array.std(ddof=conv.ddof)) if len(array) > conv.ddof else np.nan
    low, high = stats.seed_interval(array, conv.confidence, center=mean) if not np.isnan(mean) else (np.nan, np.nan)
    missing = sorted(set(conv.seeds) - set(seeds))
    return {
        "protocol": protocol, "source": source, "dataset": dataset, "row": row, "method": method,
        "metric": metric, "mean": mean, "std": std, "ci_low": low, "ci_high": high, "n_seeds": len(seeds),
        "seeds": ";".join(map(str, seeds)), "missing_seeds": ";".join(map(str, missing)),
        "std_warning": bool(row == "dataset" and not np.isnan(std) and std > conv.std_warning),
        "values": values,
    }


# --- per-stream accuracy ------------------------------------------------------------

STREAM_COLUMNS = ["dataset", "method", "stream", "split", "mean", "std", "ci_low", "ci_high", "n_seeds"]


def stream_accuracy(per_seed_streams: pd.DataFrame, conv: Conventions) -> pd.DataFrame:
    """Each stream's own base / novel accuracy (mean, std, interval over seeds) per base-to-novel dataset and method."""
    rows = per_seed_streams[(per_seed_streams["protocol"] == "base_to_novel")
                            & ~per_seed_streams["stream"].isin([OUTPUT, FUSED])]
    records = []
    for (dataset, method, stream), mine in rows.groupby(["target", "method", "stream"], sort=False):
        for split in ("base", "novel"):
            values = mine[split].dropna().to_numpy(float)
            low, high = stats.seed_interval(values, conv.confidence)
            records.append({"dataset": dataset, "method": method, "stream": stream, "split": split,
                            "mean": float(values.mean()) if len(values) else np.nan,
                            "std": float(values.std(ddof=conv.ddof)) if len(values) > conv.ddof else np.nan,
                            "ci_low": low, "ci_high": high, "n_seeds": len(values)})
    return pd.DataFrame(records, columns=STREAM_COLUMNS)


# --- unseen classes under both inferences (SPEC §6) --------------------------------

INFERENCES = ("cls", FUSED)  # fusion.novel: the CLS stream alone, or the fused logits, on unseen classes


def under_inference(every_stream: pd.DataFrame, inference: str) -> pd.DataFrame:
    """The output rows as `inference` would make them: seen classes unchanged (fused), unseen ones from that stream.

    Seen: base-to-novel base classes, and a transfer model's own source; unseen: novel classes and every other
    target. Only methods that have streams besides CLS (their fusion has something to choose) are kept.
    """
    fusing = set(every_stream.loc[~every_stream["stream"].isin([OUTPUT, FUSED, "cls"]), "method"])
    rows = every_stream[every_stream["method"].isin(fusing)]
    seen = (rows["split"] == "base") | ((rows["protocol"] != "base_to_novel") & (rows["target"] == rows["source"]))
    chosen = rows[((rows["stream"] == OUTPUT) & seen) | ((rows["stream"] == inference) & ~seen)]
    return chosen.assign(stream=OUTPUT)


def both_inferences(every_stream: pd.DataFrame, conv: Conventions) -> pd.DataFrame:
    """`aggregate` of each inference, one frame with an `inference` column first (empty: no fusing method)."""
    frames = []
    for inference in INFERENCES:
        rows = under_inference(every_stream, inference)
        if not rows.empty:
            per_seed = seed_accuracy(rows.drop(columns="stream"))
            listed = Conventions([m for m in conv.methods if m in set(rows["method"])], conv.seeds, conv.ddof,
                                 conv.std_warning, conv.confidence)
            frames.append(aggregate(per_seed, listed).assign(inference=inference))
    if not frames:
        return pd.DataFrame(columns=["inference"] + COLUMNS)
    frame = pd.concat(frames, ignore_index=True)
    return frame[["inference"] + [c for c in frame.columns if c != "inference"]]
