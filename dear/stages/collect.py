"""`dear collect`: the runs of one method in the study, with the files that hold each, for the report.

The report reads every evaluation, train log and model of every method. Both
engines give it one input per method instead (`results/<method>/`), so a
job's header stays a line a person reads and the report reads exactly the
study's runs, never a file a glob happened to match (a seed or dataset the
config no longer has). One entry per run (dear.pipeline.jobs: every evaluate job of the
method, every seed) in `results/<method>/runs.json`:

    {"job": "evaluate@coop-world_objects", "protocol": "base_to_novel", "seed": 1,
     "eval": ".../eval/seed1/eval.parquet", "model": ".../train/seed1/model.pt",
     "train_log": ".../train/seed1/train_log.parquet", "sha256": {"eval": ..., "model": ..., "train_log": ...}}

The model is the one the evaluation recorded (its provenance names the file
and its sha256); a model changed since it was evaluated is refused, as is a
missing evaluation. `dear report --runs results/*/runs.json` reads the files
and checks their sha256 again.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from dear.pipeline import jobs as study_jobs
from dear.errors import DearError
from dear.runtime.io import output_folder, provenance, read_provenance, sha256_file, write_json
from dear.config.params import Params

log = logging.getLogger("dear.collect")
RUNS = "runs.json"
PROTOCOLS = {"evaluate": "base_to_novel", "evaluate_transfer": "transfer", "evaluate_fewshot": "few_shot"}  # by rule


@dataclass(frozen=True)
class Inputs:
    method: str  # the study method whose runs are listed


@dataclass(frozen=True)
class Outputs:
    folder: Path  # results/<method>: runs.json
    FILES: ClassVar[tuple[str, ...]] = (RUNS,)


def run(params: Params, inputs: Inputs, outputs: Outputs) -> None:
    if inputs.method not in params.study.methods:
        raise DearError(f"--method {inputs.method}: not one of study.methods {list(params.study.methods)}; "
                        "collect a method of the study")
    runs = [listed(job.name, seed, Path(file)) for job in study_jobs.evaluations(study_jobs.jobs(params), inputs.method)
            for seed, file in job.records]
    files = {f"{kind}:{run['job']}:seed{run['seed']}": run[kind] for run in runs for kind in ("eval", "model")}
    study = params.study  # what decides the method's runs (dear.config.keys: collect), not the other methods
    record = provenance({"seeds": params.data.seeds, "base_to_novel": study.base_to_novel, "transfer": study.transfer,
                         "few_shot": study.few_shot}, inputs=files)
    with output_folder(outputs.folder, Outputs.FILES) as folder:
        write_json(folder / RUNS, {"method": inputs.method, "runs": runs, "provenance": record})
    log.info("%s: %d runs of %s listed", outputs.folder / RUNS, len(runs), inputs.method)


def listed(job: str, seed: int, evaluation: Path) -> dict:
    """One run: its eval table, the model that table was computed from, the model's train log, each file's sha256."""
    if not evaluation.is_file():
        raise DearError(f"{evaluation}: not found ({job}, seed {seed}); run that evaluation first")
    made = read_provenance(evaluation)
    model, expected = made.get("inputs", {}).get("model"), made.get("inputs_sha256", {}).get("model")
    if not model or not Path(model).is_file():
        raise DearError(f"{evaluation}: the model it was evaluated from ({model or 'not recorded'}) is not there; "
                        f"rerun {job}")
    found = {"eval": sha256_file(evaluation), "model": sha256_file(model)}
    if found["model"] != expected:
        raise DearError(f"{evaluation}: {model} changed after it was evaluated (its sha256 is not the one the "
                        f"evaluation recorded); rerun {job}")
    train_log = Path(model).with_name("train_log.parquet")
    train_log = train_log if train_log.is_file() else None  # a method that trains nothing may log nothing
    found["train_log"] = sha256_file(train_log) if train_log else None
    return {"job": job, "protocol": PROTOCOLS[job.split("@")[0]], "seed": seed, "eval": str(evaluation),
            "model": str(model), "train_log": str(train_log) if train_log else None, "sha256": found}
