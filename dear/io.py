"""Atomic writes, Parquet with explicit schemas, hashing and provenance.

Every file the pipeline produces goes through `atomic_path`: it is written to
a temporary sibling and renamed into place, so a stage killed at any moment
leaves the previous file or none, never a truncated one that looks valid.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import platform
import tempfile
from pathlib import Path
from typing import Any, Iterator

import pyarrow as pa
import pyarrow.parquet as pq

from dear.errors import DearError

PROVENANCE_KEY = b"dear.provenance"
_UMASK = os.umask(0)
os.umask(_UMASK)


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary sibling of `path`; rename it onto `path` on success.

    On any exception (or a kill before the rename) the temporary file is the
    only thing touched, and it is removed when the exception unwinds.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.fchmod(fd, 0o666 & ~_UMASK)  # mkstemp makes 0600; outputs get the usual permissions
    os.close(fd)
    tmp = Path(tmp_name)
    try:
        yield tmp
        with open(tmp, "rb+") as handle:
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    _fsync_dir(path.parent)


def _fsync_dir(folder: Path) -> None:
    """Make the rename itself durable (a no-op where directories can't be opened)."""
    with contextlib.suppress(OSError):
        fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def write_bytes(path: str | os.PathLike, data: bytes) -> None:
    with atomic_path(path) as tmp:
        tmp.write_bytes(data)


def write_text(path: str | os.PathLike, text: str) -> None:
    write_bytes(path, text.encode("utf-8"))


def write_json(path: str | os.PathLike, obj: Any) -> None:
    write_text(path, json.dumps(obj, indent=2, sort_keys=True, default=str) + "\n")


def read_json(path: str | os.PathLike) -> Any:
    path = Path(path)
    if not path.is_file():
        raise DearError(f"{path}: file not found; run the stage that makes it first")
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as err:
        raise DearError(f"{path}: not valid JSON ({err.msg} at line {err.lineno}); delete it and rerun its stage")


def write_parquet(path: str | os.PathLike, table: pa.Table, schema: pa.Schema, provenance: dict | None = None) -> None:
    """Write `table` cast to the explicit `schema`; provenance goes in the file's metadata."""
    try:
        table = table.select(schema.names).cast(schema)
    except (KeyError, pa.ArrowInvalid, pa.ArrowTypeError) as err:
        raise ValueError(f"{path}: table does not match its schema: {err}") from err
    if provenance is not None:
        metadata = dict(table.schema.metadata or {})
        metadata[PROVENANCE_KEY] = json.dumps(provenance, sort_keys=True, default=str).encode()
        table = table.replace_schema_metadata(metadata)
    with atomic_path(path) as tmp:
        pq.write_table(table, tmp, compression="zstd")


def read_parquet(path: str | os.PathLike, schema: pa.Schema | None = None) -> pa.Table:
    """Read a Parquet file, checking it holds at least the columns of `schema`."""
    path = Path(path)
    if not path.is_file():
        raise DearError(f"{path}: file not found; run the stage that makes it first")
    try:
        table = pq.read_table(path)
    except (pa.ArrowInvalid, OSError) as err:
        raise DearError(f"{path}: not a readable Parquet file ({err}); delete it and rerun its stage")
    if schema is not None:
        missing = [name for name in schema.names if name not in table.schema.names]
        if missing:
            raise DearError(f"{path}: missing columns {missing}; it was made by another version, rerun its stage")
        table = table.select(schema.names).cast(schema)
    return table


def read_provenance(path: str | os.PathLike) -> dict:
    metadata = pq.read_schema(path).metadata or {}
    return json.loads(metadata.get(PROVENANCE_KEY, b"{}"))


def sha256_file(path: str | os.PathLike, chunk: int = 1 << 20) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while block := handle.read(chunk):
            digest.update(block)
    return digest.hexdigest()


def sha256_json(obj: Any) -> str:
    """Hash of a JSON-able object, independent of key order."""
    text = json.dumps(obj, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def versions() -> dict[str, str]:
    """Versions of what shapes the numbers: ours, Python, torch, open_clip."""
    from importlib.metadata import PackageNotFoundError, version

    found = {"python": platform.python_version()}
    for name in ("dear", "torch", "open_clip_torch", "pyarrow"):
        try:
            found[name] = version(name)
        except PackageNotFoundError:
            found[name] = "not installed"
    return found


def provenance(params: Any, inputs: dict[str, str | os.PathLike] | None = None, seed: int | None = None) -> dict:
    """What made an output: params hash, hashes of input files, versions, seed.

    `params` is a pydantic section (or a dict of them); inputs that are
    folders are recorded by path only (hashing a dataset is `data.verify`'s job).
    """
    params_dict = _as_dict(params)
    hashes = {}
    for name, path in (inputs or {}).items():
        path = Path(path)
        hashes[name] = sha256_file(path) if path.is_file() else f"dir:{path}"
    return {
        "params": params_dict,
        "params_sha256": sha256_json(params_dict),
        "inputs_sha256": hashes,
        "versions": versions(),
        "seed": seed,
    }


def _as_dict(params: Any) -> Any:
    if hasattr(params, "model_dump"):
        return params.model_dump(mode="json")
    if isinstance(params, dict):
        return {key: _as_dict(value) for key, value in params.items()}
    return params
