"""Threads declared: every rule says how many CPUs its job uses, and every stage uses exactly what it is given."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml

from dear.compute import cpus
from dear.config.params import Params
from tests import tiny_study
from tests.engines import BIN, ROOT, make_project, run

STAGE_OF_RULE = {"world": "world", "backbone": "backbone", "prepare": "prepare", "profile": "profile", "train": "train",
                 "train_transfer": "train", "fuse": "fuse", "fuse_transfer": "fuse", "evaluate": "evaluate",
                 "evaluate_transfer": "evaluate", "report": "report", "collect": "collect",
                 "train_fewshot": "train", "fuse_fewshot": "fuse", "evaluate_fewshot": "evaluate"}


def test_every_rule_that_runs_a_command_declares_its_threads():
    rules = {}
    for path in sorted((ROOT / "workflow" / "rules").glob("*.smk")):
        # a rule's body: the lines indented deeper than its `rule` line (rules inside `if` blocks included)
        for _, name, body in re.findall(r"^( *)rule (\w+):\n((?:\1    .*\n|\n)*)", path.read_text(), flags=re.M):
            rules[name] = body
    assert set(rules) == set(STAGE_OF_RULE)
    for name, body in rules.items():
        assert f'threads: cpus_of("{STAGE_OF_RULE[name]}")' in body, name


def params(**changes) -> Params:
    raw = tiny_study.params()
    for key, value in changes.items():
        section, name = key.split("__")
        raw[section][name] = value
    return Params.model_validate(raw)


@pytest.mark.parametrize("stage, given, threads, processes", [
    ("train", None, 1, 2),      # by hand: what the config asks for, 1 + compute.workers
    ("train", 1, 1, 0),         # one CPU: no loader process beside the stage
    ("evaluate", 2, 1, 1),
    ("profile", 6, 4, 2),       # more CPUs than loaders: the rest are torch threads
    ("prepare", None, 1, 3),    # data.workers image checkers
    ("prepare", 2, 1, 2),
    ("report", None, 1, 0),
    ("world", 2, 2, 0),
])
def test_a_stage_never_uses_more_cpus_than_it_was_given(stage, given, threads, processes, monkeypatch):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setattr(cpus, "available", lambda: 64)
    found = cpus.budget(params(compute__workers=2, data__workers=3), stage, given)
    assert (found.threads, found.processes) == (threads, processes)
    busy = found.processes if stage == "prepare" else found.threads + found.processes  # prepare waits on its checkers
    assert busy <= found.cpus


def test_by_hand_a_stage_takes_at_most_the_cpus_it_may_run_on(monkeypatch):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setattr(cpus, "available", lambda: 2)
    found = cpus.budget(params(compute__workers=8), "evaluate")
    assert (found.cpus, found.threads, found.processes) == (2, 1, 1)


def test_snakemake_s_threads_reach_the_stage_through_omp_num_threads(monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    found = cpus.budget(params(compute__workers=4), "train")
    assert (found.cpus, found.threads, found.processes, found.source) == (3, 1, 2, "OMP_NUM_THREADS")
    assert cpus.budget(params(), "train", 2).source == "dear --threads"  # the option wins


def test_the_backbone_keeps_its_thread_count_and_says_so_when_given_fewer(monkeypatch, caplog):
    """The embedded backbone's weights depend on backbone.threads: fewer CPUs do not change them, they warn."""
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    found = cpus.budget(params(backbone__threads=2), "backbone")
    assert (found.cpus, found.threads) == (1, 2)
    try:
        with caplog.at_level("WARNING", logger="dear.compute.cpus"):
            cpus.apply(found, "backbone")
        assert "backbone.threads is 2 but this job was given 1 CPU(s)" in caplog.text
        assert cpus.processes(4) == 0 and os.environ["OMP_NUM_THREADS"] == "2"
        assert torch.get_num_threads() == 2
    finally:
        cpus.release()
    assert os.environ["OMP_NUM_THREADS"] == "1" and cpus.processes(4) == 4  # as before the stage
    assert torch.get_num_threads() == 1


def _rule_threads(project: Path) -> dict[str, int]:
    """{rule: threads} of every job Snakemake plans (a job block without a `threads:` line has 1)."""
    text = run([str(BIN / "snakemake"), "-n", "-F", "--cores", "64"], project).stdout
    found = {}
    for block in text.split("\nrule ")[1:]:
        name = block.split(":", 1)[0]
        match = re.search(r"^    threads: (\d+)$", block, flags=re.M)
        found.setdefault(name, set()).add(int(match.group(1)) if match else 1)
    return {name: values.pop() for name, values in found.items() if len(values) == 1 and name != "all"}


@pytest.mark.slow
def test_snakemake_gives_each_job_what_dear_uses_by_itself_under_dvc_or_by_hand(tmp_path, monkeypatch):
    """The rule's threads == the stage's own default (DVC and a person get it), for a config where each differs."""
    raw = tiny_study.params()
    raw["data"]["workers"], raw["compute"]["workers"], raw["backbone"]["threads"] = 3, 2, 4
    raw["study"]["few_shot"] = {"datasets": ["world_objects_sketch"], "shots": [1]}  # every rule planned
    project = make_project(tmp_path / "project", yaml.safe_dump(raw, sort_keys=False))
    planned = _rule_threads(project)
    assert set(planned) == set(STAGE_OF_RULE)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setattr(cpus, "available", lambda: 64)  # the rules ask regardless of this machine; --cores scales
    loaded = Params.model_validate(raw)
    for rule, stage in STAGE_OF_RULE.items():
        assert planned[rule] == cpus.budget(loaded, stage).cpus, rule
    assert (planned["prepare"], planned["backbone"], planned["train"], planned["report"]) == (3, 4, 3, 1)


def test_benchmark_of_oversubscription_runs_its_scenarios():
    """benchmarks/oversubscription.py: a worker runs pretraining steps and reports their seconds."""
    out = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "oversubscription.py"), "--worker", "--steps", "1"],
                         capture_output=True, text=True, timeout=300, env={"OMP_NUM_THREADS": "1", "PATH": ""},
                         cwd=ROOT)
    assert out.returncode == 0, out.stderr[-2000:]
    times = yaml.safe_load(out.stdout.strip().splitlines()[-1])
    assert len(times) == 1 and times[0] > 0


def test_fewer_worker_processes_than_the_config_asks_for_is_a_warning(monkeypatch, caplog):
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    found = cpus.budget(params(compute__workers=8), "evaluate")
    try:
        with caplog.at_level("WARNING", logger="dear.compute.cpus"):
            cpus.apply(found, "evaluate")
        assert "evaluate: 1 worker process(es) instead of the config's 8: this job has 2 CPU(s) (from OMP_NUM_THREADS)" \
            in caplog.text
    finally:
        cpus.release()
