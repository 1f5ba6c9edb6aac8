"""The study's jobs as both engines run them: their names, what they are given, where they write, their code.

One job per DVC stage (matrix items included) and per Snakemake job; the names
are DVC's (`train@mmrl-world_objects`), the rules of the Snakefile are the same
stages. A job appears only when the config asks for it: no transfer job with
`study.transfer: null` (or `enabled: false`), no few-shot job with
`study.few_shot: null` (or `enabled: false`), no base-to-novel job with
`study.base_to_novel: []`, no world job when nothing reads the world
(`dear.config.params.world_needed`). tests/e2e/test_engines.py checks these against both
engines' graphs.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

from dear.pipeline import codegraph
from dear.config.params import Params, world_needed

METHOD_STAGES = ("train", "fuse", "evaluate")  # stages whose job runs one method's module
# stages whose outputs one machine keeps for every study (Snakemake's `cache: True`, DVC's run-cache): their code
# also counts the versions of what computes them, so an upgraded torch draws and trains them anew
CACHED = ("world", "backbone")
LIBRARIES = ("torch", "torchvision", "open_clip_torch", "numpy", "pillow")


@dataclass(frozen=True)
class Job:
    name: str  # DVC's stage name, e.g. train@mmrl-world_objects
    stage: str  # the dear command it runs
    args: dict = field(default_factory=dict)  # what the command is given besides paths (method, dataset, classes)
    folder: str = ""  # its output folder (DVC's out; its digests are dear/pipeline/digest.py's)
    records: tuple[tuple[int | None, str], ...] = ()  # (seed, an output file that records what made it)
    method: str | None = None  # the method whose module it runs (train, fuse, evaluate)
    dataset: str | None = None  # the dataset it reads (prepare, train, fuse, evaluate)


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
                          *((seed, f"{folder}/fewshot-shots{k}-seed{seed}.parquet") for k in counts for seed in seeds)),
                         dataset=name))
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
                {"method": method, "classes": classes, **shots}
            found.append(Job(name, stage, args, f"{where}/{folder}",
                             tuple((seed, f"{where}/{folder}/seed{seed}/{file}") for seed in seeds), method, dataset))
    found += [Job(f"collect@{method}", "collect", {"method": method}, f"{r}results/{method}",
                  ((None, f"{r}results/{method}/runs.json"),), method) for method in study.methods]
    found.append(Job("report", "report", {}, f"{r}report", ((None, f"{r}report/provenance.json"),)))
    return found


def evaluations(study: list[Job], method: str) -> list[Job]:
    """The evaluate jobs of `method` in `study`, every protocol's: what `dear collect` lists, its Snakemake inputs."""
    return [job for job in study if job.stage == "evaluate" and job.method == method]


def find(params: Params, name: str) -> Job | None:
    """The job named `name` (DVC's name: rule@wildcards joined by '-'), None if the study has none."""
    return next((job for job in jobs(params) if job.name == name), None)


# --- the code a job runs (dear/pipeline/codegraph.py) --------------------------------------------

@dataclass(frozen=True)
class Code:
    """The code of a job: every package file it runs, with its fingerprint, and one sha256 over them."""

    name: str  # train-maple: what the code file is called (.dear/code/<name>.yaml)
    files: dict  # {package file, or `file:REGISTRY[name]` for one registry entry: its fingerprint}

    @property
    def sha256(self) -> str:
        return codegraph.fingerprint(self.files)


