"""`dear report` on few-shot runs: hand-made eval tables in the few-shot layout, the hand-computed tables out.

The world: zeroshot, linear_probe and coop, trained with 1, 4 and 16 shots on dsA and dsB, seeds 1-3 (coop's
16-shot seed 3 on dsB missing), in the layout of the few-shot jobs
(fewshot/<method>/<ds>/shots<K>/eval/seed<S>/eval.parquet, protocol few_shot_<K>); and the linear probe's
base-to-novel run on dsA, base classes only. Every split has 4 classes of 25 test images, so `correct` out
of 100 is the accuracy in percent (tests/report/test_report.py's helpers).
"""

import json

import numpy as np
import pandas as pd
import pytest
from matplotlib.collections import PolyCollection

from dear.errors import DearError
from dear.report import plots
from dear.scoring.results import check_eval, eval_frame, few_shot_protocol, shots_of, write_eval
from tests.report.test_report import invoke, split_rows, table_after, write_params

SHOTS = (1, 4, 16)
# {(method, dataset): {K: {seed: accuracy %}}}
FEW = {
    ("zeroshot", "dsA"): {k: {s: 60 for s in (1, 2, 3)} for k in SHOTS},
    ("zeroshot", "dsB"): {k: {s: 50 for s in (1, 2, 3)} for k in SHOTS},
    ("linear_probe", "dsA"): {1: {1: 30, 2: 34, 3: 32}, 4: {1: 60, 2: 62, 3: 64}, 16: {1: 80, 2: 80, 3: 80}},
    ("linear_probe", "dsB"): {1: {1: 20, 2: 20, 3: 20}, 4: {1: 40, 2: 44, 3: 42}, 16: {1: 70, 2: 70, 3: 70}},
    ("coop", "dsA"): {1: {1: 56, 2: 60, 3: 58}, 4: {1: 70, 2: 72, 3: 74}, 16: {1: 84, 2: 86, 3: 88}},
    ("coop", "dsB"): {1: {1: 50, 2: 52, 3: 54}, 4: {1: 66, 2: 66, 3: 66}, 16: {1: 80, 2: 82}},  # seed 3 missing
}
# Averages over dsA and dsB, ± = t(0.975, n-1) s/√n of the per-seed averages: linear_probe 1 shot: seeds 25, 27, 26
# -> 26 ± 2.484138 · 1; 4 shots: 50, 53, 53 -> 52 ± 2.484138 · √3; coop 1 shot: 53, 56, 56 -> 55 ± 4.30;
# 4 shots: 68, 69, 70 -> 69 ± 2.48; 16 shots: the seeds both datasets have, 82 and 84 -> 83.5 ± 12.706205 · √2/√2.
EXPECTED_AVERAGE = """\
| Method | 1 shot | 4 shots | 16 shots | n |
| --- | --- | --- | --- | --- |
| zeroshot | **55.00 ± 0.00** | 55.00 ± 0.00 | 55.00 ± 0.00 | 3 |
| linear_probe | 26.00 ± 2.48 | 52.00 ± 4.30 | 75.00 ± 0.00 | 3 |
| coop | **55.00 ± 4.30** | **69.00 ± 2.48** | **83.50 ± 12.71** | 2–3 (no seed 3) |
"""


def make_fewshot(root) -> list:
    paths = []
    for (method, dataset), by_k in FEW.items():
        for k, by_seed in by_k.items():
            for seed, percent in by_seed.items():
                rows = split_rows(method, dataset, seed, few_shot_protocol(k), dataset, "all", percent)
                paths.append(root / "fewshot" / method / dataset / f"shots{k}" / "eval" / f"seed{seed}" / "eval.parquet")
                write_eval(paths[-1], rows, provenance={"seed": seed})
    for seed in (1, 2, 3):  # the linear probe in base-to-novel: base classes only (it has no novel classes)
        paths.append(root / "runs" / "linear_probe" / "dsA" / "eval" / f"seed{seed}" / "eval.parquet")
        write_eval(paths[-1], split_rows("linear_probe", "dsA", seed, "base_to_novel", "dsA", "base", 90),
                   provenance={"seed": seed})
        paths.append(root / "runs" / "coop" / "dsA" / "eval" / f"seed{seed}" / "eval.parquet")
        write_eval(paths[-1], split_rows("coop", "dsA", seed, "base_to_novel", "dsA", "base", 80)
                   + split_rows("coop", "dsA", seed, "base_to_novel", "dsA", "novel", 60, first_label=4),
                   provenance={"seed": seed})
    return paths


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    root = tmp_path_factory.mktemp("fewshot")
    evals = make_fewshot(root)
    params = write_params(root, methods=["zeroshot", "linear_probe", "coop"], compare="coop")
    result = invoke(params, root / "report", evals)
    assert result.exit_code == 0, result.output
    return {"root": root, "out": root / "report", "evals": evals, "params": params}


