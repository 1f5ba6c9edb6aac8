# Shared helpers for the rules: the fan-out lists and the code each stage runs.
from pathlib import Path

DATASETS = config["data"]["datasets"]
SEEDS = config["data"]["seeds"]

# Shared package modules every stage imports (params, atomic IO, CLI).
CORE = ["dear/cli.py", "dear/params.py", "dear/io.py", "dear/errors.py", "dear/progress.py"]


def code(*paths):
    """The package files a stage runs: folders expand to their .py files.

    dvc.yaml lists the same folders as directory deps; a test checks both agree.
    """
    files = []
    for path in paths:
        p = Path(path)
        files += sorted(str(f) for f in p.rglob("*.py")) if p.is_dir() else [path]
    return files
