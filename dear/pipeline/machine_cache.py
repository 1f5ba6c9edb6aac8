"""One embedded world and backbone per machine, whichever engine runs the study (docs/engines.md).

Every study on a machine whose world and backbone values, code and library
versions are the same needs the same `world/` and `backbone/` folders. They
live once in the machine's output cache, `$SNAKEMAKE_OUTPUT_CACHE` (default
`~/.cache/dear/snakemake`, `LOCATION`):

- Snakemake keeps them there itself: `profiles/default` (the workflow profile
  Snakemake reads whenever it is present) turns its output cache on for the
  rules marked `cache: True`, and the Snakefile sets this default location.
- DVC cannot: its run-cache keys a stage on its command and its paths, and
  another config's stage has another `--params` and output root, so it never
  matches (dvc/stage/cache.py, `_get_stage_hash`). So a `dear world` or
  `dear backbone` that DVC runs (`DVC_STAGE` set) first looks in the same
  folder for an output whose own record says it is exactly what this job
  would make (`dear.pipeline.stale`'s comparison: the stage, the values it reads, its
  code, the hash of each input file), checks it against its digest, and copies
  it in place of running; an output it makes is kept there
  (`dear-<stage>-<key>`) for the next config. Snakemake's own entries (named
  by its 64-hex hash) are found the same way, so a DVC study reuses what a
  Snakemake study made.

Outside DVC nothing here runs: Snakemake restores before a job starts, and a
`dear backbone` run by hand trains. `DEAR_MACHINE_CACHE=off` turns it off
under DVC too (the tests' engines run so: tests/engines.py).
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import tempfile
from pathlib import Path

from dear.pipeline.digest import ALL, FOLDER, SNAKEMAKE_STAMP, damaged
from dear.runtime.io import output_folder, sha256_file, sha256_json

log = logging.getLogger("dear.machine_cache")

LOCATION = "SNAKEMAKE_OUTPUT_CACHE"  # the environment variable Snakemake reads, and its default below
SWITCH = "DEAR_MACHINE_CACHE"  # off: DVC's world and backbone stages neither look in the cache nor keep theirs
DEFAULT = Path("~/.cache/dear/snakemake")
PREFIX = "dear-"  # entries this module stores (Snakemake names its own by a 64-hex hash)
# the input files a record names, as the stage's --options give them: (option, file inside it)
INPUT_FILES = {"backbone": {"world_card": ("world", "card.json")}}
RECORD = "card.json"  # the file of world/ and backbone/ that records what made them


def location() -> Path:
    """The machine's output cache: $SNAKEMAKE_OUTPUT_CACHE, else ~/.cache/dear/snakemake."""
    given = os.environ.get(LOCATION)
    return Path(given).expanduser() if given else DEFAULT.expanduser()


def active(stage: str) -> bool:
    """Whether `dear <stage>` looks in the machine's cache: world and backbone, run by DVC."""
    from dear.pipeline.jobs import CACHED

    return stage in CACHED and "DVC_STAGE" in os.environ and os.environ.get(SWITCH, "on") != "off"


def wanted(stage: str, job: dict, inputs: dict) -> dict:
    """What an entry's record must hold to be this job's output: its job (stage, arguments, values read,
    code) and the sha256 of each input file the record names."""
    files = {name: Path(inputs[option]) / file for name, (option, file) in INPUT_FILES.get(stage, {}).items()
             if inputs.get(option) is not None}
    return {"job": {key: job.get(key) for key in ("stage", "args", "reads", "code")},
            "inputs": {name: sha256_file(path) for name, path in files.items() if path.is_file()}}


def find(stage: str, want: dict) -> Path | None:
    """An entry of the machine's cache that is this job's output, checked against its digest; None if none."""
    root = location()
    if not root.is_dir():
        return None
    own = root / f"{PREFIX}{stage}-{sha256_json(want)}"
    candidates = [own] + sorted(entry for entry in root.iterdir() if not entry.name.startswith((PREFIX, ".")))
    for entry in candidates:
        if entry.is_dir() and _matches(entry, want) and (entry / FOLDER / ALL).is_file() and not damaged(entry):
            return entry
    return None


def _matches(entry: Path, want: dict) -> bool:
    if not (entry / RECORD).is_file():
        return False  # another rule's entry
    try:
        made_by = json.loads((entry / RECORD).read_text()).get("provenance") or {}
    except (OSError, ValueError, AttributeError):  # unreadable: not an output to reuse
        return False
    job = {key: (made_by.get("job") or {}).get(key) for key in want["job"]}
    recorded = made_by.get("inputs_sha256") or {}  # the same values read: the same inputs recorded
    return job == want["job"] and all(want["inputs"].get(name) == sha for name, sha in recorded.items())


def restore(entry: Path, folder: Path, owns: tuple[str, ...]) -> None:
    """Copy `entry` into `folder` as the stage would write it (one swap; digests are the caller's)."""
    with output_folder(folder, owns) as staging:
        for item in entry.iterdir():
            if item.name in (FOLDER, SNAKEMAKE_STAMP):
                continue
            if item.is_dir():
                shutil.copytree(item, staging / item.name, symlinks=False)
            else:
                shutil.copy2(item, staging / item.name)
    log.info("restored %s from the machine's output cache (%s): its record is this job's, its files hash to its "
             "digest; nothing was computed", folder, entry)


def store(stage: str, want: dict, folder: Path) -> Path | None:
    """Keep a copy of `folder` (digests included) as `dear-<stage>-<key>` for the next config; None when the
    cache cannot be written (the study goes on: the next config computes it again)."""
    root = location()
    entry = root / f"{PREFIX}{stage}-{sha256_json(want)}"
    if entry.is_dir():
        return entry
    try:
        root.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f".{entry.name}.", dir=root))
        try:
            shutil.copytree(folder, staging, dirs_exist_ok=True, ignore=shutil.ignore_patterns(SNAKEMAKE_STAMP))
            os.replace(staging, entry)
        except OSError:
            if entry.is_dir():  # another process stored the same entry first
                return entry
            raise
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    except OSError as err:
        log.warning("could not keep %s in the machine's output cache %s (%s); another config will compute it "
                    "again", folder, root, err)
        return None
    log.info("kept %s in the machine's output cache: %s", folder, entry)
    return entry