def test_the_few_shot_tables_are_the_hand_computed_ones(world):
    markdown = (world["out"] / "results.md").read_text()
    section = markdown.split("## Few-shot learning", 1)[1]
    assert table_after(section, "### Average over 2 datasets") == EXPECTED_AVERAGE
    assert table_after(section, "### dsB").splitlines()[4] == \
        "| coop | **52.00 ± 4.97** | **66.00 ± 0.00** | **81.00 ± 12.71** | 2–3 (no seed 3) |"
    results = pd.read_csv(world["out"] / "results.csv")
    few = results[results["protocol"].map(shots_of).notna()]
    assert set(few["protocol"]) == {"few_shot_1", "few_shot_4", "few_shot_16"} and set(few["metric"]) == {"accuracy"}
    row = few[(few["protocol"] == "few_shot_16") & (few["method"] == "coop") & (few["dataset"] == "Average")].iloc[0]
    assert (row["mean"], row["n_seeds"], row["seeds"]) == (83.5, 2, "1;2")


def test_paired_differences_per_shot_count_with_verdicts(world):
    differences = pd.read_csv(world["out"] / "differences.csv")
    few = differences[differences["protocol"].map(shots_of).notna()]
    average = few[(few["dataset"] == "Average") & (few["baseline"] == "linear_probe")].set_index("protocol")
    assert average.loc["few_shot_1", "mean"] == pytest.approx(29.0)   # coop 55 - linear probe 26, seed by seed
    assert average.loc["few_shot_16", "n_seeds"] == 2 and average.loc["few_shot_16", "mean"] == pytest.approx(8.0)
    # on seeds 1 and 2, the ones coop has on both datasets: 83 - 75 (the table's 83.50 also counts dsA's seed 3)
    assert average.loc["few_shot_1", "verdict"] == "better"
    markdown = (world["out"] / "results.md").read_text()
    pair = markdown.split("### coop − linear_probe", 1)[1]
    assert "Few-shot learning:" in pair.split("###", 1)[0]
    assert "| few-shot, 1 shot | Accuracy | +29.00" in markdown.split("### Averages", 1)[1].replace("coop − linear_probe | ", "")
    metrics = json.loads((world["out"] / "metrics.json").read_text())
    assert metrics["few_shot"]["coop"]["shots16"] == {"average": 83.5, "seeds": 2}
    assert metrics["differences"]["coop_minus_linear_probe"]["few_shot_1"] == pytest.approx(29.0)


def test_base_to_novel_pairs_with_the_linear_probe_on_base_classes_alone(world):
    differences = pd.read_csv(world["out"] / "differences.csv")
    b2n = differences[(differences["protocol"] == "base_to_novel") & (differences["baseline"] == "linear_probe")]
    for dataset in ("dsA", "Average"):
        mine = b2n[b2n["dataset"] == dataset].set_index("metric")
        assert list(mine.index) == ["base", "novel", "hm"]
        assert mine.loc["base", "mean"] == pytest.approx(-10.0) and mine.loc["base", "verdict"] == "worse"
        assert mine.loc[["novel", "hm"], "mean"].isna().all() and set(mine.loc[["novel", "hm"], "verdict"]) == {"missing"}


def test_paper_tables_have_a_column_per_shot_count(world):
    csv = pd.read_csv(world["out"] / "paper/few_shot.csv")
    assert list(csv.columns) == ["dataset", "method", "1 shot", "4 shots", "16 shots", "best"]
    assert list(csv["dataset"])[:3] == ["Average"] * 3
    average = csv[csv["dataset"] == "Average"].set_index("method")
    assert average.loc["coop", "16 shots"] == 83.5 and average.loc["coop", "best"] == "1 shot;4 shots;16 shots"
    tex = (world["out"] / "paper/few_shot.tex").read_text()
    assert "Method & 1 shot & 4 shots & 16 shots" in tex and "\\textbf{83.50}" in tex
    assert (world["out"] / "paper/few_shot.md").read_text().startswith("# Few-shot learning")


def test_the_linear_probe_shows_a_dash_with_its_reason_in_base_to_novel(world):
    markdown = (world["out"] / "results.md").read_text()
    b2n = markdown.split("## Base-to-novel", 1)[1].split("\n## ", 1)[0]
    assert "| linear_probe | **90.00 ± 0.00** | — | — | 3 |" in b2n
    assert "— for **linear_probe** where it has no number: a linear probe has a classifier only for the classes" in b2n
    assert "linear_probe: a linear probe has a classifier only" in (world["out"] / "paper/base_to_novel.md").read_text()


def test_no_published_few_shot_number_and_the_page_says_why(world):
    markdown = (world["out"] / "results.md").read_text()
    assert "Few-shot learning: only CLIP-LoRA's 11-dataset Averages per shot count stand beside ours" in markdown
    assert not pd.read_csv(world["out"] / "published.csv")["protocol"].map(shots_of).notna().any()


def test_the_picture_and_its_data(world):
    png = (world["out"] / "few_shot.png").read_bytes()
    assert png.startswith(b"\x89PNG") and "](few_shot.png)" in (world["out"] / "results.md").read_text()
    data = pd.read_csv(world["out"] / "plots/few_shot.csv")
    assert list(data.columns) == ["method", "dataset", "shots", "accuracy", "ci_low", "ci_high", "n_seeds", "run"]
    assert len(data) == 3 * 3 * 3  # (dsA, dsB, Average) x 3 methods x 3 shot counts
    assert pd.read_csv(world["out"] / "plots/transfer.csv").empty  # few-shot rows are not transfer rows