@lru_cache(maxsize=None)
def code(stage: str, method: str | None = None, dataset: str | None = None) -> Code:
    """The code `dear <stage>` runs (with `--method`, `--dataset` where it takes them).

    The import closure of `dear.stages.<stage>` and of the method's module
    (`dear.methods.REGISTRY`, or the installed package that declares it: its
    model's module and the module its entry point names, followed inside that
    package), the resources they name, the method's recipe files, and of each
    registry in the closure the one entry the job picks.
    The `dear` command around the stage (dear/cli.py parsing, dear/config/check.py
    refusing bad values) decides whether a job runs, never what it writes,
    and is not counted: a new check or a reworded help changes no job's code.
    The name carries the method and dataset only where an entry of theirs
    counts (train-maple, prepare-world_objects, world, train-clip_adapter).
    """
    from dear import methods
    from dear.methods import ROLES_RECIPE
    from dear.methods.recipe import recipe_files

    entry = methods.entry(method) if method else None
    roots = [f"dear.stages.{stage}"]
    if entry is not None:
        roots.append(entry.module_name)
    if entry is not None and entry.plugin is not None:
        roots.append(entry.plugin.target.partition(":")[0])  # where its declaration lies
        for root in roots[1:]:
            codegraph.add_root(root.split(".")[0])
    modules = codegraph.closure(roots)
    files = codegraph.fingerprints([codegraph.relative_file(m) for m in modules] + codegraph.resources(modules))
    if entry:
        paths = recipe_files(entry.recipe) + (recipe_files(ROLES_RECIPE) if entry.plain else [])  # +roles: roles.yaml
        files.update(codegraph.fingerprints([codegraph.file_key(path) for path in paths]))
    if stage in CACHED:
        files.update(_versions())
    names = []
    for module, pick in (("dear.methods", method), ("dear.data.coop", dataset)):
        if pick and module in modules:
            entries = codegraph.registry_entries(module)
            if pick in entries or module != "dear.methods":
                files[f"{codegraph.relative_file(module)}:{codegraph.REGISTRIES[module]}[{pick}]"] = \
                    entries.get(pick, "")
            names.append(pick)
    # in the order of the names below their top folder, as code files have always listed them (unchanged bytes)
    return Code("-".join([stage, *names]), dict(sorted(files.items(), key=lambda item: item[0].removeprefix("dear/"))))


def _versions() -> dict[str, str]:
    """{"versions/<library>": its version} of Python and LIBRARIES (read without importing them)."""
    import platform
    from importlib.metadata import PackageNotFoundError, version

    def of(name: str) -> str:
        try:
            return version(name)
        except PackageNotFoundError:
            return "not installed"

    return {"versions/python": platform.python_version(), **{f"versions/{name}": of(name) for name in LIBRARIES}}


def job_code(job: Job) -> Code:
    return code(job.stage, job.method if job.stage in METHOD_STAGES else None, job.dataset)


def code_sha256(stage: str, method: str | None = None, dataset: str | None = None) -> str:
    """sha256 of the code `dear <stage>` runs: recorded in every output of the job, compared by dear.pipeline.stale."""
    return code(stage, method if stage in METHOD_STAGES else None, dataset).sha256


def code_file(folder: str | Path, job: Job) -> Path:
    """<folder>/<code name>.yaml: the job's code as both engines read it (.dear/code/train-maple.yaml)."""
    return Path(folder) / f"{job_code(job).name}.yaml"


def write_code_files(folder: str | Path, study: list[Job]) -> list[Path]:
    """Write the code file of every job of `study` under `folder`, each only when its content changed.

    A file holds the job's code sha256 and each file's fingerprint. Unchanged files keep their time, so
    Snakemake (an input newer than the outputs) and DVC (a params file's values) rerun a job exactly when
    its code changed.
    """
    from dear.runtime.io import write_text
    from dear.config.strict_yaml import dump

    written = {}
    for job in study:
        found = job_code(job)
        path = Path(folder) / f"{found.name}.yaml"
        if path in written:
            continue
        text = (f"# The code `{found.name}` runs (dear.pipeline.jobs.code): the sha256 over every package file it runs, and each\n"
                "# file's fingerprint (its syntax tree without docstrings). Rewritten only when it changes; the input\n"
                "# of its jobs in both engines (the Snakefile, dvc.yaml).\n"
                + dump({"sha256": found.sha256, "files": found.files}))
        if not path.is_file() or path.read_text() != text:
            write_text(path, text)
        written[path] = True
    return list(written)
