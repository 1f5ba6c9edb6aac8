"""No-op `dvc repro` of the demo's pipeline (every stage and world image of `make demo`) against plain baselines.

    python benchmarks/dvc_noop.py                     # builds the tree (~6 min on 2 cores), then times
    python benchmarks/dvc_noop.py --tree /tmp/noop    # keep the built tree there, reuse it next time

The tree is the demo's graph and files: params.yaml with only the costly numbers
cut (backbone steps, shots, epochs, profiled images), so every stage, dataset,
method, seed and world image is there, as in `make demo`. Snakemake builds it,
DVC takes it over (`dvc repro check && dvc commit -f`, the documented hand-over), then
each command runs with nothing to do, interleaved, `--repeats` times (median and best:
the machine's load lengthens DVC's many small file writes far more than the baseline's):
- `dvc repro` of the demo (its check stage runs: `dear check --jobs`),
- `dear check --jobs` alone (the check stage's command: config checks, every output's record),
- `dvc repro` of a one-stage pipeline (DVC's own start-up: the plain baseline),
- `snakemake --cores 1` of the demo (the other engine on the same tree).
Each must report that nothing ran; the ratio is demo / one-stage pipeline.
"""

from __future__ import annotations

import argparse
import os
import re
import platform
import statistics
import sys
import tempfile
from datetime import date
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks")]
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("DVC_NO_ANALYTICS", "1")

from tests.engines import BIN, make_project, run  # noqa: E402
from timing import samples  # noqa: E402


def demo_params() -> str:
    """params.yaml with the slow numbers cut; the graph and the files on disk stay the demo's."""
    raw = yaml.safe_load((ROOT / "params.yaml").read_text())
    raw["backbone"]["steps"] = 4
    raw["data"].update(shots=2, val_shots=1)
    raw["profile"].update(max_images=64, svd_rank=16, texts_per_head=5)
    for recipe in raw["train"]["recipes"].values():
        recipe.update(epochs=1, warmup_epochs=0)
    return yaml.safe_dump(raw, sort_keys=False)


def built_tree(folder: Path) -> Path:
    """The demo's tree, built by Snakemake and handed to DVC (reused when already there)."""
    project = folder / "demo"
    if not (project / "report/results.md").is_file() or not (project / "dvc.lock").is_file():
        if not (project / "Snakefile").is_file():  # else an interrupted build: Snakemake resumes it
            project = make_project(project, demo_params())
        run([str(BIN / "snakemake"), "--cores", str(min(2, os.cpu_count() or 1))], project, timeout=3600)
        run([str(BIN / "dvc"), "repro", "check"], project)
        run([str(BIN / "dvc"), "commit", "-f"], project)
    return project


def one_stage(folder: Path) -> Path:
    """The plain baseline: a DVC project of one stage, run once."""
    project = folder / "one-stage"
    if not (project / "dvc.lock").is_file():
        project.mkdir(parents=True, exist_ok=True)
        run([str(BIN / "dvc"), "init", "--no-scm", "-q"], project)
        (project / "input.txt").write_text("one\n")
        (project / "dvc.yaml").write_text("stages:\n  copy:\n    cmd: cp input.txt output.txt\n"
                                          "    deps: [input.txt]\n    outs: [output.txt]\n")
        run([str(BIN / "dvc"), "repro"], project)
    return project


def quiet(project: Path, command: list[str], marker: str):
    """A function running `command` in `project` that fails when the command did anything (but DVC's check)."""
    def call():
        output = run(command, project)
        text = output.stdout + output.stderr
        ran = set(re.findall(r"Running stage '([^']+)'", text)) - {"check"}
        if marker not in text or ran or "out of date: " in text:
            raise AssertionError(f"{' '.join(command)} was not a no-op:\n{text[-2000:]}")
    return call


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tree", type=Path, help="folder to build (or reuse) the trees in (default: a temporary one)")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    folder = args.tree or Path(tempfile.mkdtemp(prefix="dear-bench-noop-"))
    demo, baseline = built_tree(folder), one_stage(folder)
    dvc, snakemake = str(BIN / "dvc"), str(BIN / "snakemake")
    runs = samples({
        "demo": quiet(demo, [dvc, "repro"], "didn't change, skipping"),
        "plan": quiet(demo, [str(BIN / "dear"), "check", "--params", "params.yaml", "--jobs", ".dear/jobs"], "no problems found"),
        "one_stage": quiet(baseline, [dvc, "repro"], "Data and pipelines are up to date"),
        "snakemake": quiet(demo, [snakemake, "--cores", "1"], "Nothing to be done"),
    }, args.repeats)
    median = {name: statistics.median(times) for name, times in runs.items()}
    best = {name: min(times) for name, times in runs.items()}
    stages = len(yaml.safe_load((demo / "dvc.lock").read_text())["stages"])
    load = os.getloadavg()[0]
    print(f"Measured {date.today()} on {platform.machine()} {os.cpu_count()} cores (load average {load:.1f}), "
          f"median of {args.repeats}, `python benchmarks/dvc_noop.py`\n")
    print("| no-op run | median s | best s | goal |\n| --- | --- | --- | --- |")
    rows = [(f"`dvc repro`, the demo ({stages} stages, `check` included)", "demo", "<= 3"),
            ("`dear check --jobs` alone (the check stage's command)", "plan", "-"),
            ("`dvc repro`, one stage (baseline)", "one_stage", "-"),
            ("`snakemake --cores 1`, the demo", "snakemake", "-")]
    for label, name, goal in rows:
        print(f"| {label} | {median[name]:.2f} | {best[name]:.2f} | {goal} |")
    print(f"| ratio demo / one stage | {median['demo'] / median['one_stage']:.2f}x | "
          f"{best['demo'] / best['one_stage']:.2f}x | - |")


if __name__ == "__main__":
    main()
