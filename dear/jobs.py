"""The study's jobs as both engines run them: their names, what they are given, where they write, their code.

One job per DVC stage (matrix items included) and per Snakemake job; the names
are DVC's (`train@mmrl-world_objects`), the rules of the Snakefile are the same
stages. A job appears only when the config asks for it: no transfer job with
`study.transfer: null` (or `enabled: false`), no few-shot job with
`study.few_shot: null` (or `enabled: false`), no base-to-novel job with
`study.base_to_novel: []`, no world job when nothing reads the world
(`dear.params.world_needed`). tests/test_engines.py checks these against both
engines' graphs.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

from dear.params import Params, world_needed

# The package files each stage runs (relative to the package); folders stand for every file below them.
# The Snakefile's `code()` lists and dvc.yaml's deps are these (tests/test_engines.py checks dvc.yaml).
CORE = ("cli.py", "params.py", "strict_yaml.py", "io.py", "errors.py", "progress.py")
MODEL = (*CORE, "model", "methods", "data/manifest.py", "resources")
EVAL = (*MODEL, "evaluation.py", "results.py", "train")
CODE = {
    "world": (*CORE, "stages/world.py", "data"),
    "backbone": (*MODEL, "stages/backbone.py", "data"),
    "prepare": (*CORE, "stages/prepare.py", "data"),
    "profile": (*MODEL, "stages/profile.py", "report", "data"),
    "train": (*MODEL, "stages/train.py", "train"),
    "fuse": (*EVAL, "stages/fuse.py"),
    "evaluate": (*EVAL, "stages/evaluate.py"),
    "report": (*CORE, "stages/report.py", "report", "results.py", "model/ablation.py"),
}
PACKAGE = Path(__file__).resolve().parent


@dataclass(frozen=True)
class Job:
    name: str  # DVC's stage name, e.g. train@mmrl-world_objects
    stage: str  # the dear command it runs
    args: dict = field(default_factory=dict)  # what the command is given besides paths (method, dataset, classes)
    folder: str = ""  # its output folder (DVC's out; its digests are dear/digest.py's)
    records: tuple[tuple[int | None, str], ...] = ()  # (seed, an output file that records what made it)


def jobs(params: Params) -> list[Job]:
    """Every job of the study `params` describes, in pipeline order; paths under its output_root."""
    r = "" if os.path.normpath(params.output_root) == "." else os.path.normpath(params.output_root) + "/"
    seeds, study = params.data.seeds, params.study
    found = [Job("world", "world", {}, f"{r}world", ((None, f"{r}world/card.json"),))] if world_needed(params) else []
    found.append(Job("backbone", "backbone", {}, f"{r}backbone", ((None, f"{r}backbone/card.json"),)))
    for name in params.data.datasets:
        folder = f"{r}data/{name}"
        counts = study.few_shot_on.shots if study.few_shot_on and name in study.few_shot_on.datasets else []
        found.append(Job(f"prepare@{name}", "prepare", {"dataset": name}, folder,
                         ((None, f"{folder}/manifest.parquet"),
                          *((seed, f"{folder}/fewshot-seed{seed}.parquet") for seed in seeds),
                          *((seed, f"{folder}/fewshot-shots{k}-seed{seed}.parquet") for k in counts for seed in seeds))))
    roles = f"{r}roles/{params.profile.dataset}"
    found.append(Job("profile", "profile", {}, roles, ((None, f"{roles}/roles.parquet"),)))
    runs = [(f"@{method}-{dataset}", f"{r}runs/{method}/{dataset}", method, dataset, "base")
            for method in study.methods for dataset in study.base_to_novel]
    if study.transfer_on is not None:
        runs += [(f"_transfer@{method}", f"{r}transfer/{method}", method, study.transfer_on.source, "all")
                 for method in study.methods]
    runs += [(f"_fewshot@{method}-{dataset}-{k}", f"{r}fewshot/{method}/{dataset}/shots{k}", method, dataset, "all", k)
             for method in study.methods for dataset, k in study.few_shot_runs()]
    for stage, folder, file in (("train", "train", "train_log.parquet"), ("fuse", "fuse", "fusion.json"),
                                ("evaluate", "eval", "eval.parquet")):
        for suffix, where, method, dataset, classes, *few in runs:
            name = stage + suffix
            shots = {"shots": few[0]} if few and stage != "fuse" else {}  # few-shot runs: K (fuse needs none)
            args = {"method": method, "dataset": dataset, "classes": classes, **shots} if stage == "train" else \
                {"classes": classes, **shots}
            found.append(Job(name, stage, args, f"{where}/{folder}",
                             tuple((seed, f"{where}/{folder}/seed{seed}/{file}") for seed in seeds)))
    found.append(Job("report", "report", {}, f"{r}report", ((None, f"{r}report/provenance.json"),)))
    return found


def find(params: Params, name: str) -> Job | None:
    """The job named `name` (DVC's name: rule@wildcards joined by '-'), None if the study has none."""
    return next((job for job in jobs(params) if job.name == name), None)


def code_files(stage: str) -> list[str]:
    """The package files `stage` runs, relative to the package, folders expanded."""
    files = []
    for entry in CODE[stage]:
        path = PACKAGE / entry
        files += sorted(str(found.relative_to(PACKAGE)) for found in path.rglob("*")
                        if found.is_file() and "__pycache__" not in found.parts) if path.is_dir() else [entry]
    return files


@lru_cache(maxsize=None)
def code_sha256(stage: str) -> str:
    """sha256 over the files `stage` runs (names and contents): recorded in every output of the stage."""
    digest = hashlib.sha256()
    for name in code_files(stage):
        digest.update(f"{name}\0{hashlib.sha256((PACKAGE / name).read_bytes()).hexdigest()}\n".encode())
    return digest.hexdigest()
