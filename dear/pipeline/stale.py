"""Outputs made otherwise than the config in use would make them: what both engines rerun, and why.

Every output records its job (`dear.runtime.io.provenance`: the values it read key by
key, its arguments, seed, code and input hashes). An output is out of date when
that record differs from what the job would record now: a value it reads
changed (in the file or through a `--set` of a hand-made run), it was made for
another job (another method or dataset), by other code, or from inputs that
changed since. Missing outputs are the engines' own business; an output without
a record (made by an older dear, or copied in) is out of date.

`out_of_date(params, job)` says so in one line naming the keys, e.g.
`train@mmrl-world_objects: train.recipes.mmrl.lr (not set) -> 0.002` (the recipe's own
value, then the config's). The Snakefile
forces those jobs while it plans; DVC's `check` stage (`dear check --jobs`) marks their
outputs changed so that `dvc repro` reruns them.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from dear.pipeline import jobs as study_jobs
from dear.config import keys
from dear.pipeline.digest import damaged
from dear.runtime.io import read_provenance, restored_from_output_cache, sha256_file
from dear.pipeline.jobs import Job
from dear.config.params import Params

SHOWN = 3  # keys named in a line; the rest are counted


def recorded(path: Path) -> dict | None:
    """The provenance an output file carries (Parquet metadata, or a JSON file's "provenance"), None if none."""
    try:
        if path.suffix == ".parquet":
            return read_provenance(path) or None
        return json.loads(path.read_text()).get("provenance")
    except (OSError, ValueError, AttributeError):
        return None


def out_of_date(params: Params, job: Job, hashes: dict | None = None) -> str | None:
    """One line saying why the existing outputs of `job` differ from what the config would make, or None."""
    code = study_jobs.job_code(job)
    expected = {"stage": job.stage, "args": job.args, "reads": keys.reads(params, job.stage, **job.args),
                "code": code.sha256, "code_files": code.files}
    hashes = {} if hashes is None else hashes
    reasons: list[str] = []
    for seed, file in job.records:
        path = Path(file)
        if not path.is_file():
            continue
        for reason in _differences(recorded(path), expected, seed, hashes):
            if reason not in reasons:
                reasons.append(reason)
    if job.folder and restored_from_output_cache(Path(job.folder)) and (why := damaged(Path(job.folder))):
        reasons.append(f"restored from the output cache, but {why} (a damaged cache entry: `make clean-cache`)")
    if not reasons:
        return None
    more = f" and {len(reasons) - SHOWN} more" if len(reasons) > SHOWN else ""
    return f"{job.name}: {', '.join(reasons[:SHOWN])}{more}"


def _differences(record: dict | None, expected: dict, seed: int | None, hashes: dict) -> list[str]:
    made = (record or {}).get("job")
    if not made:
        return ["no record of the values it was made with (made by an older dear, or copied in)"]
    found = []
    if made.get("stage") != expected["stage"] or made.get("args") != expected["args"]:
        found.append(f"made by `dear {made.get('stage')}` with {_args(made.get('args'))}, this job is "
                     f"{_args(expected['args'])}")
    if seed is not None and record.get("seed") not in (None, seed):
        found.append(f"made with seed {record.get('seed')}, this output is seed {seed}")
    old, new = made.get("reads", {}), expected["reads"]
    for key in sorted(set(old) | set(new), key=lambda k: (k not in old or k not in new, k)):
        if old.get(key, _UNSET) != new.get(key, _UNSET):
            found.append(f"{key} {_show(old, key)} -> {_show(new, key)}")
    if made.get("code") != expected["code"]:
        found.append(f"the code of `dear {expected['stage']}` changed{_changed_files(made.get('code_files'), expected)}")
    for name, path in record.get("inputs", {}).items():
        sha = record.get("inputs_sha256", {}).get(name, "")
        if not sha.startswith("dir:") and Path(path).is_file() and _sha(Path(path), hashes) != sha:
            found.append(f"its input {path} changed")
    return found


_UNSET = object()


def _changed_files(old: dict | None, expected: dict) -> str:
    """': dear/methods/maple.py' (the files whose fingerprint differs, added or gone; SHOWN of them), or ''."""
    new = expected["code_files"]
    if not isinstance(old, dict):
        return ""
    changed = [name for name in sorted(set(old) | set(new)) if old.get(name) != new.get(name)]
    more = f" and {len(changed) - SHOWN} more" if len(changed) > SHOWN else ""
    return f": {', '.join(changed[:SHOWN])}{more}" if changed else ""


def _show(values: dict, key: str) -> str:
    return json.dumps(values[key], separators=(",", ":")) if key in values else "(not set)"


def _args(args: Any) -> str:
    return " ".join(f"--{key} {value}" for key, value in sorted((args or {}).items())) or "no arguments"


def _sha(path: Path, hashes: dict) -> str:
    """sha256 of a file, once per planning (keyed by path, size and modification time)."""
    stat = path.stat()
    key = (str(path), stat.st_size, stat.st_mtime_ns)
    if key not in hashes:
        hashes[key] = sha256_file(path)
    return hashes[key]


def stale_jobs(params: Params, study: list[Job]) -> list[tuple[Job, str]]:
    """(job, why) for every job of `study` whose existing outputs are out of date."""
    hashes: dict = {}
    return [(job, line) for job in study if (line := out_of_date(params, job, hashes))]
