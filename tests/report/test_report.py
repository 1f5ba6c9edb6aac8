"""`dear report`: hand-made eval tables in, the hand-computed paper tables out.

The world below: methods zeroshot, coop and dear (dear_nomask is listed in
params but has no eval table), seeds 1-3 expected. Every split has 4 classes
of 25 test images, so `correct` out of 100 is the accuracy in percent.
coop's base-to-novel seed 3 is missing, and so is dear's cross-dataset seed 3
on dsC. All expected numbers below are worked out by hand in the comments.
"""

import io
import json
import shutil
import subprocess
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml
from PIL import Image
from typer.testing import CliRunner

from dear.cli import app
from dear.errors import DearError
from dear.report import reference
from dear.scoring.results import EVAL_SCHEMA, write_eval

ROOT = Path(__file__).resolve().parents[2]
SEEDS = (1, 2, 3)

# base-to-novel: {(method, dataset): {seed: (base %, novel %)}}
B2N = {
    ("zeroshot", "dsA"): {s: (70, 75) for s in SEEDS},
    ("coop", "dsA"): {1: (90, 50), 2: (80, 60)},                      # seed 3 missing
    ("dear", "dsA"): {1: (80, 60), 2: (85, 60), 3: (90, 60)},
    ("zeroshot", "dsB"): {s: (60, 65) for s in SEEDS},
    ("coop", "dsB"): {s: (80, 40) for s in SEEDS},
    ("dear", "dsB"): {s: (85, 55) for s in SEEDS},
}
# transfer protocols from dsA: {(protocol, method): {seed: {target: %}}}
TRANSFER = {
    ("cross_dataset", "zeroshot"): {s: {"dsA": 72, "dsB": 62, "dsC": 50} for s in SEEDS},
    ("cross_dataset", "coop"): {s: {"dsA": 90, "dsB": 55, "dsC": 45} for s in SEEDS},
    ("cross_dataset", "dear"): {1: {"dsA": 88, "dsB": 60, "dsC": 52}, 2: {"dsA": 88, "dsB": 60, "dsC": 54},
                                3: {"dsA": 88, "dsB": 60}},                       # dsC seed 3 missing
    ("domain_generalization", "zeroshot"): {s: {"dsA_sketch": 40} for s in SEEDS},
    ("domain_generalization", "coop"): {s: {"dsA_sketch": 35} for s in SEEDS},
    ("domain_generalization", "dear"): {s: {"dsA_sketch": 42} for s in SEEDS},
}

# Every ± is the half-width of the 95% t-interval over seeds, std * t/sqrt(n): t(0.975, 2) = 4.302653 and
# t(0.975, 1) = 12.706205, so ± = 2.484138 * std with 3 seeds and 8.984644 * std with 2 (the stds are worked out below).
EXPECTED_AVERAGE = """\
| Method | Base | Novel | HM | n |
| --- | --- | --- | --- | --- |
| zeroshot | 65.00 ± 0.00 | **70.00 ± 0.00** | 67.41 ± 0.00 | 3 |
| coop | 82.50 ± 31.77 | 47.50 ± 31.77 | 60.29 ± 17.10 | 2 (no seed 3) |
| dear_nomask | — | — | — | 0 |
| dear | **85.00 ± 6.21** | 57.50 ± 0.00 | **68.60 ± 2.02** | 3 |
"""
EXPECTED_DSA = """\
| Method | Base | Novel | HM | n |
| --- | --- | --- | --- | --- |
| zeroshot | 70.00 ± 0.00 | **75.00 ± 0.00** | **72.41 ± 0.00** | 3 |
| coop | **85.00 ± 63.53** | 55.00 ± 63.53 | 66.79 ± 27.23 | 2 (no seed 3) |
| dear_nomask | — | — | — | 0 |
| dear | **85.00 ± 12.42** | 60.00 ± 0.00 | 70.34 ± 4.26 | 3 |
"""
EXPECTED_DSB = """\
| Method | Base | Novel | HM | n |
| --- | --- | --- | --- | --- |
| zeroshot | 60.00 ± 0.00 | **65.00 ± 0.00** | 62.40 ± 0.00 | 3 |
| coop | 80.00 ± 0.00 | 40.00 ± 0.00 | 53.33 ± 0.00 | 3 |
| dear_nomask | — | — | — | 0 |
| dear | **85.00 ± 0.00** | 55.00 ± 0.00 | **66.79 ± 0.00** | 3 |
"""
# By hand:
# A dataset's HM is the HM of its seed-averaged Base and Novel (the papers' convention); its ± is the std of
# the per-seed HMs. dsA coop: HM(85, 55) = 9350/140 = 66.79; per seed 2*90*50/140 = 64.286, 2*80*60/140 = 68.571
#   -> std 4.286/sqrt(2) = 3.03 (± 27.23). dsA dear: HM(85, 60) = 10200/145 = 70.34; per seed 68.571, 70.345, 72
#   -> std 1.71 (± 4.26). dsA coop Base 90, 80: std 7.07 (± 63.53); dear Base 80, 85, 90: std 5.00 (± 12.42).
# Average dear: Base (85+85)/2 = 85, Novel (60+55)/2 = 57.5, HM of those = 9775/142.5 = 68.60
#   per-seed averages: Base 82.5, 85, 87.5 (std 2.50, ± 6.21); HM 67.768, 68.596, 69.397 (std 0.81, ± 2.02)
# Average coop: only seeds 1, 2 are in both datasets: Base 85, 80; Novel 45, 50 (std 3.54 each);
#   mean Base (85 + 80)/2 = 82.5 and Novel (55+40)/2 = 47.5 -> HM 7837.5/130 = 60.29;
#   per-seed HM 2*85*45/130 = 58.846, 2*80*50/130 = 61.538 -> std 1.90 (± 17.10); Base and Novel std 3.54 (± 31.77)
# Bold: the best mean of each column (dsA Base: coop and dear tie at 85).

