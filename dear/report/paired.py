"""Paired differences: one method against another on the same seeds and the same test images.

For every pair (`report.compare` against each other method), every
protocol, every dataset (target) and the Average of each table: the
per-seed differences of the reported numbers, their mean ± std, a t-interval
over the seeds both methods have (`stats.seed_interval`), a paired bootstrap
interval over the test images (`stats.image_interval`) and a verdict.
Every number is recomputed from the per-image hits of eval.parquet, so the
per-seed values are exactly the counts-based accuracies of the tables:

- base-to-novel, one dataset: Base, Novel, and HM = 2BN/(B+N) of that seed;
- base-to-novel Average: Base and Novel averaged over the datasets, HM of
  those two averages (per seed, as the Average row);
- cross-dataset / domain generalization: accuracy on each target (the source
  too), and the Average over the targets without the source;
- few-shot learning, per shot count: accuracy on each dataset, and the
  Average over the datasets.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from dear.errors import DearError
from dear.report import stats
from dear.report.tables import AVERAGE, B2N_METRICS, few_shot_protocols, transfer_targets
from dear.scoring.results import harmonic_mean, shots_of

COLUMNS = ["protocol", "source", "dataset", "method", "baseline", "metric", "mean", "std", "n_seeds", "seeds",
           "seed_low", "seed_high", "image_low", "image_high", "verdict"]
SplitKey = tuple[str, str, str, str]  # protocol, source, target, split


@dataclass(frozen=True)
class Options:
    confidence: float  # of every interval (report.confidence)
    resamples: int     # bootstrap resamples of the test images (report.bootstrap_resamples)
    ddof: int          # of the std over seeds (report.std_ddof)


class Hits:
    """The per-image hits of the output stream: {(method, seed, protocol, source, target, split): [n] bool}."""

    def __init__(self, evals: pd.DataFrame):
        self.arrays: dict[tuple, np.ndarray] = {}
        self.totals: dict[tuple, tuple[int, ...]] = {}
        key = ["method", "seed", "protocol", "source", "target", "split"]
        for values, rows in evals.groupby(key, sort=True):  # rows are in label order (read_evals sorts)
            values = (values[0], int(values[1]), *values[2:])
            self.arrays[values] = np.concatenate([np.asarray(hits, dtype=bool) for hits in rows["hits"]])
            self.totals[values] = tuple(zip(rows["label"].tolist(), rows["total"].tolist()))

    def seeds(self, method: str, splits: list[SplitKey]) -> set[int]:
        """Seeds of `method` holding every split of `splits`."""
        sets = [{key[1] for key in self.arrays if key[0] == method and key[2:] == split} for split in splits]
        return set.intersection(*sets) if sets else set()

    def paired(self, method: str, baseline: str, seeds: list[int], split: SplitKey) -> np.ndarray:
        """[2, S, n]: the method's and the baseline's hits on the same images, per seed."""
        keys = [(name, seed, *split) for name in (method, baseline) for seed in seeds]
        if len({self.totals[key] for key in keys}) != 1:
            raise DearError(f"eval tables of {method} and {baseline} ({split[0]} {split[2]} {split[3]}) hold "
                            "different test images per class; evaluate both on the same prepared data")
        return np.stack([self.arrays[key] for key in keys]).reshape(2, len(seeds), -1)


def differences(evals: pd.DataFrame, pairs: list[tuple[str, str]], options: Options) -> pd.DataFrame:
    """Every paired difference of the report (COLUMNS), from the output rows of the eval tables."""
    hits = Hits(evals)
    records = []
    for method, baseline in pairs:
        for cell in _cells(evals):
            records += _compare(hits, method, baseline, cell, options)
    return pd.DataFrame(records, columns=COLUMNS)


@dataclass(frozen=True)
class Cell:
    protocol: str
    source: str
    dataset: str             # a dataset, a target, or AVERAGE
    splits: list[SplitKey]   # the test splits its numbers are made of
    metrics: tuple[str, ...]


def _cells(evals: pd.DataFrame) -> list[Cell]:
    cells = []
    b2n = evals[evals["protocol"] == "base_to_novel"]
    datasets = sorted(b2n["target"].unique())
    for dataset in datasets:
        cells.append(Cell("base_to_novel", dataset, dataset, _b2n_splits([dataset]), B2N_METRICS))
    if datasets:
        cells.append(Cell("base_to_novel", "", AVERAGE, _b2n_splits(datasets), B2N_METRICS))
    for protocol in ("cross_dataset", "domain_generalization"):
        rows = evals[evals["protocol"] == protocol]
        for source in sorted(rows["source"].unique()):
            found = set(rows.loc[rows["source"] == source, "target"])
            targets = transfer_targets(found, source)
            for target in ([source] if source in found else []) + targets:
                cells.append(Cell(protocol, source, target, [(protocol, source, target, "all")], ("accuracy",)))
            if targets:
                cells.append(Cell(protocol, source, AVERAGE, [(protocol, source, t, "all") for t in targets],
                                  ("accuracy",)))
    few = evals[evals["protocol"].map(shots_of).notna()]
    datasets = sorted(few["target"].unique())  # every K averages the same datasets (tables.few_shot)
    for protocol in few_shot_protocols(few["protocol"]):
        for dataset in sorted(few.loc[few["protocol"] == protocol, "target"].unique()):
            cells.append(Cell(protocol, dataset, dataset, [(protocol, dataset, dataset, "all")], ("accuracy",)))
        cells.append(Cell(protocol, "", AVERAGE, [(protocol, d, d, "all") for d in datasets], ("accuracy",)))
    return cells


def _b2n_splits(datasets: list[str]) -> list[SplitKey]:
    """Base splits of `datasets`, then their novel splits."""
    return [("base_to_novel", d, d, split) for split in ("base", "novel") for d in datasets]


def _metrics(cell: Cell):
    """Per-split accuracies [2, S, ...] -> the cell's numbers [M, 2, S, ...] (see the module docstring)."""
    if len(cell.metrics) == 1:  # accuracy, or Base alone: the mean over the cell's splits
        return lambda accuracy: np.mean(accuracy, axis=0)[None]
    half = len(cell.splits) // 2

    def base_novel_hm(accuracy: list[np.ndarray]) -> np.ndarray:
        base, novel = np.mean(accuracy[:half], axis=0), np.mean(accuracy[half:], axis=0)
        return np.stack([base, novel, harmonic_mean(base, novel)])
    return base_novel_hm


