# Shared helpers for the rules: the config in use, where its outputs go, the fan-out lists,
# and the code each stage runs.
import os
from pathlib import Path

import yaml
from snakemake.exceptions import WorkflowError

from dear.cpus import wanted as cpus_wanted

# Every path a rule writes is under the config's output_root ('.' for the demo): R is the prefix
# shell commands put before each path ("" or "<root>/"), rooted() the same for input/output lists.
ROOT = os.path.normpath(config["output_root"])
R = "" if ROOT == "." else ROOT + "/"


def rooted(path):
    """`path` (a pattern relative to the output root) as Snakemake and the shell see it."""
    return R + path


def params_file():
    """The file every `dear --params` reads: exactly the config this run plans with.

    params.yaml, or the one --configfile as given; with several, or with --config
    overrides, the merged config written under the output root (rewritten only when
    it changes, so a Slurm job re-reading this Snakefile never races a running job).
    """
    given = [os.path.relpath(path) if Path(path).resolve().is_relative_to(Path.cwd()) else str(path)
             for path in workflow.overwrite_configfiles]
    if not workflow.config_settings.config and len(given) <= 1:
        return given[0] if given else "params.yaml"
    merged = rooted("logs/snakemake-config.yaml")
    text = ("# The config of this Snakemake run: its --configfile files merged, then --config on top.\n"
            "# Written by the Snakefile; every job of the run reads it (dear --params).\n"
            + yaml.safe_dump(dict(config), sort_keys=False))
    if not os.path.exists(merged) or Path(merged).read_text() != text:
        os.makedirs(os.path.dirname(merged), exist_ok=True)
        Path(merged + ".tmp").write_text(text)
        os.replace(merged + ".tmp", merged)
    return merged


CONFIG = params_file()
if config["data"]["source"] == "embedded" and os.path.normpath(config["data"]["root"]) != rooted("world"):
    raise WorkflowError(f"{CONFIG}: data.root is {config['data']['root']!r}, but this config's embedded world is "
                        f"drawn into {rooted('world')!r} (output_root/world); set data.root: {rooted('world')}")

STUDY = config["study"]
SEEDS = config["data"]["seeds"]
METHODS = STUDY["methods"]
B2N = STUDY["base_to_novel"]
SOURCE = STUDY["transfer"]["source"]
TARGETS = STUDY["transfer"]["cross_dataset"] + STUDY["transfer"]["domain_generalization"]
PROFILED = config["profile"]["dataset"]
ROLES = rooted(f"roles/{PROFILED}/roles.parquet")
BACKBONE = rooted("backbone")  # card.json, and model.pt when trained here (real weights are used where they lie)
WORLD = rooted("world/card.json")

wildcard_constraints:
    seed=r"\d+",
    method="|".join(METHODS),

# Shared package modules every stage imports (params, atomic IO, CLI).
CORE = ["dear/cli.py", "dear/params.py", "dear/io.py", "dear/errors.py", "dear/progress.py"]
# What every stage that runs a CLIP imports besides its own module.
MODEL = [*CORE, "dear/model", "dear/methods", "dear/data/manifest.py", "dear/resources"]


def code(*paths):
    """The package files a stage runs: folders expand to their files.

    dvc.yaml lists the same folders as directory deps; a test checks both agree.
    """
    files = []
    for path in paths:
        p = Path(path)
        files += sorted(str(f) for f in p.rglob("*") if f.is_file() and "__pycache__" not in f.parts) if p.is_dir() else [path]
    return files


def seeds_of(pattern):
    """`pattern`'s files for every seed; other {wildcards} stay for Snakemake to fill."""
    return expand(pattern, seed=SEEDS, allow_missing=True)


def cpus_of(stage):
    """A rule's `threads:`: the CPUs `dear <stage>` uses under this config by itself (dear/cpus.py), so that
    Snakemake never runs more than --cores at once. It hands them to the job as OMP_NUM_THREADS, which the stage
    reads, and scales them down to --cores; a DVC or by-hand run uses the same number."""
    return cpus_wanted(config, stage)


def section(*names):
    """Parameter sections a rule depends on: a change reruns it (Snakemake's params trigger)."""
    return lambda wildcards: {name: config[name] for name in names}


def slurm_logs_stay_under_the_root():
    """Refuse to start when the Slurm executor's job logs would land outside this config's output root."""
    logdir = getattr(workflow.executor_settings, "logdir", None)
    if ROOT == "." or logdir is None or Path(logdir).resolve().is_relative_to(Path(ROOT).resolve()):
        return
    raise WorkflowError(f"Slurm job logs would go to {logdir}, outside output_root {ROOT} of {CONFIG}; "
                        f"add --slurm-logdir {rooted('logs/slurm')}")
