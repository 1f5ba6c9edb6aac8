"""Digests of output folders: `<folder>/.digest/*.yaml`, the sha256 of what a stage wrote.

Why they exist: DVC cannot plan (`dvc repro --dry`) a stage whose file
dependencies do not exist yet, which on a fresh clone is every stage after the
first (its run cache hashes each dependency: treeverse/dvc#9818). A missing
*params* file that is read whole is fine, so dvc.yaml links stages through
these small YAML files instead of through the outputs themselves:

    <folder>/.digest/folder.yaml     sha256 over every file below <folder> (paths and contents)
    <folder>/.digest/<name>.yaml     sha256 of the file <folder>/<name> (each file directly in <folder>)

A digest changes exactly when the bytes it covers change, so DVC reruns a
stage when, and only when, what it reads changed. Every stage command writes
them after its last output (any engine, or by hand), so a workspace built by
Snakemake can be handed to DVC as it is.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from pathlib import Path

import yaml

from dear.runtime.io import DIGESTS as FOLDER
from dear.runtime.io import files_under, sha256_file

ALL = "folder.yaml"
SNAKEMAKE_STAMP = ".snakemake_timestamp"  # Snakemake's, added to a folder output after its job: not the stage's
STALE = "out of date"  # the sha256 `dear check --jobs` writes into the digests of an output to rerun


def write_digests(folder: Path, command: str) -> None:
    """Write `folder`'s digests (folder.yaml and one per file directly in it); stale ones are replaced."""
    folder = Path(folder)
    for killed in (folder / FOLDER).glob(".*.tmp"):  # a digest half written when an earlier run was killed
        killed.unlink()
    whole, files = _hash_folder(folder)
    for path, sha in files.items():
        if path.parent == folder:
            _write(folder / FOLDER / f"{path.name}.yaml", f"sha256 of {path.name}, written by `dear {command}`",
                   {"sha256": sha})
    _write(folder / FOLDER / ALL, f"sha256 over the {len(files)} files below this folder, written by `dear {command}`",
           {"sha256": whole, "files": len(files)})
    names = {f"{path.name}.yaml" for path in files if path.parent == folder} | {ALL}
    for stale in (folder / FOLDER).glob("*.yaml"):
        if stale.name not in names:
            stale.unlink()


def _hash_folder(folder: Path) -> tuple[str, dict[Path, str]]:
    """(sha256 over every file below `folder` but its digests, {file: its sha256}), through links."""
    files = {path: sha256_file(path) for path in files_under(folder)
             if FOLDER not in path.relative_to(folder).parts and path.name != SNAKEMAKE_STAMP}
    whole = hashlib.sha256()
    for path, sha in files.items():
        whole.update(f"{path.relative_to(folder).as_posix()}\0{sha}\n".encode())
    return whole.hexdigest(), files


def damaged(folder: Path) -> str | None:
    """Why `folder`'s files do not hash to its `.digest/folder.yaml` (a copy or cache entry changed since its
    stage wrote it), or None when they do or it has no digest."""
    recorded = Path(folder) / FOLDER / ALL
    if not recorded.is_file():
        return None
    expected = (yaml.safe_load(recorded.read_text()) or {}).get("sha256")
    if expected == STALE:
        return None  # marked to rerun (`dear check --jobs`): the engines rerun it anyway
    if _hash_folder(Path(folder))[0] != expected:
        return f"its files do not hash to {recorded}"
    return None


def _write(path: Path, what: str, values: dict) -> None:
    """Atomically (a temporary sibling renamed into place), and outside the stage's fault points
    (`dear.runtime.io.FAULTS` counts the stage's own writes; a rerun rewrites every digest anyway)."""
    text = f"# {what}; dvc.yaml reads it as a params file (see dear/pipeline/digest.py)\n" + yaml.safe_dump(values, sort_keys=False)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    with os.fdopen(fd, "w") as handle:
        handle.write(text)
    os.chmod(tmp, 0o644)
    os.replace(tmp, path)


def digested_folder(path: Path, is_file: bool, placeholder: str) -> Path | None:
    """The folder a stage output belongs to: above the first part holding `placeholder` ({seed}), else itself.

    runs/dear/ds/train/seed{seed} -> runs/dear/ds/train (one folder for every seed of the job);
    a file without the placeholder -> its folder. None when that would be the working directory.
    """
    parts = Path(path).parts
    templated = [index for index, part in enumerate(parts) if placeholder in part]
    folder = Path(*parts[:templated[0]]) if templated else (Path(path).parent if is_file else Path(path))
    return None if str(folder) in ("", ".") else folder


def mark_changed(folder: Path) -> None:
    """Rewrite `folder`'s digests as out of date (`dear check --jobs`, for outputs made otherwise than the config says).

    DVC then sees the output folder changed and reruns the stage that makes it, and every stage that
    reads one of its digests; the stage's command writes true digests again. No digest: nothing to mark.
    """
    for path in sorted((Path(folder) / FOLDER).glob("*.yaml")):
        values = yaml.safe_load(path.read_text()) or {}
        if values.get("sha256") != STALE:
            _write(path, "out of date: made otherwise than the config says (dear check --jobs)", {**values, "sha256": STALE})
