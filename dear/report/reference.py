"""Published numbers of the methods this project runs, each with its source, and their comparison with ours.

The setting they were measured in: OpenAI's ViT-B/16 CLIP, 16 shots per
class, CoOp's datasets and splits, the mean of three seeds of the authors'
runs (RECIPES §8). The report shows them only beside a run in that setting
(`setting_problems` finds none), in a block and a file of their own
(published.csv), never inside a measured table, and never for the embedded
world. Per-dataset base-to-novel numbers come from each method's paper
(its base-to-novel table); the averages from the READMEs that print them;
transfer averages from the papers' cross-dataset and domain-generalization
tables; few-shot averages (per K, over the 11 datasets) where a source gives
them as numbers (CLIP-LoRA's paper; Tip-Adapter's exp.log is RN50's, another
backbone, so it is not here). `None`-free: a number a source does not give is simply absent.
Each row is checked where it can be (`hm_problems`): a published HM that
is not 2BN/(B+N) of its own Base and Novel (to rounding) is flagged in the
report, not silently corrected.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from dear.report.tables import AVERAGE
from dear.scoring.results import few_shot_protocol, harmonic_mean, shots_of

SETTING = (("model", "arch", "ViT-B-16"), ("model", "pretrained", "openai"), ("data", "source", "coop"),
           ("data", "shots", 16))
B2N_DATASETS = ("imagenet", "caltech-101", "oxford_pets", "stanford_cars", "oxford_flowers", "food-101",
                "fgvc_aircraft", "sun397", "dtd", "eurosat", "ucf101")
TRANSFER_SOURCE = "imagenet"
CROSS_TARGETS = B2N_DATASETS[1:]
DOMAIN_TARGETS = ("imagenetv2", "imagenet-sketch", "imagenet-adversarial", "imagenet-rendition")
HM_TOLERANCE = 0.01  # B, N and HM are printed to 0.01: a recomputed HM may differ by rounding alone up to this

PAPERS = {"zeroshot": "CoCoOp paper (CVPR 2022)", "coop": "CoCoOp paper (CVPR 2022)",
          "cocoop": "CoCoOp paper (CVPR 2022)", "kgcoop": "KgCoOp paper (CVPR 2023)",
          "maple": "MaPLe paper (CVPR 2023)", "promptsrc": "PromptSRC paper (ICCV 2023)",
          "mmrl": "MMRL paper (CVPR 2025)", "dear": "DeAR paper (CVPR 2026)"}
AVERAGE_SOURCES = {"zeroshot": "MaPLe and PromptSRC READMEs", "coop": "MaPLe and PromptSRC READMEs",
                   "cocoop": "MaPLe and PromptSRC READMEs", "maple": "MaPLe and PromptSRC READMEs",
                   "promptsrc": "MaPLe and PromptSRC READMEs", "kgcoop": "KgCoOp README",
                   "mmrl": "MMRL paper (CVPR 2025), base-to-novel table"}

# base-to-novel: {method: {dataset | "Average": (Base, Novel, HM)}}
BASE_TO_NOVEL: dict[str, dict[str, tuple[float, float, float]]] = {
    "zeroshot": {
        "Average": (69.34, 74.22, 71.70),
        "imagenet": (72.43, 68.14, 70.22),
        "caltech-101": (96.84, 94.00, 95.40),
        "oxford_pets": (91.17, 97.26, 94.12),
        "stanford_cars": (63.37, 74.89, 68.65),
        "oxford_flowers": (72.08, 77.80, 74.83),
        "food-101": (90.10, 91.22, 90.66),
        "fgvc_aircraft": (27.19, 36.29, 31.09),
        "sun397": (69.36, 75.35, 72.23),
        "dtd": (53.24, 59.90, 56.37),
        "eurosat": (56.48, 64.05, 60.03),
        "ucf101": (70.53, 77.50, 73.85),
    },
    "coop": {
        "Average": (82.69, 63.22, 71.66),
        "imagenet": (76.47, 67.88, 71.92),
        "caltech-101": (98.00, 89.81, 93.73),
        "oxford_pets": (93.67, 95.29, 94.47),
        "stanford_cars": (78.12, 60.40, 68.13),
        "oxford_flowers": (97.60, 59.67, 74.06),
        "food-101": (88.33, 82.26, 85.19),
        "fgvc_aircraft": (40.44, 22.30, 28.75),
        "sun397": (80.60, 65.89, 72.51),
        "dtd": (79.44, 41.18, 54.24),
        "eurosat": (92.19, 54.74, 68.69),
        "ucf101": (84.69, 56.05, 67.46),
    },
    "cocoop": {
        "Average": (80.47, 71.69, 75.83),
        "imagenet": (75.98, 70.43, 73.10),
        "caltech-101": (97.96, 93.81, 95.84),
        "oxford_pets": (95.20, 97.69, 96.43),
        "stanford_cars": (70.49, 73.59, 72.01),
        "oxford_flowers": (94.87, 71.75, 81.71),
        "food-101": (90.70, 91.29, 90.99),
        "fgvc_aircraft": (33.41, 23.71, 27.74),
        "sun397": (79.74, 76.86, 78.27),
        "dtd": (77.01, 56.00, 64.85),
        "eurosat": (87.49, 60.04, 71.21),
        "ucf101": (82.33, 73.45, 77.64),
    },
    "kgcoop": {
        "Average": (80.73, 73.60, 77.00),
        "imagenet": (75.83, 69.96, 72.78),
        "caltech-101": (97.72, 94.39, 96.03),
        "oxford_pets": (94.65, 97.76, 96.18),
        "stanford_cars": (71.76, 75.04, 73.36),
        "oxford_flowers": (95.00, 74.73, 83.65),
        "food-101": (90.50, 91.70, 91.09),
        "fgvc_aircraft": (36.21, 33.55, 34.83),
        "sun397": (80.29, 76.53, 78.36),
        "dtd": (77.55, 54.99, 64.35),
        "eurosat": (85.64, 64.34, 73.48),
        "ucf101": (82.89, 76.67, 79.65),
    },
    "maple": {
        "Average": (82.28, 75.14, 78.55),
        "imagenet": (76.66, 70.54, 73.47),
        "caltech-101": (97.74, 94.36, 96.02),
        "oxford_pets": (95.43, 97.76, 96.58),
        "stanford_cars": (72.94, 74.00, 73.47),
        "oxford_flowers": (95.92, 72.46, 82.56),
        "food-101": (90.71, 92.05, 91.38),
        "fgvc_aircraft": (37.44, 35.61, 36.50),
        "sun397": (80.82, 78.70, 79.75),
        "dtd": (80.36, 59.18, 68.16),
        "eurosat": (94.07, 73.23, 82.35),
        "ucf101": (83.00, 78.66, 80.77),
    },
    "promptsrc": {
        "Average": (84.26, 76.10, 79.97),
        "imagenet": (77.60, 70.73, 74.01),
        "caltech-101": (98.10, 94.03, 96.02),
        "oxford_pets": (95.33, 97.30, 96.30),
        "stanford_cars": (78.27, 74.97, 76.58),
        "oxford_flowers": (98.07, 76.50, 85.95),
        "food-101": (90.67, 91.53, 91.10),
        "fgvc_aircraft": (42.73, 37.87, 40.15),
        "sun397": (82.67, 78.47, 80.52),
        "dtd": (83.37, 62.97, 71.75),
        "eurosat": (92.90, 73.90, 82.32),
        "ucf101": (87.10, 78.80, 82.74),
    },
    "mmrl": {
        "Average": (85.68, 77.16, 81.20),
        "imagenet": (77.90, 71.30, 74.45),
        "caltech-101": (98.97, 94.50, 96.68),
        "oxford_pets": (95.90, 97.60, 96.74),
        "stanford_cars": (81.30, 75.07, 78.06),
        "oxford_flowers": (98.97, 77.27, 86.78),
        "food-101": (90.57, 91.50, 91.03),
        "fgvc_aircraft": (46.30, 37.03, 41.15),
        "sun397": (83.20, 79.30, 81.20),
        "dtd": (85.67, 65.00, 73.82),
        "eurosat": (95.60, 80.17, 87.21),
        "ucf101": (88.10, 80.07, 83.89),
    },
}
# single base-to-novel averages where a source gives one metric only: {method: (metric, value, source)}
AVERAGE_ONLY = {
    "dear": ("base", 85.94, "DeAR paper (CVPR 2026)"),  # its average Base accuracy only (SPEC §9)
    "tac": ("hm", 81.24, "TAC paper (CVPR 2025), base-to-novel Average HM, as issue 38 quotes it (FushengHao/TAC's "
                         "README gives no numbers; the paper's table was not readable here)"),
}
# transfer: the average over the targets, from ImageNet
CROSS_DATASET = {"coop": 63.88, "cocoop": 65.74, "kgcoop": 65.51, "maple": 66.30, "promptsrc": 65.81, "mmrl": 67.25}
DOMAIN_GENERALIZATION = {"zeroshot": 57.18, "coop": 59.28, "cocoop": 59.91, "kgcoop": 60.12, "maple": 60.28,
                         "promptsrc": 60.65, "mmrl": 60.59}
# few-shot learning: the average over the 11 datasets per shot count K (ViT-B/16, CoOp's datasets and splits)
FEW_SHOT = {"clip_lora": {1: 72.5, 2: 75.4, 4: 77.4, 8: 80.3, 16: 83.0}}
FEW_SHOT_SOURCES = {"clip_lora": "CLIP-LoRA paper (CVPRW 2024, arXiv 2405.18541), few-shot table, ViT-B/16 Average, "
                                 "as issue 38 quotes it (the README shows it only as a figure, few_shot.png)"}

COLUMNS = ["protocol", "source", "dataset", "method", "metric", "published", "ours", "difference", "ci_low",
           "ci_high", "inside", "n_seeds", "published_source", "flag"]


def setting_problems(params) -> list[str]:
    """Why this run's numbers cannot stand beside the published ones ([] when they can)."""
    found = []
    for section, key, value in SETTING:
        mine = getattr(getattr(params, section), key)
        if mine != value:
            found.append(f"{section}.{key} is {mine!r}, not {value!r}")
    return found


