"""Read the pipeline graph as Snakemake and DVC see it, and run either engine."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
# What a fresh clone holds of the pipeline (the kept output folders' .gitignore included)
PIPELINE_FILES = ["Snakefile", "dvc.yaml", "workflow", "dear", "configs", ".dvcignore",
                  "data/.gitignore", "runs/.gitignore", "transfer/.gitignore", "fewshot/.gitignore",
                  "results/.gitignore"]


@dataclass
class Step:
    """One command of the graph with what it reads and writes (paths relative to the project)."""

    deps: set[str] = field(default_factory=set)
    outs: set[str] = field(default_factory=set)


def engine_env(**extra: str) -> dict:
    """The environment of an engine run in a test: offline, and without the machine's output cache (the default
    workflow profile, profiles/default, is not among PIPELINE_FILES, and DVC's stages do not look in it: every test
    draws and trains its own; tests/e2e/test_cache.py turns both on, with a cache of its own); `extra` on top."""
    env = dict(os.environ, HF_HUB_OFFLINE="1", DVC_NO_ANALYTICS="1", PYTHONHASHSEED="0", DEAR_MACHINE_CACHE="off",
               **extra)
    env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"
    return env


def make_project(folder: Path, params_text: str) -> Path:
    """A runnable copy of the pipeline definition in `folder`, with its own params and DVC repo."""
    folder.mkdir(parents=True, exist_ok=True)
    for name in PIPELINE_FILES:
        source = ROOT / name
        if source.is_dir():
            shutil.copytree(source, folder / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        else:
            (folder / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, folder / name)
    (folder / "params.yaml").write_text(params_text)
    run(["dvc", "init", "--no-scm", "-q"], folder)
    (folder / ".dvc" / "config").write_text("[core]\n    no_scm = True\n    analytics = false\n    check_update = false\n")
    return folder


def run(command: list[str], cwd: Path, timeout: int = 600, env: dict | None = None) -> subprocess.CompletedProcess:
    """`command` in `cwd` with the engines' environment (and `env` on top: a plugin's folder on PYTHONPATH)."""
    result = subprocess.run(command, cwd=cwd, env=engine_env(**(env or {})), capture_output=True, text=True,
                            timeout=timeout)
    if result.returncode != 0:
        raise AssertionError(f"{' '.join(command)} failed:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}")
    return result


def snakemake_graph(project: Path, targets: list[str] = (), options: list[str] = ()) -> dict[str, Step]:
    """{shell command: Step} of every job, parsed from `snakemake -n -p -F` (the full DAG, nothing run)."""
    text = run([str(BIN / "snakemake"), "-n", "-p", "-F", "--cores", "1", *targets, *options], project).stdout
    steps: dict[str, Step] = {}
    for block in text.split("\nrule ")[1:]:
        fields = {}
        for line in block.splitlines():
            key, sep, value = line.strip().partition(": ")
            if sep:
                fields.setdefault(key, value)
        if fields.get("Shell command", "None") == "None":  # the `all` target
            continue
        paths = lambda key: {path for path in fields.get(key, "").split(", ") if path}
        steps[" ".join(fields["Shell command"].split())] = Step(deps=paths("input"), outs=paths("output"))
    return steps


def dvc_graph(project: Path, dvcfile: str = "dvc.yaml") -> dict[str, Step]:
    """{command: Step} for every (matrix-expanded) stage of `dvcfile`, paths relative to the project.

    A digest read as a params file (X/.digest/folder.yaml, X/.digest/NAME.yaml) stands
    for what it digests (X, X/NAME: dear/pipeline/digest.py); the config's own sections and the jobs'
    values files (.dear/jobs/) are left out, and so is the `check` stage (`dear check --jobs`), which
    Snakemake does while it plans (docs/engines.md).
    """
    from dvc.repo import Repo

    steps = {}
    with Repo(str(project)) as repo:
        for stage in repo.index.stages:
            if Path(stage.dvcfile.path).resolve() != (project / dvcfile).resolve():
                continue
            if stage.cmd.startswith("dear check "):  # DVC's check stage: Snakemake does it while it plans
                continue
            wdir = Path(os.path.relpath(stage.wdir, project))
            deps = {_digested(os.path.normpath(wdir / dep.def_path)) for dep in stage.deps}
            outs = {os.path.normpath(wdir / out.def_path) for out in stage.outs}
            steps[" ".join(stage.cmd.split())] = Step(deps={dep for dep in deps if dep}, outs=outs)
    return steps


def _digested(path: str) -> str | None:
    """What a dependency stands for: a digest -> its folder or file; a job's code or values file -> itself; a config
    file -> None; else itself."""
    parts = Path(path).parts
    if ".dear" in parts and parts[parts.index(".dear") + 1] in ("code", "jobs"):  # a job's code or values file:
        return path  # an input in both engines
    if ".digest" in parts:
        index = parts.index(".digest")
        folder = Path(*parts[:index])
        return str(folder) if parts[-1] == "folder.yaml" else str(folder / parts[-1].removesuffix(".yaml"))
    return None if path.endswith(".yaml") else path


def covered(path: str, by: set[str]) -> bool:
    """True when `path` is one of `by` or lies inside a folder of `by`."""
    return any(path == other or path.startswith(other.rstrip("/") + "/") for other in by)

def dvc_ran(stdout: str) -> set[str]:
    """The stages `dvc repro` ran (or would run, with --dry)."""
    return set(re.findall(r"Running stage '([^']+)'", stdout))


def snakemake_planned(stdout: str) -> set[str]:
    """The jobs `snakemake -n` plans, named as DVC names its stages (train@dear-world_objects)."""
    names = set()
    for block in stdout.split("\nrule ")[1:]:
        rule = block.split(":", 1)[0].strip()
        found = re.search(r"wildcards: (.*)", block)
        items = dict(item.split("=", 1) for item in found.group(1).split(", ")) if found else {}
        values = [items[key] for key in ("method", "dataset") if key in items]
        names.add(rule + (f"@{'-'.join(values)}" if values else ""))
    return names - {"all"}


def handed_to_dvc(snakemake_project: Path, tree: Path, env: dict | None = None) -> Path:
    """A copy of the Snakemake-built tree that DVC records as it is (docs/engines.md: the hand-over)."""
    shutil.copytree(snakemake_project, tree, symlinks=True)  # copy2: the same mtimes
    run([str(BIN / "dvc"), "repro", "check"], tree, env=env)  # the jobs' values files, which DVC records with the tree
    run([str(BIN / "dvc"), "commit", "-f"], tree, env=env)
    return tree
