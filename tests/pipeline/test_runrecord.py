"""dear.pipeline.runrecord: benchmark files as the engines write them, model metadata, the record of a run."""

import io as bytes_io
import json

import pytest
import torch

from dear.errors import DearError
from dear.pipeline.runrecord import _recipes, benchmark_path, benchmarked, read_benchmarks, read_model

SNAKEMAKE_HEADER = "s\th:m:s\tmax_rss\tmax_vms\tmax_uss\tmax_pss\tio_in\tio_out\tmean_load\tcpu_time"


def test_under_dvc_a_command_leaves_the_benchmark_file_snakemake_would(tmp_path, monkeypatch):
    log = tmp_path / "logs" / "train" / "coop" / "dsA.log"
    assert benchmark_path(log) == tmp_path / "logs/train/coop/dsA.benchmark.tsv"
    monkeypatch.delenv("DVC_STAGE", raising=False)
    with benchmarked(log):
        pass
    assert not benchmark_path(log).exists()  # Snakemake writes its own around the job
    monkeypatch.setenv("DVC_STAGE", "train@coop-dsA")
    with benchmarked(log):
        sum(range(10**6))
    lines = benchmark_path(log).read_text().splitlines()
    assert lines[0] == SNAKEMAKE_HEADER and len(lines) == 2
    jobs = read_benchmarks(tmp_path / "logs")
    assert list(jobs["job"]) == ["train/coop/dsA"] and list(jobs["rule"]) == ["train"]
    assert jobs["seconds"].iloc[0] >= 0
    with pytest.raises(RuntimeError), benchmarked(tmp_path / "failed.log"):
        raise RuntimeError("the stage failed")
    assert not benchmark_path(tmp_path / "failed.log").exists()  # as Snakemake: no record of a failed job


def test_benchmark_files_are_read_per_job_and_a_bad_one_is_named(tmp_path):
    (tmp_path / "prepare").mkdir()
    (tmp_path / "world.benchmark.tsv").write_text(f"{SNAKEMAKE_HEADER}\n2.5\t0:00:02\t300.5\t900\t250\t260\t1\t2\t80\t2.0\n")
    (tmp_path / "prepare/dsA.benchmark.tsv").write_text(
        f"{SNAKEMAKE_HEADER}\n1.0\t0:00:01\tNA\tNA\tNA\tNA\tNA\tNA\tNA\t0\n3.0\t0:00:03\t120\t9\t9\t9\t0\t0\t50\t1\n")
    jobs = read_benchmarks(tmp_path).set_index("job")
    assert jobs.loc["world", ["rule", "seconds", "max_rss_mb"]].tolist() == ["world", 2.5, 300.5]
    assert jobs.loc["prepare/dsA", ["rule", "seconds", "max_rss_mb"]].tolist() == ["prepare", 2.0, 120.0]
    (tmp_path / "prepare/dsB.benchmark.tsv").write_text("not\ta benchmark\n")
    with pytest.raises(DearError, match="prepare/dsB.benchmark.tsv: not a Snakemake benchmark file"):
        read_benchmarks(tmp_path)
    assert read_benchmarks(tmp_path / "absent").empty


def _model_file(path, meta: dict):
    buffer = bytes_io.BytesIO()
    torch.save({"format": "dear-trained/1", "meta": json.dumps(meta), "state": {}}, buffer)
    path.write_bytes(buffer.getvalue())
    return path


def test_a_model_files_record_reads_todays_and_the_refactors_metadata(tmp_path):
    made_by = {"params": {"train": {"recipes": {"coop": {"epochs": 30}}}}, "code": {"commit": "abc", "clean": True},
               "versions": {"torch": "2"}, "devices": {"cpu": "x"}}
    today = read_model(_model_file(tmp_path / "a.pt", {"method": {"name": "coop"}, "dataset": "dsA", "seed": 1,
                                                         "classes": "base", "params_sha256": "h1",
                                                         "provenance": made_by}))
    assert today["method"] == "coop" and today["recipe"] == {"train (recorded section)": made_by["params"]["train"]}
    assert today["code"] == {"commit": "abc", "clean": True}
    refactored = read_model(_model_file(tmp_path / "b.pt", {"method": "coop", "recipe": {"epochs": 30, "lr": 0.002},
                                                            "dataset": "dsA", "seed": 1, "provenance": made_by}))
    assert refactored["method"] == "coop" and refactored["recipe"] == {"epochs": 30, "lr": 0.002}
    (tmp_path / "broken.pt").write_bytes(b"not a model")
    with pytest.raises(DearError, match="broken.pt: not a readable model.pt"):
        read_model(tmp_path / "broken.pt")


def test_the_record_shows_each_runs_recipe_and_where_it_departs_from_the_authors():
    settings = {"optimizer": {"value": "sgd", "source": "coop.yaml"}, "lr": {"value": 0.002, "source": "coop.yaml"},
                "batch_size": {"value": 4, "source": "params", "authors": 32}, "epochs": {"value": 2, "source": "x"}}
    models = [{"method": "coop", "dataset": "dsA", "classes": "base", "seed": seed,
               "recipe": {"protocol": "base_to_novel", "settings": settings}} for seed in (1, 2)]
    models.append({"method": "coop", "dataset": "dsA", "classes": "base", "seed": 3, "recipe": {"train": {}}})
    lines = _recipes(models)
    assert lines[2] == "| coop | dsA | base_to_novel | sgd | 0.002 | 4 | 2 | batch_size 4 (authors 32) |"
    assert len([line for line in lines if line.startswith("| coop")]) == 1  # one row for the seeds of a run
