"""dear.scoring.results: the eval table contract, accuracy from counts, HM, run metrics."""

import math

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from dear.errors import DearError
from dear.runtime.io import read_provenance
from dear.scoring.results import (EVAL_SCHEMA, harmonic_mean, read_eval, read_evals, run_metrics, seed_accuracy,
                          split_accuracy, write_eval)


def rows_of(method="dear", source="dsA", seed=1, protocol="base_to_novel", target=None, split="base",
            counts=((3, 4),), first_label=0):
    """Eval rows of one split: `counts` = (correct, total) per class (the first `correct` images right)."""
    return [dict(method=method, source=source, seed=seed, protocol=protocol, target=target or source, split=split, stream="output",
                 label=first_label + index, classname=f"c{first_label + index}", correct=correct, total=total,
                 hits=[True] * correct + [False] * (total - correct))
            for index, (correct, total) in enumerate(counts)]


def test_split_accuracy_sums_counts_over_classes_not_per_class_accuracies():
    # class 0: 3 of 4, class 1: 1 of 1 -> 4 of 5 = 80 % (the mean of per-class accuracies would be 87.5 %)
    rows = rows_of(counts=((3, 4), (1, 1)))
    accuracy = split_accuracy(pa.Table.from_pylist(rows, schema=EVAL_SCHEMA))
    assert len(accuracy) == 1
    assert accuracy.loc[0, "correct"] == 4 and accuracy.loc[0, "total"] == 5
    assert accuracy.loc[0, "accuracy"] == pytest.approx(80.0)


def test_hm_comes_from_counts_not_from_rounded_percentages():
    # base 2/3 = 66.666..%, novel 1/7 = 14.2857..%: HM = 2BN/(B+N) = 40000/1700 = 23.5294..
    # rounding the percentages first (66.67, 14.29) gives 23.5354.. -> 23.54 instead of 23.53
    rows = rows_of(split="base", counts=((2, 3),)) + rows_of(split="novel", counts=((1, 7),), first_label=1)
    per_seed = seed_accuracy(pa.Table.from_pylist(rows, schema=EVAL_SCHEMA))
    hm = per_seed.loc[0, "hm"]
    assert hm == pytest.approx(40000 / 1700, abs=1e-12)
    assert f"{hm:.2f}" == "23.53"
    assert f"{harmonic_mean(66.67, 14.29):.2f}" == "23.54"   # what a rounded-first pipeline would print


def test_harmonic_mean_conventions():
    assert harmonic_mean(80.0, 60.0) == pytest.approx(2 * 80 * 60 / 140)
    assert harmonic_mean(0.0, 0.0) == 0.0
    assert math.isnan(harmonic_mean(float("nan"), 50.0))
    assert list(harmonic_mean([50.0, 0.0], [50.0, 10.0])) == [50.0, 0.0]


def test_seed_accuracy_leaves_absent_splits_missing_not_zero():
    rows = rows_of(split="base", counts=((5, 10),))
    per_seed = seed_accuracy(pa.Table.from_pylist(rows, schema=EVAL_SCHEMA))
    assert per_seed.loc[0, "base"] == 50.0
    assert math.isnan(per_seed.loc[0, "novel"]) and math.isnan(per_seed.loc[0, "hm"])


def test_write_eval_round_trip_and_run_metrics(tmp_path):
    rows = (rows_of(split="base", counts=((8, 10), (9, 10)))
            + rows_of(split="novel", counts=((6, 10), (6, 10)), first_label=2)
            + rows_of(protocol="cross_dataset", target="dsB", split="all", counts=((1, 4), (2, 4))))
    path = tmp_path / "eval.parquet"
    write_eval(path, rows, provenance={"seed": 1})
    table = read_eval(path)
    assert list(table.columns) == EVAL_SCHEMA.names
    assert pq.read_schema(path).field("correct").type == pa.int64()
    assert read_provenance(path) == {"seed": 1}
    # base 17/20 = 85 %, novel 12/20 = 60 %, HM = 2*85*60/145 = 70.3448..; dsB 3/8 = 37.5 %
    assert run_metrics(table) == {
        "base_to_novel": {"dsA": {"base": 85.0, "novel": 60.0, "hm": 70.3448}},
        "cross_dataset": {"dsB": {"accuracy": 37.5}},
    }


def test_run_metrics_refuses_rows_of_two_runs():
    rows = rows_of(seed=1) + rows_of(seed=2)
    with pytest.raises(ValueError, match="one run"):
        run_metrics(pa.Table.from_pylist(rows, schema=EVAL_SCHEMA))


@pytest.mark.parametrize("change, message", [
    (lambda r: r.update(protocol="few_shot"), "unknown protocol 'few_shot'"),
    (lambda r: r.update(split="all"), "split 'all' in protocol base_to_novel"),
    (lambda r: r.update(target="dsZ"), "source 'dsA' != target 'dsZ'"),
    (lambda r: r.update(correct=5, total=4), "counts out of range"),
    (lambda r: r.update(total=0, correct=0), "counts out of range"),
    (lambda r: r.update(label=1), "class 1 counted twice"),
    (lambda r: r.update(hits=[True, True, False, False]), "per-image hits disagree with the counts"),
    (lambda r: r.update(hits=[True, True, True]), "per-image hits disagree with the counts"),
])
def test_write_eval_refuses_rows_that_break_the_contract(tmp_path, change, message):
    rows = rows_of(counts=((3, 4), (2, 2)))
    change(rows[0])
    path = tmp_path / "eval.parquet"
    with pytest.raises(DearError, match=message) as err:
        write_eval(path, rows, provenance=None)
    assert str(path) in str(err.value) and "\n" not in str(err.value)
    assert list(tmp_path.iterdir()) == []


def test_read_eval_names_the_file_missing_a_column(tmp_path):
    path = tmp_path / "eval.parquet"
    table = pa.Table.from_pylist(rows_of(), schema=EVAL_SCHEMA).drop_columns(["correct"])
    pq.write_table(table, path)
    with pytest.raises(DearError, match=r"eval\.parquet: missing columns \['correct'\]") as err:
        read_eval(path)
    assert "\n" not in str(err.value)


def test_read_evals_refuses_two_files_claiming_the_same_run(tmp_path):
    first, second = tmp_path / "a" / "eval.parquet", tmp_path / "b" / "eval.parquet"
    write_eval(first, rows_of(counts=((3, 4),)), provenance=None)
    write_eval(second, rows_of(counts=((1, 4),)), provenance=None)
    with pytest.raises(DearError) as err:
        read_evals([first, second])
    text = str(err.value)
    assert str(second) in text and str(first) in text and "dear/dsA/seed1" in text and "\n" not in text


def test_read_evals_row_order_does_not_depend_on_file_order(tmp_path):
    paths = []
    for seed in (2, 1):
        paths.append(tmp_path / f"seed{seed}" / "eval.parquet")
        write_eval(paths[-1], rows_of(seed=seed, counts=((seed, 4),)), provenance=None)
    assert read_evals(paths).equals(read_evals(paths[::-1]))
    assert list(read_evals(paths)["seed"]) == [1, 2]