# dear - coop per seed (seeds 1, 2 only: coop has no seed 3):
# dsA Base -10, +5 -> -2.50 ± 10.61; Novel +10, 0 -> +5.00 ± 7.07; HM 68.571-64.286, 70.345-68.571 -> +3.03 ± 1.78
# Average Base 82.5-85, 85-80 -> +1.25 ± 5.30; Novel 57.5-45, 57.5-50 -> +10.00 ± 3.54;
#   HM 67.768-58.846, 68.596-61.538 -> +7.99 ± 1.32
EXPECTED_DIFFERENCES = {("dsA", "base"): (-2.5, 10.6066), ("dsA", "novel"): (5.0, 7.0711),
                        ("dsA", "hm"): (3.0296, 1.7765), ("Average", "base"): (1.25, 5.3033),
                        ("Average", "novel"): (10.0, 3.5355), ("Average", "hm"): (7.9899, 1.3178)}

EXPECTED_CROSS = """\
| Method | dsA (source) | dsB | dsC | Average of targets | n |
| --- | --- | --- | --- | --- | --- |
| zeroshot | 72.00 ± 0.00 | **62.00 ± 0.00** | 50.00 ± 0.00 | 56.00 ± 0.00 | 3 |
| coop | **90.00 ± 0.00** | 55.00 ± 0.00 | 45.00 ± 0.00 | 50.00 ± 0.00 | 3 |
| dear_nomask | — | — | — | — | 0 |
| dear | 88.00 ± 0.00 | 60.00 ± 0.00 | **53.00 ± 12.71** | **56.50 ± 6.35** | 2–3 (no seed 3) |
"""
# dear dsC: 52, 54 -> 53, std 1.41 (± 12.71); its average (60 + 53)/2 = 56.5; per-seed averages 56, 57 -> std 0.71
# (± 6.35)

EXPECTED_DG = """\
| Method | dsA_sketch | Average of targets | n |
| --- | --- | --- | --- |
| zeroshot | 40.00 ± 0.00 | 40.00 ± 0.00 | 3 |
| coop | 35.00 ± 0.00 | 35.00 ± 0.00 | 3 |
| dear_nomask | — | — | 0 |
| dear | **42.00 ± 0.00** | **42.00 ± 0.00** | 3 |
"""

EXPECTED_METRICS = {
    "base_to_novel": {
        "zeroshot": {"base": 65.0, "novel": 70.0, "hm": 67.4074, "seeds": 3},      # 9100/135
        "coop": {"base": 82.5, "novel": 47.5, "hm": 60.2885, "seeds": 2},          # 7837.5/130
        "dear_nomask": {"base": None, "novel": None, "hm": None, "seeds": 0},
        "dear": {"base": 85.0, "novel": 57.5, "hm": 68.5965, "seeds": 3},          # 9775/142.5
    },
    "cross_dataset": {
        "zeroshot": {"dsA": {"source": 72.0, "average": 56.0, "seeds": 3}},
        "coop": {"dsA": {"source": 90.0, "average": 50.0, "seeds": 3}},
        "dear_nomask": {"dsA": {"source": None, "average": None, "seeds": 0}},
        "dear": {"dsA": {"source": 88.0, "average": 56.5, "seeds": 2}},
    },
    "domain_generalization": {
        "zeroshot": {"dsA": {"source": None, "average": 40.0, "seeds": 3}},
        "coop": {"dsA": {"source": None, "average": 35.0, "seeds": 3}},
        "dear_nomask": {"dsA": {"source": None, "average": None, "seeds": 0}},
        "dear": {"dsA": {"source": None, "average": 42.0, "seeds": 3}},
    },
    # dear - zeroshot on the Average: Base 85 - 65, Novel 57.5 - 70, HM mean(67.7679, 68.5965, 69.3966) - 67.4074
    "differences": {"dear_minus_zeroshot": {"base": 20.0, "novel": -12.5, "hm": 1.1796},
                    "dear_minus_coop": {"base": 1.25, "novel": 10.0, "hm": 7.9899},
                    "dear_minus_dear_nomask": {"base": None, "novel": None, "hm": None}},
}


