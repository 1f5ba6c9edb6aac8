"""`dear collect`: one method's runs of the study, the files behind each, and the report reading them (--runs)."""

import json
from pathlib import Path

import pyarrow as pa

from dear.pipeline import jobs
from dear.runtime.io import sha256_file, write_parquet
from dear.config.params import load_params
from dear.stages.report import Inputs, with_collected_runs
from tests import tiny_study
from tests.fake_run import invoke

SCHEMA = pa.schema([("x", pa.int64())])


def evaluated(evaluation: Path, model: Path) -> None:
    """An eval table recording `model` as evaluate does (its path and sha256), the model and its train log beside."""
    model.parent.mkdir(parents=True, exist_ok=True)
    model.write_bytes(f"weights of {model}".encode())
    write_parquet(model.with_name("train_log.parquet"), pa.table({"x": [1]}), SCHEMA)
    write_parquet(evaluation, pa.table({"x": [2]}), SCHEMA,
                  {"inputs": {"model": str(model)}, "inputs_sha256": {"model": sha256_file(model)}})


def test_collect_lists_the_study_s_runs_of_one_method_and_the_report_reads_them(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    params = tiny_study.write(tmp_path / "params.yaml")
    study = jobs.jobs(load_params(params))
    wanted = [(job.name, seed, Path(file)) for job in jobs.evaluations(study, "coop") for seed, file in job.records]
    for _, seed, evaluation in wanted:
        evaluated(evaluation, evaluation.parents[2] / "train" / f"seed{seed}" / "model.pt")
    for method, seed in (("coop", 9), ("mmrl", 1)):  # a seed the study does not have, another method's run
        evaluated(Path(f"runs/{method}/world_objects/eval/seed{seed}/eval.parquet"),
                  Path(f"runs/{method}/world_objects/train/seed{seed}/model.pt"))

    invoke("collect", "--params", str(params), "--method", "coop", "--out", "results/coop")

    listing = json.loads(Path("results/coop/runs.json").read_text())
    assert [(run["job"], run["seed"], run["eval"]) for run in listing["runs"]] == \
        [(name, seed, str(evaluation)) for name, seed, evaluation in wanted]  # not seed 9, nor mmrl's
    assert len(wanted) == 2 * (2 + 1)  # two seeds of two base-to-novel datasets and the transfer source
    for run in listing["runs"]:
        assert run["model"] == str(Path(run["eval"]).parents[2] / "train" / f"seed{run['seed']}" / "model.pt")
        assert run["sha256"] == {kind: sha256_file(run[kind]) for kind in ("eval", "model", "train_log")}
    assert Path("results/coop/.digest/folder.yaml").is_file()  # what DVC's report stage reads

    read = with_collected_runs(Inputs(evals=[], runs=[Path("results/coop/runs.json")]))
    assert read.evals == [evaluation for _, _, evaluation in wanted]
    assert read.models == [Path(run["model"]) for run in listing["runs"]]
    assert [run["protocol"] for run in listing["runs"]] == ["base_to_novel"] * 4 + ["transfer"] * 2
    assert read.train_logs == [Path(run["train_log"]) for run in listing["runs"][:4]]  # the loss curves: base-to-novel


def test_collect_s_record_names_what_decides_the_runs_and_not_the_other_methods(tmp_path):
    from dear.config import keys

    params = load_params(tiny_study.write(tmp_path / "params.yaml"))
    read = keys.reads(params, "collect", method="coop")
    assert "data.seeds" in read and "study.base_to_novel" in read and "study.transfer.source" in read
    assert not any(key.startswith(("study.methods", "train.", "report.")) for key in read)
