"""Which DVC stages would run, one line each: `dvc status` in short (stdlib only).

    python workflow/scripts/dvc_pending.py                        # the demo (dvc.yaml)
    python workflow/scripts/dvc_pending.py paper-vitb16/dvc.yaml  # another config's (docs/configs.md)

`dvc status` lists every changed dependency of every stage that would run: on a
fresh clone, where nothing is built, about twenty lines a stage, and DVC has no
shorter form. This prints one line a stage instead: not built yet, or the first
changed dependencies. Exit code 0 when nothing would run, 1 otherwise (as
`dvc status --quiet`).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path


def pending(status: dict) -> list[str]:
    """'stage: why' for every stage of `dvc status --json`'s answer."""
    lines = []
    for stage, changes in status.items():
        said = [change for change in changes if isinstance(change, str)]  # "always changed": the check stage
        changes = [change for change in changes if isinstance(change, dict)]
        outs = {path: what for change in changes for path, what in change.get("changed outs", {}).items()}
        deps = [path for change in changes for path in change.get("changed deps", {})]
        if outs and all(what in ("deleted", "not in cache") for what in outs.values()):
            why = "not built yet"
        elif deps:
            why = "changed: " + ", ".join(deps[:3]) + (f" (+{len(deps) - 3} more)" if len(deps) > 3 else "")
        elif outs:
            why = "outputs changed: " + ", ".join(list(outs)[:3])
        else:
            why = ", ".join(said) or "changed"
        lines.append(f"  {stage}: {why}")
    return lines


def main(argv: list[str]) -> int:
    dvc = Path(sys.executable).with_name("dvc")
    command = [str(dvc) if dvc.exists() else "dvc", "status", "--json", *argv]
    result = subprocess.run(command, capture_output=True, text=True, env={**os.environ, "DVC_NO_ANALYTICS": "1"})
    if result.returncode != 0:
        sys.stderr.write(result.stderr)
        return result.returncode
    status = json.loads(result.stdout or "{}")
    if not status:
        print("nothing to run: every stage is up to date")
        return 0
    print(f"{len(status)} stage(s) would run:")
    print("\n".join(pending(status)))
    return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