def published() -> pd.DataFrame:
    """Every published number: protocol, source, dataset, method, metric, value, its source, and a flag."""
    records = []
    for method, rows in BASE_TO_NOVEL.items():
        for dataset, values in rows.items():
            where = AVERAGE_SOURCES[method] if dataset == AVERAGE else f"{PAPERS[method]}, base-to-novel table"
            flag = _hm_flag(*values)
            for metric, value in zip(("base", "novel", "hm"), values):
                records.append(("base_to_novel", "" if dataset == AVERAGE else dataset, dataset, method, metric, value,
                                where, flag if metric == "hm" else ""))
    for method, (metric, value, where) in AVERAGE_ONLY.items():
        records.append(("base_to_novel", "", AVERAGE, method, metric, value, where, ""))
    for protocol, values, table in (("cross_dataset", CROSS_DATASET, "cross-dataset table"),
                                    ("domain_generalization", DOMAIN_GENERALIZATION, "domain-generalization table")):
        for method, value in values.items():
            records.append((protocol, TRANSFER_SOURCE, AVERAGE, method, "accuracy", value, f"{PAPERS[method]}, {table}",
                            ""))
    for method, by_k in FEW_SHOT.items():
        for k, value in by_k.items():
            records.append((few_shot_protocol(k), "", AVERAGE, method, "accuracy", value, FEW_SHOT_SOURCES[method], ""))
    return pd.DataFrame(records, columns=["protocol", "source", "dataset", "method", "metric", "value",
                                          "published_source", "flag"])


