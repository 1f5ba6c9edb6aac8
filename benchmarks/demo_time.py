"""Where a finished run's time went, from its jobs' Snakemake `benchmark:` files (`logs/`).

    python benchmarks/demo_time.py                 # after `make demo`, in the project root
    python benchmarks/demo_time.py --logs smoke/logs --cores 2
    python benchmarks/demo_time.py --write-one-epoch demo-one-epoch/params.yaml
    python benchmarks/demo_time.py --first-training .snakemake/log/<the run's>.snakemake.log

Prints the job-seconds per stage and per method, and what the run would take with no
training step at all: the stages that run alone (world, backbone, profile, report) plus
every fuse and evaluate job and each training job's fixed cost (the time of a `train` job
that trains nothing: zero-shot's), spread over the cores. That bound says how much of the
demo's time no recipe can remove.

`--first-training LOG` prints how long after its start a Snakemake run started its first
training job (from the run's own log: its `Date:` and each job's `[time]` line), the figure of a
second study whose world and backbone come from the output cache (docs/engines.md).

`--write-one-epoch FILE` writes the demo's params with every trained method at one epoch in
every protocol (output root `demo-one-epoch`), for measuring the study with training cut to
its least (docs/performance.md, "The demo's time").
"""

from __future__ import annotations

import argparse
import copy
import re
from datetime import datetime
from pathlib import Path

import yaml

from dear.pipeline.runrecord import read_benchmarks

ALONE = ("world", "backbone", "profile", "report")  # nothing else can run beside them in the demo's graph
TRAINING = ("train", "train_transfer", "train_fewshot")


def method_of(job: str) -> str | None:
    """train/coop/world_objects -> coop; train_transfer/coop -> coop; backbone -> None."""
    parts = job.split("/")
    return parts[1] if len(parts) > 1 and parts[0] != "prepare" else None


def summary(logs: Path, cores: int) -> list[str]:
    jobs = read_benchmarks(logs)
    if jobs.empty:
        raise SystemExit(f"{logs}: no *.benchmark.tsv files; run `make demo` first (or pass --logs)")
    jobs["method"] = jobs["job"].map(method_of)
    lines = ["| stage | jobs | job-seconds |", "| --- | --- | --- |"]
    for rule, group in jobs.groupby("rule", sort=True):
        lines.append(f"| {rule} | {len(group)} | {group['seconds'].sum():.0f} |")
    lines += ["", "| method | job-seconds (train, fuse, evaluate; every protocol) |", "| --- | --- |"]
    by_method = jobs.dropna(subset=["method"]).groupby("method")["seconds"].sum().sort_values(ascending=False)
    lines += [f"| {method} | {seconds:.0f} |" for method, seconds in by_method.items()]

    alone = jobs[jobs["rule"].isin(ALONE)]["seconds"].sum()
    training = jobs[jobs["rule"].isin(TRAINING)]
    fixed = jobs[jobs["rule"].isin(TRAINING) & (jobs["method"] == "zeroshot")]["seconds"].mean()
    scoring = jobs[jobs["rule"].str.startswith(("fuse", "evaluate"))]["seconds"].sum()
    parallel = jobs[~jobs["rule"].isin(ALONE)]["seconds"].sum()
    no_training = alone + (scoring + fixed * len(training)) / cores
    lines += ["",
              f"- stages that run alone (world, backbone, profile, report): {alone:.0f} s",
              f"- the other jobs: {parallel:.0f} job-seconds, {parallel / cores:.0f} s on {cores} cores",
              f"- of them training: {training['seconds'].sum():.0f} job-seconds in {len(training)} jobs "
              f"(a job that trains nothing: {fixed:.1f} s)",
              f"- **with no training step at all: about {no_training / 60:.1f} min** "
              f"({alone:.0f} s alone + ({scoring:.0f} s fuse and evaluate + {len(training)} x {fixed:.1f} s) / {cores})"]
    return lines


def one_epoch(demo: dict, root: str = "demo-one-epoch") -> dict:
    """The demo's params (`demo`, params.yaml as read) with every trained method at one epoch in every protocol,
    under `root`: its base block, each of its dataset blocks and its transfer block say `epochs: 1`."""
    from dear.methods import entry
    from dear.methods.recipe import load

    raw = copy.deepcopy(demo)
    raw["output_root"], raw["data"]["root"] = root, f"{root}/world"
    recipes = raw["train"]["recipes"]
    for name in {entry(method).recipe for method in raw["study"]["methods"]}:
        if load(name).trains:
            block = recipes.setdefault(name, {})
            for node in (block, *block.get("datasets", {}).values(), block.setdefault("transfer", {})):
                node["epochs"] = 1
    return raw


def first_training(log: str) -> float | None:
    """Seconds from a Snakemake run's start (its log's `Date:`) to the `[time]` of its first train job; None: none."""
    started = re.search(r"^\s*Date: (\S+ \S+)$", log, re.M)
    job = re.search(r"^\[(\w{3} \w{3} [ \d]\d \d\d:\d\d:\d\d \d{4})\]\n(?:local)?rule train(?:_transfer)?:$", log, re.M)
    if not started or not job:
        return None
    start = datetime.strptime(started.group(1), "%Y-%m-%d %H:%M:%S")
    return (datetime.strptime(" ".join(job.group(1).split()), "%a %b %d %H:%M:%S %Y") - start).total_seconds()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--logs", type=Path, default=Path("logs"), help="the run's log folder (benchmark files)")
    parser.add_argument("--cores", type=int, default=2, help="cores the run had (snakemake --cores)")
    parser.add_argument("--write-one-epoch", type=Path, metavar="FILE",
                        help="write params.yaml with every trained method at one epoch to FILE, and stop")
    parser.add_argument("--first-training", type=Path, metavar="LOG",
                        help="print when the run of this Snakemake log started its first training job, and stop")
    args = parser.parse_args()
    if args.first_training:
        seconds = first_training(args.first_training.read_text())
        print("no training job in this log" if seconds is None else
              f"first training job started {seconds:.0f} s after the run's start")
        return
    if args.write_one_epoch:
        args.write_one_epoch.parent.mkdir(parents=True, exist_ok=True)
        demo = yaml.safe_load(Path("params.yaml").read_text())
        args.write_one_epoch.write_text(yaml.safe_dump(one_epoch(demo), sort_keys=False, width=120))
        return
    print("\n".join(summary(args.logs, args.cores)))


if __name__ == "__main__":
    main()