def test_the_figure_has_a_log_shot_axis_a_line_per_method_and_seed_bands(world, monkeypatch):
    figures = []
    monkeypatch.setattr(plots, "_png", lambda figure, dpi: figures.append(figure) or b"")
    results = pd.read_csv(world["out"] / "results.csv")
    plots.few_shot_png(results, ["zeroshot", "linear_probe", "coop"], 0.95, 50)
    axes = [ax for ax in figures[0].axes if ax.get_visible()]
    assert [ax.get_title() for ax in axes] == ["Average over 2 datasets", "dsA", "dsB"]
    for ax in axes:
        assert ax.get_xscale() == "log" and list(ax.get_xticks()) == [1, 4, 16]
        assert [t.get_text() for t in ax.get_xticklabels()] == ["1", "4", "16"]
        assert len(ax.get_lines()) == 3
        assert len([c for c in ax.collections if isinstance(c, PolyCollection)]) == 3
    coop = axes[0].get_lines()[2]
    np.testing.assert_allclose(coop.get_ydata(), [55.0, 69.0, 83.5])


def test_no_few_shot_run_means_no_few_shot_files(tmp_path):
    from tests.report.test_report import make_world

    evals = make_world(tmp_path)
    assert invoke(write_params(tmp_path), tmp_path / "report", evals).exit_code == 0
    assert not (tmp_path / "report/few_shot.png").exists() and not (tmp_path / "report/paper/few_shot.csv").exists()
    assert "few_shot" not in json.loads((tmp_path / "report/metrics.json").read_text())
    assert "Few-shot" not in (tmp_path / "report/results.md").read_text()


@pytest.mark.parametrize("protocol,target,message", [
    ("few_shot_0", "dsA", "unknown protocol 'few_shot_0'"),
    ("few_shot_x", "dsA", "unknown protocol 'few_shot_x'"),
    ("few_shot_04", "dsA", "unknown protocol 'few_shot_04'"),
    ("few_shot_4", "dsB", "few_shot_4 row with source 'dsA' != target 'dsB'"),
])
def test_a_bad_few_shot_row_is_refused(protocol, target, message):
    frame = eval_frame(split_rows("coop", "dsA", 1, protocol, target, "all", 50))
    with pytest.raises(DearError, match=message):
        check_eval(frame, "x.parquet")
    frame = eval_frame(split_rows("coop", "dsA", 1, "few_shot_4", "dsA", "base", 50))
    with pytest.raises(DearError, match="split 'base' in protocol few_shot_4"):
        check_eval(frame, "x.parquet")


def test_clip_loras_published_few_shot_averages_stand_beside_ours_over_the_eleven_datasets():
    """CLIP-LoRA's 11-dataset Averages (its paper's few-shot table, ViT-B/16: 72.5 / 75.4 / 77.4 / 80.3 / 83.0 at
    1 / 2 / 4 / 8 / 16 shots) are compared with ours only when our few-shot runs cover exactly those datasets."""
    from dear.report import reference
    from dear.report.tables import AVERAGE

    published = reference.published()
    few = published[published["protocol"].map(shots_of).notna()]
    assert dict(zip(few["protocol"], few["value"])) == {few_shot_protocol(k): v for k, v in
                                                        zip((1, 2, 4, 8, 16), (72.5, 75.4, 77.4, 80.3, 83.0))}
    assert set(few["method"]) == {"clip_lora"} and set(few["dataset"]) == {AVERAGE}

    def results(datasets):
        rows = [dict(protocol=few_shot_protocol(4), source=d, dataset=d, row="dataset", method="clip_lora",
                     metric="accuracy", mean=78.0, ci_low=77.0, ci_high=79.0, n_seeds=3) for d in datasets]
        rows.append(dict(protocol=few_shot_protocol(4), source="", dataset=AVERAGE, row="average", method="clip_lora",
                         metric="accuracy", mean=78.0, ci_low=77.0, ci_high=79.0, n_seeds=3))
        return pd.DataFrame(rows)

    beside = reference.beside(results(reference.B2N_DATASETS))
    assert beside[["protocol", "published", "ours", "inside"]].values.tolist() == [[few_shot_protocol(4), 77.4, 78.0,
                                                                                    True]]
    assert reference.beside(results(reference.B2N_DATASETS[:5])).empty  # five datasets: not the published Average


def test_the_few_shot_figures_twelve_methods_get_twelve_colours_the_first_ten_as_before():
    from matplotlib import colormaps

    names = ["zeroshot", "linear_probe", "tip_adapter_f", "clip_lora", "coop", "cocoop", "kgcoop", "maple",
             "promptsrc", "mmrl", "dear_nomask", "dear"]
    colors = plots.method_colors(names)
    assert len(set(colors.values())) == 12
    assert [colors[name] for name in names[:10]] == [colormaps["tab10"](i) for i in range(10)]