def split_rows(method, source, seed, protocol, target, split, percent, first_label=0):
    """4 classes x 25 images with `percent` correct in all (spread over the classes)."""
    correct = [percent // 4 + (index < percent % 4) for index in range(4)]
    return [dict(method=method, source=source, seed=seed, protocol=protocol, target=target, split=split, stream="output",
                 label=first_label + index, classname=f"class{first_label + index}", correct=c, total=25,
                 hits=[True] * c + [False] * (25 - c))
            for index, c in enumerate(correct)]


def make_world(root: Path) -> list[Path]:
    """Write the eval.parquet files of the world above; returns their paths."""
    runs: dict[tuple, list] = {}
    for (method, dataset), by_seed in B2N.items():
        for seed, (base, novel) in by_seed.items():
            rows = runs.setdefault((method, dataset, seed), [])
            rows += split_rows(method, dataset, seed, "base_to_novel", dataset, "base", base)
            rows += split_rows(method, dataset, seed, "base_to_novel", dataset, "novel", novel, first_label=4)
    for (protocol, method), by_seed in TRANSFER.items():
        for seed, by_target in by_seed.items():
            for target, percent in by_target.items():
                rows = runs.setdefault((method, "dsA", seed), [])
                rows += split_rows(method, "dsA", seed, protocol, target, "all", percent)
    paths = []
    for (method, dataset, seed), rows in sorted(runs.items()):
        paths.append(root / "runs" / method / dataset / f"seed{seed}" / "eval.parquet")
        write_eval(paths[-1], rows, provenance={"seed": seed})
    return paths


def make_train_logs(root: Path) -> list[Path]:
    """dear logs its four loss terms and alpha; coop only cross-entropy, plus an unknown column."""
    paths = []
    for method, seed, terms in (("dear", 1, ["loss_ce", "loss_img", "loss_txt", "loss_fus"]),
                                ("dear", 2, ["loss_ce", "loss_img", "loss_txt", "loss_fus"]),
                                ("coop", 1, ["loss_ce"])):
        steps = list(range(12))
        table = {"step": steps, "epoch": [s // 4 for s in steps], "loss": [3.0 / (1 + s + seed) for s in steps],
                 "lr": [1.0e-3] * 12, "seconds": [0.1 * s for s in steps]}
        table.update({term: [1.0 / (1 + s) for s in steps] for term in terms})
        table["alpha_0" if method == "dear" else "extra_column"] = [0.7] * 12
        paths.append(root / "runs" / method / "dsA" / f"seed{seed}" / "train_log.parquet")
        paths[-1].parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(pa.table(table), paths[-1])
    return paths


def make_heatmap(root: Path, dataset: str) -> Path:
    path = root / "roles" / dataset / "heatmap.png"
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.new("RGB", (8, 6), (200, 30, 30)).save(path)
    return path


def write_params(root: Path, **report) -> Path:
    params = yaml.safe_load((ROOT / "params.yaml").read_text())
    params["data"]["seeds"] = list(SEEDS)
    params["report"].update(methods=["zeroshot", "coop", "dear_nomask", "dear"], std_ddof=1, std_warning=2.0,
                            decimals=2, reference=True, loss_smoothing=3, dpi=50, compare="dear", confidence=0.95,
                            bootstrap_resamples=1000)
    params["report"].update(report)
    params["study"]["methods"] = params["report"]["methods"]  # the report shows the study's methods (dear check)
    path = root / f"params-{len(list(root.glob('params-*')))}.yaml"
    path.write_text(yaml.safe_dump(params, sort_keys=False))
    return path


def invoke(params: Path, out: Path, evals, logs=(), roles=()):
    args = ["report", "--params", str(params), "--out", str(out), "--evals", *map(str, evals)]
    if logs:
        args += ["--train-logs", *map(str, logs)]
    if roles:
        args += ["--roles", *map(str, roles)]
    return CliRunner().invoke(app, args)


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    root = tmp_path_factory.mktemp("world")
    evals, logs, roles = make_world(root), make_train_logs(root), [make_heatmap(root, "dsA")]
    params = write_params(root)
    result = invoke(params, root / "report", evals, logs, roles)
    assert result.exit_code == 0, result.output
    return {"root": root, "evals": evals, "logs": logs, "roles": roles, "params": params, "out": root / "report"}


def table_after(markdown: str, heading: str) -> str:
    """The first markdown table after `heading`."""
    section = markdown.split(heading, 1)[1]
    lines = section.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("|"))
    end = next((i for i in range(start, len(lines)) if not lines[i].startswith("|")), len(lines))
    return "\n".join(lines[start:end]) + "\n"


def test_report_matches_the_hand_computed_tables(world):
    markdown = (world["out"] / "results.md").read_text()
    assert table_after(markdown, "### Average over 2 datasets") == EXPECTED_AVERAGE
    assert markdown.index("### Average over 2 datasets") < markdown.index("### dsA")  # the average first
    assert table_after(markdown, "### dsA") == EXPECTED_DSA
    assert table_after(markdown, "### dsB") == EXPECTED_DSB
    assert table_after(markdown, "## Cross-dataset") == EXPECTED_CROSS
    assert table_after(markdown, "## Domain generalization") == EXPECTED_DG
    assert "HM is the HM of those two averages (the papers' convention)" in markdown


def test_paired_differences_are_per_seed_on_the_seeds_both_methods_have(world):
    frame = pd.read_csv(world["out"] / "differences.csv", keep_default_na=False, na_values=[""])
    # report.compare: dear against every other method, listed (dear_nomask: no eval table) or found
    assert list(dict.fromkeys(zip(frame["method"], frame["baseline"]))) == [
        ("dear", "zeroshot"), ("dear", "coop"), ("dear", "dear_nomask")]
    coop = frame[(frame["baseline"] == "coop") & (frame["protocol"] == "base_to_novel")]
    for (dataset, metric), (mean, std) in EXPECTED_DIFFERENCES.items():
        row = coop[(coop["dataset"] == dataset) & (coop["metric"] == metric)].iloc[0]
        assert (row["mean"], row["std"], row["seeds"]) == (pytest.approx(mean, abs=1e-4), pytest.approx(std, abs=1e-4),
                                                           "1;2")
        # paired t over the 2 seeds: mean ± t(0.975, 1) * std / sqrt(2)
        half = 12.706205 * std / 2 ** 0.5
        assert (row["seed_low"], row["seed_high"]) == (pytest.approx(mean - half, abs=1e-3),
                                                       pytest.approx(mean + half, abs=1e-3))
        assert row["image_low"] < mean < row["image_high"]
        assert row["verdict"] == "within noise"  # the 2-seed t-interval holds 0 every time
    # dsB: dear beats coop by 5 base points on every seed (seed interval [5, 5]), by 20 of 100 images each seed
    dsb = coop[(coop["dataset"] == "dsB") & (coop["metric"] == "base")].iloc[0]
    assert (dsb["seed_low"], dsb["seed_high"], dsb["verdict"]) == (5.0, 5.0, "better") and dsb["image_low"] > 0
    nomask = frame[frame["baseline"] == "dear_nomask"]
    assert nomask["mean"].isna().all() and set(nomask["verdict"]) == {"missing"} and (nomask["n_seeds"] == 0).all()
    transfer = frame[(frame["baseline"] == "coop") & (frame["protocol"] == "cross_dataset")]
    # cross-dataset Average of targets: dear (60+52)/2, (60+54)/2 against coop 50 on seeds 1, 2 -> +6, +7
    average = transfer[transfer["dataset"] == "Average"].iloc[0]
    assert (average["mean"], average["seeds"]) == (pytest.approx(6.5), "1;2")
    markdown = (world["out"] / "results.md").read_text()
    averages = table_after(markdown, "### Averages")
    assert ("| dear − coop | base-to-novel | HM | +7.99 | [-3.85, +19.83] | [+5.19, +10.92] | *within noise* | 2 |"
            in averages)
    assert "| dear − dear_nomask | base-to-novel | HM | — | [—] | [—] | *missing* | 0 |" in averages
    per_pair = table_after(markdown, "### dear − coop")
    assert "| dsB | +5.00 [+5.00, +5.00] [+1.00, +9.02] **better** |" in per_pair
    assert "No seed holds both dear and dear_nomask." in markdown


def test_metrics_json_holds_the_averages_with_missing_as_null(world):
    assert json.loads((world["out"] / "metrics.json").read_text()) == EXPECTED_METRICS


def test_results_csv_keeps_missing_seeds_and_methods_missing_not_zero(world):
    csv = pd.read_csv(world["out"] / "results.csv", keep_default_na=False, na_values=[""])
    coop_dsa = csv[(csv["protocol"] == "base_to_novel") & (csv["dataset"] == "dsA") & (csv["method"] == "coop")]
    assert set(coop_dsa["n_seeds"]) == {2} and set(coop_dsa["missing_seeds"].astype(str)) == {"3"}
    assert coop_dsa["seed3"].isna().all() and not coop_dsa["seed1"].isna().any()
    nomask = csv[csv["method"] == "dear_nomask"]
    assert len(nomask) > 0 and nomask["mean"].isna().all() and (nomask["n_seeds"] == 0).all()
    assert not (csv["mean"] == 0).any()
    dear_hm = csv[(csv["dataset"] == "dsA") & (csv["method"] == "dear") & (csv["metric"] == "hm")].iloc[0]
    assert [dear_hm["seed1"], dear_hm["seed2"], dear_hm["seed3"]] == pytest.approx([480 / 7, 2040 / 29, 72.0],
                                                                                   abs=1e-6)


def test_published_numbers_are_never_shown_for_a_run_outside_their_setting(world):
    markdown = (world["out"] / "results.md").read_text()
    block = markdown.split("## Published numbers beside ours")[1].split("## Pictures")[0]
    assert "Not shown" in block and "data.source is 'embedded', not 'coop'" in block
    assert "model.arch is 'dear-world', not 'ViT-B-16'" in block
    assert "91.17" not in markdown and "85.94" not in markdown  # no published value anywhere on the page
    published = pd.read_csv(world["out"] / "published.csv")
    assert published.empty and list(published.columns) == reference.COLUMNS


def paper_world(root: Path) -> tuple[Path, list[Path]]:
    """Eval tables of zeroshot, mmrl and dear on CoOp's oxford_pets and dtd, seeds 1-3, and the paper config's params.

    Each split: 4 classes x 25 images. zeroshot scores 90 / 96 % on oxford_pets base / novel on every seed; mmrl
    scores 80, 84, 88 % on dtd base and 60 % novel.
    """
    runs: dict[tuple, list] = {}
    scores = {("zeroshot", "oxford_pets"): {s: (90, 96) for s in SEEDS},
              ("zeroshot", "dtd"): {s: (50, 60) for s in SEEDS},
              ("mmrl", "oxford_pets"): {s: (94, 96) for s in SEEDS},
              ("mmrl", "dtd"): {1: (80, 60), 2: (84, 60), 3: (88, 60)},
              ("dear", "oxford_pets"): {s: (95, 96) for s in SEEDS},
              ("dear", "dtd"): {s: (86, 64) for s in SEEDS}}
    for (method, dataset), by_seed in scores.items():
        for seed, (base, novel) in by_seed.items():
            rows = runs.setdefault((method, dataset, seed), [])
            rows += split_rows(method, dataset, seed, "base_to_novel", dataset, "base", base)
            rows += split_rows(method, dataset, seed, "base_to_novel", dataset, "novel", novel, first_label=4)
    paths = []
    for (method, dataset, seed), rows in sorted(runs.items()):
        paths.append(root / "runs" / method / dataset / f"seed{seed}" / "eval.parquet")
        write_eval(paths[-1], rows, provenance={"seed": seed})
    params = yaml.safe_load((ROOT / "configs/paper-vitb16.yaml").read_text())
    params["report"].update(methods=["zeroshot", "mmrl", "dear"], bootstrap_resamples=200)
    path = root / "paper.yaml"
    path.write_text(yaml.safe_dump(params, sort_keys=False))
    return path, paths


def test_published_numbers_stand_beside_ours_with_sources_in_the_papers_setting(tmp_path):
    params, evals = paper_world(tmp_path)
    result = invoke(params, tmp_path / "report", evals)
    assert result.exit_code == 0, result.output
    markdown = (tmp_path / "report/results.md").read_text()
    measured, block = markdown.split("## Published numbers beside ours")
    assert "91.17" not in measured and "Comparable in setting" in block
    rows = table_after(block, "Comparable in setting")
    # zeroshot on oxford_pets: CLIP's published Base 91.17 (CoCoOp paper); ours 90.00 on every seed -> interval [90, 90]
    assert ("| zeroshot | oxford_pets | Base | 91.17 | 90.00 | -1.17 | no | CoCoOp paper (CVPR 2022), base-to-novel "
            "table |") in rows
    # mmrl dtd Base 80, 84, 88: mean 84 ± 4.302653 * 4 / sqrt(3) = 9.94 -> [74.06, 93.94] holds the published 85.67
    assert "| mmrl | dtd | Base | 85.67 | 84.00 | -1.67 | yes | MMRL paper (CVPR 2025), base-to-novel table |" in rows
    assert "| mmrl | dtd | HM | 73.82 |" in rows and "MMRL paper (CVPR 2025), base-to-novel table ⚠ |" in rows
    assert "- ⚠ mmrl · dtd · HM: published HM 73.82 is not 2BN/(B+N) = 73.92 of its own Base and Novel" in block
    assert "| dear |" not in rows  # the DeAR paper gives its average Base only, and this run has 2 of 11 datasets
    assert "Average" not in rows
    published = pd.read_csv(tmp_path / "report/published.csv")
    assert len(published) == 12 and set(published["method"]) == {"zeroshot", "mmrl"}


def test_every_published_hm_follows_from_its_base_and_novel_but_mmrls_dtd():
    assert reference.hm_problems() == [
        ("mmrl", "dtd", "published HM 73.82 is not 2BN/(B+N) = 73.92 of its own Base and Novel")]
    rows = reference.BASE_TO_NOVEL
    for method, by_dataset in rows.items():  # each published Average is the mean of its 11 datasets (to 0.01)
        for index in (0, 1):
            mean = sum(by_dataset[d][index] for d in reference.B2N_DATASETS) / len(reference.B2N_DATASETS)
            assert abs(mean - by_dataset["Average"][index]) <= reference.HM_TOLERANCE, (method, index)
    assert set(rows) | {"dear"} == set(reference.PAPERS) and set(rows) == set(reference.AVERAGE_SOURCES)
    assert set(reference.AVERAGE_ONLY) == {"dear", "tac"}  # one published metric each: no HM to check


def test_single_published_averages_are_rows_of_their_own():
    rows = reference.published()
    single = rows[rows["method"].isin(["dear", "tac"])]
    assert sorted(zip(single["method"], single["metric"], single["value"])) == [("dear", "base", 85.94),
                                                                                ("tac", "hm", 81.24)]
    assert (single["dataset"] == "Average").all() and (single["protocol"] == "base_to_novel").all()


def test_std_warning_fires_above_the_threshold_only(world):
    markdown = (world["out"] / "results.md").read_text()
    warnings = [line for line in markdown.splitlines() if line.startswith("- **seeds disagree**")]
    # above 2.0 points: coop dsA base/novel (7.07) and HM (3.03), dear dsA base (5.00); averages are not flagged
    assert [w.split(": ")[1] for w in warnings] == [
        "base_to_novel · dsA · coop · base", "base_to_novel · dsA · coop · novel",
        "base_to_novel · dsA · coop · hm", "base_to_novel · dsA · dear · base"]
    assert "seeds: 1: 80.00, 2: 85.00, 3: 90.00" in warnings[-1]
    for threshold, flagged_dear_base in ((5.0, False), (4.99, True)):   # dear dsA base std is exactly 5.00
        root = world["root"]
        out = root / f"report-{threshold}"
        assert invoke(write_params(root, std_warning=threshold), out, world["evals"]).exit_code == 0
        text = (out / "results.md").read_text()
        assert ("dsA · dear · base" in text) is flagged_dear_base
        assert "dsA · coop · base" in text and "dsA · coop · hm" not in text


def test_loss_curves_shade_the_fade_in_steps(world):
    from dear.report.plots import loss_png
    from dear.report.train_logs import read_train_logs

    logs = read_train_logs(make_train_logs(world["root"] / "fade"))
    assert "fade" not in logs  # logs from before the fade-in column still plot
    full = logs.assign(fade=1.0)
    fading = logs.assign(fade=[min(1.0, (step + 1) / 4) for step in logs["step"]])
    assert loss_png(full, ["dear", "coop"], 1, 60) == loss_png(logs, ["dear", "coop"], 1, 60)
    assert loss_png(fading, ["dear", "coop"], 1, 60) != loss_png(full, ["dear", "coop"], 1, 60)


def test_pictures_plots_data_and_heatmap_copy(world):
    out = world["out"]
    for name in ("base_novel.png", "loss_curves.png"):
        image = Image.open(io.BytesIO((out / name).read_bytes()))
        assert image.format == "PNG" and image.size[0] > 200
        assert "Software" not in image.info
    assert (out / "roles" / "dsA.png").read_bytes() == world["roles"][0].read_bytes()
    assert "![Head roles: roles/dsA.png](roles/dsA.png)" in (out / "results.md").read_text()
    bars = pd.read_csv(out / "plots" / "base_novel.csv")
    assert list(bars.columns) == ["method", "dataset", "base", "novel", "hm", "run"]
    dear_avg = bars[(bars["method"] == "dear") & (bars["dataset"] == "Average")].iloc[0]
    assert dear_avg["hm"] == pytest.approx(68.596491, abs=1e-6)
    loss = pd.read_csv(out / "plots" / "loss.csv")
    assert list(loss.columns[:6]) == ["method", "dataset", "seed", "run", "step", "loss"]
    assert {"loss_ce", "loss_fus"} <= set(loss.columns) and "extra_column" not in loss.columns
    assert loss[loss["method"] == "coop"]["loss_fus"].isna().all()
    assert len(loss) == 36
    transfer = pd.read_csv(out / "plots" / "transfer.csv")
    assert set(transfer["protocol"]) == {"cross_dataset", "domain_generalization"}


def test_outputs_are_byte_identical_for_the_same_inputs_in_any_order(world):
    out = world["root"] / "report-again"
    result = invoke(world["params"], out, world["evals"][::-1], world["logs"][::-1], world["roles"])
    assert result.exit_code == 0, result.output
    for name in ("results.md", "results.csv", "differences.csv", "streams.csv", "metrics.json", "base_novel.png",
                 "loss_curves.png",
                 "plots/base_novel.csv", "plots/loss.csv", "plots/transfer.csv", "roles/dsA.png"):
        assert (out / name).read_bytes() == (world["out"] / name).read_bytes(), name


def _one_line_error(result, *needles):
    assert result.exit_code == 1
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.output
    for needle in needles:
        assert needle in lines[0]


def test_eval_table_missing_a_column_fails_naming_the_file(world, tmp_path):
    bad = tmp_path / "runs" / "dear" / "dsB" / "seed9" / "eval.parquet"
    bad.parent.mkdir(parents=True)
    rows = split_rows("dear", "dsB", 9, "base_to_novel", "dsB", "base", 50)
    pq.write_table(pa.Table.from_pylist(rows, schema=EVAL_SCHEMA).drop_columns(["total"]), bad)
    out = tmp_path / "report"
    _one_line_error(invoke(world["params"], out, world["evals"] + [bad]), str(bad), "missing columns ['total']")
    assert not out.exists()


def test_two_files_claiming_the_same_run_fail_naming_both(world, tmp_path):
    copy = tmp_path / "elsewhere" / "eval.parquet"
    copy.parent.mkdir()
    shutil.copy(world["evals"][0], copy)
    out = tmp_path / "report"
    _one_line_error(invoke(world["params"], out, world["evals"] + [copy]), str(copy), str(world["evals"][0]))
    assert not out.exists()


def test_bad_heatmap_and_train_log_fail_before_writing(world, tmp_path):
    not_png = tmp_path / "roles" / "dsA" / "heatmap.png"
    not_png.parent.mkdir(parents=True)
    not_png.write_text("not an image")
    out = tmp_path / "report"
    _one_line_error(invoke(world["params"], out, world["evals"], roles=[not_png]), str(not_png), "not a PNG")
    no_loss = tmp_path / "runs" / "coop" / "dsA" / "seed2" / "train_log.parquet"
    no_loss.parent.mkdir(parents=True)
    pq.write_table(pa.table({"step": [0, 1]}), no_loss)
    _one_line_error(invoke(world["params"], out, world["evals"], logs=[no_loss]), str(no_loss), "['loss']")
    assert not out.exists()


def test_no_eval_tables_and_stray_arguments_are_refused(world, tmp_path):
    out = tmp_path / "report"
    _one_line_error(invoke(world["params"], out, []), "--evals")
    result = CliRunner().invoke(app, ["report", "--params", str(world["params"]), "--out", str(out), "stray.parquet"])
    assert result.exit_code == 2 and "unexpected extra argument(s) (stray.parquet)" in result.output
    result = CliRunner().invoke(app, ["report", "--params", str(world["params"]), "--out", str(out), "--evalz", "a"])
    assert result.exit_code == 2 and "No such option: --evalz" in result.output
    assert not out.exists()


def test_unseen_classes_are_shown_under_both_inferences_from_the_same_evaluation(tmp_path):
    """dear (streams cls, color and fused) and coop (cls only) on dsA, seeds 1-2, evaluated with fusion.novel: cls.

    dear's novel classes: 60 % by the CLS stream (its output), 70 % by the fused logits; base 80 % fused (and
    output). Cross-dataset from dsA: dsB 50 % by CLS (output), 40 % fused; the source dsA 90 % fused either way.
    """
    evals = []
    for seed in (1, 2):
        rows = []
        for stream, base, novel in (("output", 80, 60), ("fused", 80, 70), ("cls", 75, 60), ("color", 20, 10)):
            rows += [{**r, "stream": stream} for r in split_rows("dear", "dsA", seed, "base_to_novel", "dsA", "base",
                                                                 base)]
            rows += [{**r, "stream": stream} for r in split_rows("dear", "dsA", seed, "base_to_novel", "dsA", "novel",
                                                                 novel, first_label=4)]
        for stream, source, target in (("output", 90, 50), ("fused", 90, 40), ("cls", 85, 50), ("color", 10, 5)):
            rows += [{**r, "stream": stream} for r in split_rows("dear", "dsA", seed, "cross_dataset", "dsA", "all",
                                                                 source)]
            rows += [{**r, "stream": stream} for r in split_rows("dear", "dsA", seed, "cross_dataset", "dsB", "all",
                                                                 target)]
        coop = [{**r, "stream": stream} for stream in ("output", "fused", "cls")
                for r in split_rows("coop", "dsA", seed, "base_to_novel", "dsA", "base", 70)
                + split_rows("coop", "dsA", seed, "base_to_novel", "dsA", "novel", 50, first_label=4)]
        for method, table in (("dear", rows), ("coop", coop)):
            evals.append(tmp_path / method / f"seed{seed}" / "eval.parquet")
            write_eval(evals[-1], table, provenance={"params": {"fusion": {"novel": "cls"}}, "seed": seed})
    result = invoke(write_params(tmp_path, methods=["coop", "dear"]), tmp_path / "report", evals)
    assert result.exit_code == 0, result.output
    frame = pd.read_csv(tmp_path / "report/inference.csv")
    assert set(frame["method"]) == {"dear"}  # coop fuses nothing: both inferences are its CLS stream
    average = frame[(frame["dataset"] == "Average") & (frame["protocol"] == "base_to_novel")]
    value = {(row.inference, row.metric): row.mean for row in average.itertuples()}
    assert value[("cls", "novel")] == 60 and value[("fused", "novel")] == 70
    assert value[("cls", "base")] == value[("fused", "base")] == 80
    assert value[("fused", "hm")] == pytest.approx(2 * 80 * 70 / 150)
    cross = frame[(frame["protocol"] == "cross_dataset") & (frame["dataset"] != "Average")]
    assert {(row.inference, row.dataset): row.mean for row in cross.itertuples()} == {
        ("cls", "dsA"): 90, ("cls", "dsB"): 50, ("fused", "dsA"): 90, ("fused", "dsB"): 40}
    markdown = (tmp_path / "report/results.md").read_text()
    assert "use `fusion.novel: cls` on unseen classes" in markdown
    table = table_after(markdown, "### Unseen classes both ways")
    assert table.splitlines()[0] == ("| Method | Novel · cls | Novel · fused | HM · cls | HM · fused | "
                                     "Cross-dataset from dsA · cls | Cross-dataset from dsA · fused |")
    assert table.splitlines()[2] == "| dear | 60.00 ± 0.00 | 70.00 ± 0.00 | 68.57 ± 0.00 | 74.67 ± 0.00 | 50.00 ± 0.00 | 40.00 ± 0.00 |"



def test_a_study_without_unseen_classes_has_no_table_of_both_inferences(tmp_path):
    """A few-shot study (demo-fewshot): dear's streams on all classes of dsA at 4 shots, no novel class, no transfer
    target; the page once showed an "Unseen classes both ways" table of dashes."""
    rows = [{**r, "stream": stream} for stream, percent in (("output", 60), ("fused", 60), ("cls", 50), ("color", 20))
            for r in split_rows("dear", "dsA", 1, "few_shot_4", "dsA", "all", percent)]
    evals = [tmp_path / "dear/seed1/eval.parquet"]
    write_eval(evals[0], rows, provenance={"params": {"fusion": {"novel": "cls"}}, "seed": 1})
    result = invoke(write_params(tmp_path, methods=["dear"]), tmp_path / "report", evals)
    assert result.exit_code == 0, result.output
    markdown = (tmp_path / "report/results.md").read_text()
    assert "| dear | **60.00** | 1 (no seed 2, 3) |" in markdown  # the few-shot table
    assert "Unseen classes both ways" not in markdown


EXPECTED_PAPER_AVERAGE = """\
## Average over 2 datasets

| Method | Base | Novel | HM |
| --- | --- | --- | --- |
| zeroshot | 65.00 | **70.00** | 67.41 |
| coop | 82.50 | 47.50 | 60.29 |
| dear_nomask | — | — | — |
| dear | **85.00** | 57.50 | **68.60** |
"""


def test_paper_tables_in_the_papers_layout_as_csv_markdown_and_latex(world):
    paper = world["out"] / "paper"
    assert sorted(p.name for p in paper.iterdir()) == sorted(
        f"{protocol}.{kind}" for protocol in ("base_to_novel", "cross_dataset", "domain_generalization")
        for kind in ("csv", "md", "tex"))
    b2n = (paper / "base_to_novel.md").read_text()
    assert EXPECTED_PAPER_AVERAGE in b2n and b2n.index("## Average") < b2n.index("## dsA") < b2n.index("## dsB")
    csv = pd.read_csv(paper / "base_to_novel.csv", keep_default_na=False, na_values=[""])
    assert list(csv.columns) == ["dataset", "method", "Base", "Novel", "HM", "best"]
    best = dict(zip(zip(csv["dataset"], csv["method"]), csv["best"]))
    assert best[("dsA", "coop")] == "Base" and best[("dsA", "dear")] == "Base"  # a tie: both best
    assert best[("Average", "dear")] == "Base;HM" and best[("Average", "zeroshot")] == "Novel"
    cross = pd.read_csv(paper / "cross_dataset.csv")
    assert list(cross.columns) == ["source", "method", "dsA (source)", "dsB", "dsC", "Average", "best"]
    assert cross[cross["method"] == "dear"]["Average"].iloc[0] == 56.5
    tex = (paper / "base_to_novel.tex").read_text()
    assert tex.count("\\begin{tabular}{lccc}") == 3 == tex.count("\\bottomrule") == tex.count("\\toprule")
    assert "dear\\_nomask & -- & -- & -- \\\\" in tex
    assert "dear & \\textbf{85.00} & 57.50 & \\textbf{68.60} \\\\" in tex
    cross_tex = (paper / "cross_dataset.tex").read_text()
    assert "\\begin{tabular}{lcccc}" in cross_tex and "Method & dsA (source) & dsB & dsC & Average \\\\" in cross_tex
    for name in ("base_to_novel", "cross_dataset", "domain_generalization"):
        for line in (paper / f"{name}.tex").read_text().splitlines():
            if line.endswith("\\\\") and not line.startswith("\\multicolumn"):
                columns = (paper / f"{name}.tex").read_text().split("\\begin{tabular}{l")[1].split("}")[0]
                assert line.count("&") == len(columns), line


@pytest.mark.skipif(shutil.which("pdflatex") is None, reason="no TeX engine (apt-get install texlive-latex-base "
                                                              "texlive-latex-recommended)")
def test_paper_latex_tables_compile_with_booktabs(world, tmp_path):
    for name in ("base_to_novel", "cross_dataset", "domain_generalization"):
        shutil.copy(world["out"] / "paper" / f"{name}.tex", tmp_path / f"{name}.tex")
        (tmp_path / f"main-{name}.tex").write_text(
            "\\documentclass{article}\n\\usepackage[utf8]{inputenc}\n\\usepackage{booktabs}\n\\begin{document}\n"
            f"\\begin{{table*}}\\centering\\small\n\\input{{{name}}}\n\\end{{table*}}\n\\end{{document}}\n")
        result = subprocess.run(["pdflatex", "-interaction=nonstopmode", "-halt-on-error", f"main-{name}.tex"],
                                cwd=tmp_path, capture_output=True, text=True, timeout=120)
        assert result.returncode == 0, result.stdout[-2000:]
        assert (tmp_path / f"main-{name}.pdf").stat().st_size > 1000


def _drawn(figure):
    """`figure` laid out as savefig lays it out (constrained layout), and its renderer."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    canvas = FigureCanvasAgg(figure)
    canvas.draw()
    return canvas.get_renderer()


def _assert_inside(figure, renderer) -> None:
    """Every legend, title and panel title lies within the figure (issue 39: cut off at both edges)."""
    page = figure.bbox
    texts = [*figure.legends, *figure.texts, *[ax.title for ax in figure.axes if ax.get_visible()]]
    for artist in texts:
        box = artist.get_window_extent(renderer)
        assert page.x0 - 0.5 <= box.x0 and box.x1 <= page.x1 + 0.5 and page.y0 - 0.5 <= box.y0 \
            and box.y1 <= page.y1 + 0.5, f"{artist} is cut off: {box} outside {page}"


def test_pictures_show_the_methods_that_ran_with_the_tables_intervals_and_nothing_cut_off(world):
    """Issue 39: base_novel.png left out the methods that ran, drew empty groups for the listed ones that did not,
    called its whiskers a std while the tables give 95% intervals; loss_curves.png was cut off at both edges."""
    from matplotlib.container import BarContainer, ErrorbarContainer

    from dear.report import plots
    from dear.report.train_logs import read_train_logs

    results = pd.read_csv(world["out"] / "results.csv", keep_default_na=False, na_values=[""])
    listed = ["zeroshot", "coop", "dear_nomask", "dear"]  # dear_nomask listed, never run
    figure = plots.base_novel_figure(results, listed, 0.95)
    renderer = _drawn(figure)
    assert [text.get_text() for text in figure.legends[0].get_texts()] == ["zeroshot", "coop", "dear"]
    assert "bars the mean over seeds, whiskers its 95% interval over seeds" in figure.texts[0].get_text()
    _assert_inside(figure, renderer)
    rows = results[results["protocol"] == "base_to_novel"]
    panels = [ax for ax in figure.axes if ax.get_visible()]
    assert [ax.get_title() for ax in panels] == ["dsA", "dsB", "Average of 2 datasets (HM of averages)"]
    for ax, dataset in zip(panels, ["dsA", "dsB", "Average"]):
        bars = [patch for container in ax.containers if isinstance(container, BarContainer)
                for patch in container.patches]
        assert len(bars) == 3 * 3  # three methods ran, three metrics each: no empty group
        mine = rows[(rows["dataset"] == dataset) & rows["method"].isin(["zeroshot", "coop", "dear"])]
        bottom, top = ax.get_ylim()
        assert bottom == 0 and top >= max(100.0, mine["ci_high"].max()), "a whisker ends above the axis"
        whiskers = sorted(round(y, 6) for container in ax.containers if isinstance(container, ErrorbarContainer)
                          for line in container.lines[2] for segment in line.get_segments() for _, y in segment)
        expected = sorted(round(y, 6) for y in [*mine["ci_low"].fillna(mine["mean"]),
                                                *mine["ci_high"].fillna(mine["mean"])])
        assert whiskers == pytest.approx(expected, abs=1e-6)  # the tables' interval, not a std

    # ten methods on two panels: the legend wraps into rows that fit the figure
    many = pd.concat([rows[rows["method"] == "coop"].assign(method=f"method_number_{i}") for i in range(10)])
    many = many[many["dataset"].isin(["dsA", "Average"])]
    names = [f"method_number_{i}" for i in range(10)]
    figure = plots.base_novel_figure(many, names, 0.9)
    renderer = _drawn(figure)
    assert [text.get_text() for text in figure.legends[0].get_texts()] == names
    assert "its 90% interval" in figure.texts[0].get_text()
    _assert_inside(figure, renderer)

    logs = read_train_logs(world["logs"])  # one training dataset: the narrowest figure
    figure = plots.loss_figure(logs, listed, 3)
    renderer = _drawn(figure)
    assert [text.get_text() for text in figure.legends[0].get_texts()] == ["coop", "dear", "seed 1", "seed 2"]
    _assert_inside(figure, renderer)
    (ax,) = [ax for ax in figure.axes if ax.get_visible()]
    assert ax.get_xlim()[0] <= logs["step"].min() and ax.get_xlim()[1] >= logs["step"].max()
    low, high = ax.get_ylim()
    assert all(low <= y <= high for line in ax.get_lines() for y in line.get_ydata())


def test_what_the_roles_change_pairs_each_variant_with_its_plain_method(tmp_path):
    """maple+roles against maple on the same seeds and images, in a table of its own and a figure; by hand:
    Base 78 - 80 and 80 - 82 -> -2.00 on both seeds; Novel 66 - 60, 64 - 58 -> +6.00; HM per seed
    2*78*66/144 - 2*80*60/140 = 71.5 - 68.5714 and 2*80*64/144 - 2*82*58/140 = 71.1111 - 67.9429 -> +3.05;
    cross-dataset dsB 55 - 50 on both seeds -> +5.00."""
    numbers = {"maple": {1: (80, 60, 50), 2: (82, 58, 50)}, "maple+roles": {1: (78, 66, 55), 2: (80, 64, 55)},
               "zeroshot": {1: (70, 75, 62), 2: (70, 75, 62)}}
    evals = []
    for method, by_seed in numbers.items():
        for seed, (base, novel, cross) in by_seed.items():
            rows = split_rows(method, "dsA", seed, "base_to_novel", "dsA", "base", base)
            rows += split_rows(method, "dsA", seed, "base_to_novel", "dsA", "novel", novel, first_label=4)
            rows += split_rows(method, "dsA", seed, "cross_dataset", "dsB", "all", cross)
            evals.append(tmp_path / f"{method}/seed{seed}/eval.parquet")
            write_eval(evals[-1], rows, provenance={"params": {"fusion": {"novel": "cls"}}, "seed": seed})
    params = write_params(tmp_path, methods=["zeroshot", "maple", "maple+roles"], compare="maple+roles")
    params_raw = yaml.safe_load(params.read_text())
    params_raw["data"]["seeds"] = [1, 2]
    params.write_text(yaml.safe_dump(params_raw, sort_keys=False))
    result = invoke(params, tmp_path / "report", evals)
    assert result.exit_code == 0, result.output
    markdown = (tmp_path / "report/results.md").read_text()
    changes = table_after(markdown, "## What the roles change")
    assert changes.splitlines()[0] == "| Pair | ΔBase | ΔNovel | ΔHM | n |"
    row = changes.splitlines()[2]
    assert row.startswith("| maple+roles − maple | -2.00 [-2.00, -2.00] ") and "| +6.00 [+6.00, +6.00] " in row
    assert "| +3.05 [" in row and row.endswith("| 2 |")
    transfer = table_after(markdown.split("## What the roles change")[1], "Transfer and few-shot")
    assert "| maple+roles − maple | Cross-dataset from dsA | +5.00 [+5.00, +5.00]" in transfer
    assert (tmp_path / "report/roles_change.png").read_bytes().startswith(b"\x89PNG")
    frame = pd.read_csv(tmp_path / "report/differences.csv")
    pairs = list(dict.fromkeys(zip(frame["method"], frame["baseline"])))
    assert pairs == [("maple+roles", "zeroshot"), ("maple+roles", "maple")]  # the compared pair once
    metrics = json.loads((tmp_path / "report/metrics.json").read_text())
    assert metrics["differences"]["maple+roles_minus_maple"]["base"] == pytest.approx(-2.0)

    # docs/results.md shows a demo-roles snapshot's tables from its differences.csv: the report's rows, not a copy
    from dear.docs.generators import generate

    docs_root = tmp_path / "project"
    (docs_root / "docs/demo-roles").mkdir(parents=True)
    shutil.copy(ROOT / "params.yaml", docs_root / "params.yaml")
    with pytest.raises(DearError, match=r"docs/demo-roles/differences.csv: not found; copy a make demo-roles run"):
        generate(docs_root, "roles-change docs/demo-roles")
    shutil.copy(tmp_path / "report/differences.csv", docs_root / "docs/demo-roles/differences.csv")
    shown = generate(docs_root, "roles-change docs/demo-roles").splitlines()
    rows = [line for line in shown if line.startswith("| ")]
    assert rows and all(line in markdown.splitlines() for line in rows)
    assert "| maple+roles − zeroshot" not in "\n".join(rows)  # a variant against another method: not the roles'
    assert shown[-1] == "![What the roles change: each variant minus its plain method](demo-roles/roles_change.png)"