def _hm_flag(base: float, novel: float, hm: float) -> str:
    recomputed = float(harmonic_mean(base, novel))
    if abs(recomputed - hm) <= HM_TOLERANCE:
        return ""
    return f"published HM {hm:.2f} is not 2BN/(B+N) = {recomputed:.2f} of its own Base and Novel"


def hm_problems() -> list[tuple[str, str, str]]:
    """(method, dataset, why) of every published row whose HM does not follow from its Base and Novel."""
    return [(method, dataset, flag) for method, rows in BASE_TO_NOVEL.items() for dataset, values in rows.items()
            if (flag := _hm_flag(*values))]


def beside(results: pd.DataFrame) -> pd.DataFrame:
    """Each published number with ours for the same method, dataset and metric (COLUMNS).

    An Average is compared only when ours covers the published datasets
    (targets) exactly. `inside`: the published value lies in our interval
    over seeds (report.confidence).
    """
    ours = results[(results["row"] == "dataset") | _comparable_averages(results)]
    merged = published().merge(ours, on=["protocol", "source", "dataset", "method", "metric"], how="inner")
    merged = merged[merged["mean"].notna()]
    frame = pd.DataFrame({
        "protocol": merged["protocol"], "source": merged["source"], "dataset": merged["dataset"],
        "method": merged["method"], "metric": merged["metric"], "published": merged["value"], "ours": merged["mean"],
        "difference": merged["mean"] - merged["value"], "ci_low": merged["ci_low"], "ci_high": merged["ci_high"],
        "inside": [None if np.isnan(low) else bool(low <= value <= high)  # one seed: no interval to lie in
                   for low, value, high in zip(merged["ci_low"], merged["value"], merged["ci_high"])],
        "n_seeds": merged["n_seeds"], "published_source": merged["published_source"], "flag": merged["flag"]})
    return frame[COLUMNS].reset_index(drop=True)


def _comparable_averages(results: pd.DataFrame) -> pd.Series:
    """The Average rows whose datasets (targets) are exactly the published ones."""
    expected = {"base_to_novel": ("", set(B2N_DATASETS)), "cross_dataset": (TRANSFER_SOURCE, set(CROSS_TARGETS)),
                "domain_generalization": (TRANSFER_SOURCE, set(DOMAIN_TARGETS))}
    keep = pd.Series(False, index=results.index)
    expected.update({protocol: ("", set(B2N_DATASETS)) for protocol in set(results["protocol"])
                     if shots_of(protocol) is not None})  # few-shot: the 11 datasets at every K
    for protocol, (source, datasets) in expected.items():
        rows = results[(results["protocol"] == protocol) & (results["row"] == "dataset")]
        if protocol != "base_to_novel" and shots_of(protocol) is None:
            rows = rows[rows["source"] == source]
        if set(rows["dataset"]) - {source} == datasets:
            keep |= (results["protocol"] == protocol) & (results["source"] == source) & (results["row"] == "average")
    return keep
