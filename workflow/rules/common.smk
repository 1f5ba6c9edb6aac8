# Shared helpers for the rules: the fan-out lists and the code each stage runs.
from pathlib import Path

STUDY = config["study"]
SEEDS = config["data"]["seeds"]
METHODS = STUDY["methods"]
B2N = STUDY["base_to_novel"]
SOURCE = STUDY["transfer"]["source"]
TARGETS = STUDY["transfer"]["cross_dataset"] + STUDY["transfer"]["domain_generalization"]
PROFILED = config["profile"]["dataset"]
ROLES = f"roles/{PROFILED}/roles.parquet"
BACKBONE = "backbone"  # card.json, and model.pt when trained here (real weights are used where they lie)
WORLD = "world/card.json"

wildcard_constraints:
    seed=r"\d+",
    method="|".join(METHODS),

# Shared package modules every stage imports (params, atomic IO, CLI).
CORE = ["dear/cli.py", "dear/params.py", "dear/io.py", "dear/errors.py", "dear/progress.py"]
# What every stage that runs a CLIP imports besides its own module.
MODEL = [*CORE, "dear/model", "dear/data/manifest.py", "dear/resources"]


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


def section(*names):
    """Parameter sections a rule depends on: a change reruns it (Snakemake's params trigger)."""
    return lambda wildcards: {name: config[name] for name in names}