def _compare(hits: Hits, method: str, baseline: str, cell: Cell, options: Options) -> list[dict]:
    seeds = sorted(hits.seeds(method, cell.splits) & hits.seeds(baseline, cell.splits))
    if not seeds and cell.metrics == B2N_METRICS:  # one of them has no novel classes (a linear probe): Base alone
        base = Cell(cell.protocol, cell.source, cell.dataset, cell.splits[:len(cell.splits) // 2], ("base",))
        if hits.seeds(method, base.splits) & hits.seeds(baseline, base.splits):
            rest = _compare(hits, method, baseline, Cell(cell.protocol, cell.source, cell.dataset, [],
                                                         ("novel", "hm")), options)
            return _compare(hits, method, baseline, base, options) + rest
    head = {"protocol": cell.protocol, "source": cell.source, "dataset": cell.dataset, "method": method,
            "baseline": baseline, "n_seeds": len(seeds), "seeds": ";".join(map(str, seeds))}
    if not seeds:
        return [{**head, "metric": metric, "mean": np.nan, "std": np.nan, "seed_low": np.nan, "seed_high": np.nan,
                 "image_low": np.nan, "image_high": np.nan, "verdict": "missing"} for metric in cell.metrics]
    paired = [hits.paired(method, baseline, seeds, split) for split in cell.splits]   # each [2, S, n]
    metrics = _metrics(cell)
    values = metrics([100.0 * split.mean(axis=-1) for split in paired])             # [M, 2, S]
    per_seed = values[:, 0] - values[:, 1]                                           # [M, S]
    low, high = stats.image_interval(paired, metrics, options.confidence, options.resamples)
    records = []
    for index, metric in enumerate(cell.metrics):
        diffs = per_seed[index]
        seed_ci = stats.seed_interval(diffs, options.confidence)
        image_ci = (float(low[index]), float(high[index]))
        records.append({**head, "metric": metric, "mean": float(diffs.mean()),
                        "std": float(diffs.std(ddof=options.ddof)) if len(diffs) > options.ddof else np.nan,
                        "seed_low": seed_ci[0], "seed_high": seed_ci[1], "image_low": image_ci[0],
                        "image_high": image_ci[1], "verdict": stats.verdict(seed_ci, image_ci)})
    return records
