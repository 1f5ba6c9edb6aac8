"""The record of open_clip weights found or fetched, readable without torch (for `dear check`).

`dear fetch-weights` (and any stage that finds a tag's file in the cache)
writes `{"<arch>/<tag>": "<file>"}` into `dear-weights.json` inside
`model.cache_dir`, or into ~/.cache/dear/ when the cache is open_clip's
default. `dear check` reads it to say whether a tag's weights are there
without importing open_clip (which imports torch).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

RECORD = "dear-weights.json"


def record_path(cache_dir: str | None) -> Path:
    if cache_dir:
        return Path(cache_dir).expanduser() / RECORD
    base = os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache")
    return Path(base) / "dear" / RECORD


def lookup(arch: str, tag: str, cache_dir: str | None) -> Path | None:
    """The recorded file of `arch`/`tag` when it still exists, else None."""
    record = record_path(cache_dir)
    try:
        entries = json.loads(record.read_text())
    except (OSError, json.JSONDecodeError):
        return None
    found = entries.get(f"{arch}/{tag}") if isinstance(entries, dict) else None
    return Path(found) if isinstance(found, str) and Path(found).is_file() else None
