"""`dear compare` pairs numbers, and says which it could not pair (issue 32: two runs on other datasets).

Two runs whose eval tables share no (method, protocol, dataset, seed) used to read as "27 numbers did not
move" while DeAR's base accuracy went from 45.00 to 25.00: a number of one run only is listed as not
paired, and a comparison where nothing pairs says so and exits 1. Built from eval tables written by hand
(no pipeline run).
"""

from __future__ import annotations

import json

import pandas as pd
from typer.testing import CliRunner

from dear.cli import app
from dear.pipeline.compare import UNPAIRED, _numbers_text, paired_numbers
from dear.report import paired
from dear.scoring.results import eval_frame, write_eval
from tests import tiny_study

OPTIONS = paired.Options(0.95, 100, 1)


def rows(method: str, dataset: str, seeds: list[int], right: int) -> pd.DataFrame:
    """A base-to-novel eval table: 2 base and 2 novel classes of 4 test images, `right` of them predicted right."""
    hits = [index < right for index in range(4)]
    return eval_frame([
        {"method": method, "source": dataset, "seed": seed, "protocol": "base_to_novel", "target": dataset,
         "split": split, "stream": "output", "label": label, "classname": f"{split}{label}", "correct": right,
         "total": 4, "hits": hits}
        for seed in seeds for split in ("base", "novel") for label in range(2)])


def test_numbers_of_other_datasets_are_not_paired_nor_counted_as_still():
    moved = paired_numbers(rows("dear", "world_objects", [1, 2], 3), rows("dear", "world_objects_b", [1, 2], 1), OPTIONS)
    assert (moved["verdict"] == UNPAIRED).all() and moved["mean"].isna().all()
    text = "\n".join(_numbers_text(moved, 2, 0.95))
    assert "0 numbers compared" in text and f"{len(moved)} could not be paired" in text
    assert "0 did not move" in text and "**Nothing could be paired**" in text
    assert "| dear | base-to-novel | world_objects_b | base |" in text


def test_a_method_of_one_run_only_is_listed_unpaired_beside_the_paired_ones():
    a = pd.concat([rows("dear", "world_objects", [1, 2], 3), rows("coop", "world_objects", [1, 2], 2)])
    moved = paired_numbers(a, rows("dear", "world_objects", [1, 2], 1), OPTIONS)
    dear, coop = moved[moved["method"] == "dear"], moved[moved["method"] == "coop"]
    assert (coop["verdict"] == UNPAIRED).all() and not (dear["verdict"] == UNPAIRED).any()
    assert dear["mean"].tolist() == [-50.0] * len(dear)  # 75% -> 25% on every split
    text = "\n".join(_numbers_text(moved, 2, 0.95))
    assert f"{len(dear)} numbers compared" in text and f"{len(coop)} could not be paired" in text
    assert "Nothing could be paired" not in text


def _run(folder, dataset: str, right: int) -> None:
    """A report folder whose record names one eval table (what `dear compare` reads)."""
    table = folder / "eval.parquet"
    folder.mkdir(parents=True)
    write_eval(table, rows("dear", dataset, [1], right), provenance={"seed": 1})
    record = {"params": tiny_study.params(), "models": [], "code": [], "data": {}, "versions": [], "devices": [],
              "evaluations": [{"file": str(table)}]}
    (folder / "record.json").write_text(json.dumps(record))


def test_compare_with_nothing_paired_says_so_and_exits_1(tmp_path):
    _run(tmp_path / "a", "world_objects", 3)
    _run(tmp_path / "b", "world_objects_b", 1)
    params = tiny_study.write(tmp_path / "params.yaml")
    result = CliRunner().invoke(app, ["compare", str(tmp_path / "a"), str(tmp_path / "b"), "--params", str(params)])
    assert result.exit_code == 1
    assert "**Nothing could be paired**" in result.stdout and "could not be paired (in one run only)" in result.stdout
    assert "error:" in result.output and "nothing could be paired" in result.output
    _run(tmp_path / "c", "world_objects", 1)  # the same dataset: every number pairs, exit 0
    result = CliRunner().invoke(app, ["compare", str(tmp_path / "a"), str(tmp_path / "c"), "--params", str(params)])
    assert result.exit_code == 0 and "0 could not be paired" in result.stdout, result.output
