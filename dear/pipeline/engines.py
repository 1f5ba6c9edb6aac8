"""Planning: what both engines run before a plan, so a plan never looks valid for a config the run would refuse.

- `config_problems`: the config files read strictly (dear.config.strict_yaml) and every
  check of `dear check` (dear.config.check); what depends only on the values stops a
  plan, what depends on this machine (data folders, weights, CUDA) is returned
  apart: a dry run may plan on another machine, a real run stops on it.
- `out_of_date` lines (dear.pipeline.stale): the jobs whose existing outputs were made
  otherwise than the config says.
- `dear check --jobs DIR` (`run`): DVC's `check` stage, first in dvc.yaml. DVC runs no code of
  ours before it plans, so this stage is what `dvc repro` runs first: the checks
  (a refused config stops the repro before any job), one file per job of the
  resolved values it reads (each stage reads its file as a params file, so DVC
  reruns it when, and only when, one of those values changed, and `dvc status`
  names the key), one file per job's code (`.dear/code/`, beside DIR: the
  fingerprint of the modules it runs, dear.pipeline.jobs.code; the same file the
  Snakefile reads as the job's input), and the outputs that are out of date
  marked as changed.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Iterable, NoReturn

from dear.pipeline import jobs as study_jobs
from dear.config import keys, strict_yaml
from dear.config.check import check_raw
from dear.pipeline.digest import mark_changed
from dear.errors import DearError
from dear.config.params import Params


def config_problems(files: Iterable[str], raw: dict, params_file: str) -> tuple[Params | None, list[str], list[str]]:
    """(params, lines that stop any plan, this machine's problems) of the config in use.

    `files` are the config files the engine read (each is read strictly: a key given twice, a value YAML
    1.1 and 1.2 read differently); `raw` is the config they make (with the engine's own overrides).
    """
    lines = []
    for path in files:
        try:
            strict_yaml.read(path)
        except DearError as err:
            lines += [f"error: {line}" for line in getattr(err, "lines", [str(err)])]
    if lines:
        return None, lines, []
    params, found = check_raw(raw, params_file)
    stop = [f"{'error' if finding.is_problem else 'note'}: {finding.text}" for finding in found
            if finding.kind != "machine"]
    return params, stop, [finding.text for finding in found if finding.kind == "machine"]


def stop(lines: list[str], params_file: str, what: str) -> NoReturn:
    """Print `lines` and a summary on stderr, and end the process (exit code 1)."""
    for line in lines:
        print(line, file=sys.stderr)
    count = sum(line.startswith("error: ") for line in lines)
    print(f"{params_file}: {count} problem(s); {what} (`dear check --params {params_file}` lists them again)",
          file=sys.stderr)
    raise SystemExit(1)


def warn(machine: list[str], params_file: str) -> None:
    """A dry run's view of this machine's problems: the plan is printed, and what the real run would stop on."""
    for line in machine:
        print(f"warning: {line}", file=sys.stderr)
    if machine:
        print(f"warning: {params_file}: the real run stops here before any job on {len(machine)} problem(s) of this "
              "machine above", file=sys.stderr)


def job_values(params: Params, job: study_jobs.Job) -> dict:
    """What DVC reads for `job`: the resolved values it reads, key by key, and its arguments."""
    return {**{f"--{key}": value for key, value in job.args.items()}, **keys.reads(params, job.stage, **job.args)}


def job_file(folder: Path, job: study_jobs.Job) -> Path:
    """<folder>/<stage>/<matrix item>.yaml: train@mmrl-world_objects -> train/mmrl-world_objects.yaml."""
    stage, _, item = job.name.partition("@")
    return folder / stage / f"{item or stage}.yaml"


def code_folder(jobs_folder: Path) -> Path:
    """Where `dear check --jobs DIR` writes the jobs' code files: DIR's sibling `code` (.dear/code beside .dear/jobs),
    the folder the Snakefile writes them to under the same output root."""
    return Path(jobs_folder).parent / "code"


def run(params: Params, params_file: str, folder: Path, study: list[study_jobs.Job] | None = None) -> list[str]:
    """`dear check --jobs`: write every job's values file under `folder` and its code file beside (`code_folder`),
    mark out-of-date outputs; the lines to print.

    `study`: the jobs (default: every job of the study `params` describes).
    """
    from dear.pipeline import stale

    study = study_jobs.jobs(params) if study is None else study
    found = stale.stale_jobs(params, study)
    for job, _ in found:
        mark_changed(Path(job.folder))
    write_job_files(params, folder, study)
    return [f"out of date: {line}" for _, line in found]


def write_job_files(params: Params, folder: Path, study: list[study_jobs.Job]) -> None:
    """Every job's values file under `folder` and its code file beside (`code_folder`), each rewritten only when it
    changed (its time is the time of the change), and no file of a job the study no longer has.

    Both engines write and read the same files: DVC's check stage (`run`) and the Snakefile while it plans; a
    stage reads them as params files in dvc.yaml and as inputs in the Snakefile, so a job reruns when, and only
    when, a value it reads or a module it runs changed; and they key Snakemake's between-workflow cache.
    """
    from dear.runtime.io import write_text

    folder, wanted = Path(folder), set()
    for job in study:
        path = job_file(folder, job)
        wanted.add(path)
        text = (f"# The values `{job.name}` reads, resolved (dear.config.keys); written by `dear check --jobs` and the Snakefile,\n"
                "# read by both engines (dvc.yaml: a params file; the Snakefile: an input).\n"
                + strict_yaml.dump(job_values(params, job)))
        if not path.is_file() or path.read_text() != text:  # unchanged files keep their time
            write_text(path, text)
    for old in folder.rglob("*.yaml") if folder.is_dir() else ():
        if old not in wanted:  # a job the study no longer has
            old.unlink()
    study_jobs.write_code_files(code_folder(folder), study)
