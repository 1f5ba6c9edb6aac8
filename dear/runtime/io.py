"""Atomic writes, whole-folder outputs, Parquet with explicit schemas, hashing and provenance.

Every file the pipeline produces goes through `atomic_path`: it is written to
a temporary sibling and renamed into place, so a stage killed at any moment
leaves the previous file or none, never a truncated one that looks valid.
A stage that writes a folder builds it in a hidden staging sibling
(`output_folder`) that replaces the old folder in one step: its files appear
all at once or not at all, and no file of an earlier run survives beside them.
Output locations are checked before a stage starts its work
(`check_outputs`), and filesystem failures become one-line `DearError`s.
"""

from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import errno
import fnmatch
import functools
import glob
import hashlib
import json
import os
import platform
import re
import shutil
import signal
import subprocess
import tempfile
from pathlib import Path
from typing import Any, Iterable, Iterator

import pyarrow as pa
import pyarrow.parquet as pq

from dear.errors import DearError

PROVENANCE_KEY = b"dear.provenance"
_OVERRIDES: dict[str, Any] = {}  # this process's `--set KEY=VALUE` (dear.cli records them): in every provenance
_JOB: dict[str, Any] = {}  # the job this process runs: stage, args, the values it reads, its code (dear.cli)
_UMASK = os.umask(0)
os.umask(_UMASK)


KILL_ENV = "DEAR_TEST_KILL_AT"


class _FaultPoints:
    """Fault-injection hook of the tests: the moments where an interruption could leave damage.

    Every file write (`atomic_path`, just before its rename) and every folder
    swap (`output_folder`, before and in the middle of it) passes a point. With
    DEAR_TEST_KILL_AT=N in the environment the process SIGKILLs itself at its
    N-th point, a file being written first cut to half its length, as a kill
    in the middle of writing it would leave it. Unset, a point costs one
    dictionary lookup.
    """

    def __init__(self):
        self.passed = 0

    def point(self, writing: Path | None = None) -> None:
        self.passed += 1
        if os.environ.get(KILL_ENV) != str(self.passed):
            return
        if writing is not None and writing.is_file():
            os.truncate(writing, writing.stat().st_size // 2)
        os.kill(os.getpid(), signal.SIGKILL)


FAULTS = _FaultPoints()


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary sibling of `path`; rename it onto `path` on success.

    On any exception (or a kill before the rename) the temporary file is the
    only thing touched, and it is removed when the exception unwinds; a kill
    leaves it hidden (`.<name>.*.tmp`), and the next write of `path` removes it.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    remove_leftovers(path.parent, leftovers_of(path))
    fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.fchmod(fd, 0o666 & ~_UMASK)  # mkstemp makes 0600; outputs get the usual permissions
    os.close(fd)
    tmp = Path(tmp_name)
    try:
        yield tmp
        FAULTS.point(tmp)
        with open(tmp, "rb+") as handle:
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    _fsync_dir(path.parent)


def leftovers_of(path: Path) -> str:
    """Glob of the temporaries of `path` in its folder: `.<name>.<random>.tmp`, files and staging folders alike."""
    return f".{glob.escape(path.name)}.*.tmp"


def remove_leftovers(folder: Path, pattern: str) -> None:
    """Delete what a killed earlier write left in `folder` (hidden temporaries matching `pattern`)."""
    if not folder.is_dir():
        return
    for stale in folder.glob(pattern):
        if stale.is_dir() and not stale.is_symlink():
            shutil.rmtree(stale, ignore_errors=True)
        else:
            stale.unlink(missing_ok=True)


# --- whole-folder outputs ------------------------------------------------------

KEPT = (".gitignore",)  # what others put in an output folder (DVC's .gitignore) and a rerun keeps
ENGINE_MARKS = (".snakemake_timestamp",)  # what an engine puts there and a rerun drops (Snakemake's directory() mark)
DIGESTS = ".digest"  # written into an output folder by the command after its stage (dear/pipeline/digest.py); a rerun rewrites it


@contextlib.contextmanager
def output_folder(folder: str | os.PathLike, owns: Iterable[str]) -> Iterator[Path]:
    """Yield an empty staging folder; on success it replaces `folder` as a whole.

    `owns` are glob patterns of the entries the stage writes there; an existing
    `folder` holding anything else is refused (`check_output_folder`), so a
    mistyped --out never deletes someone's files. The swap is one
    `renameat2(RENAME_EXCHANGE)` where the filesystem supports it (old or new,
    never neither), else two renames; the old tree is removed last. On an
    exception the staging folder is removed and the old folder is untouched;
    a filesystem error becomes a one-line `DearError` naming `folder`.
    """
    folder = Path(folder)
    if folder.is_symlink() and not in_output_cache(folder):  # a link to scratch space: replace the folder it points to
        folder = folder.resolve()
    check_output_folder(folder, owns)
    staging = None
    try:
        folder.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f".{folder.name}.", suffix=".tmp", dir=folder.parent))
        os.chmod(staging, 0o777 & ~_UMASK)  # mkdtemp makes 0700
        yield staging
        for name in KEPT:
            if (folder / name).is_file():
                shutil.copy2(folder / name, staging / name)
        FAULTS.point()
        _swap_into_place(staging, folder)
    except OSError as err:
        if staging is not None and isinstance(err.filename, str) and err.filename.startswith(str(staging)):
            err.filename = str(folder) + err.filename[len(str(staging)):]  # name the file as the user will see it
        raise DearError(filesystem_message(folder, err)) from err
    finally:
        if staging is not None and (staging.exists() or staging.is_symlink()):
            _remove(staging)


def files_under(folder: str | os.PathLike) -> list[Path]:
    """Every file below `folder`, sorted, through symbolic links to folders.

    Why not `Path.rglob`: before Python 3.13 it does not enter a linked folder, and a folder Snakemake's output
    cache restores is links into the cache entry, one per top-level name (its `images/`, its `.digest/`).
    """
    found = []
    for root, _, names in os.walk(folder, followlinks=True):
        found.extend(Path(root) / name for name in names)
    return sorted(path for path in found if path.is_file())


def in_output_cache(link: Path) -> bool:
    """True when `link` points into Snakemake's between-workflow output cache (its entries are named by a 64-hex
    provenance hash; a restored folder's links point into one): an output restored from there is replaced by a
    rerun, never written through, as other studies share the entry (docs/engines.md)."""
    return any(re.fullmatch(r"[0-9a-f]{64}(\..*)?", part) for part in Path(os.readlink(link)).parts)


def restored_from_output_cache(folder: Path) -> bool:
    """True when `folder` is, or holds, links into Snakemake's output cache (how `snakemake --cache` restores a
    folder: a link per top-level name into the entry)."""
    folder = Path(folder)
    if folder.is_symlink():
        return in_output_cache(folder)
    return folder.is_dir() and any(entry.is_symlink() and in_output_cache(entry) for entry in folder.iterdir())


def _remove(path: Path) -> None:
    """Remove a tree, or only the link where `path` is one."""
    if path.is_symlink():
        path.unlink()
    else:
        shutil.rmtree(path, ignore_errors=True)


@contextlib.contextmanager
def filesystem_errors(path: Path) -> Iterator[None]:
    """Turn an OSError of writing `path` into a one-line `DearError` (disk full, read-only, ...)."""
    try:
        yield
    except OSError as err:
        raise DearError(filesystem_message(Path(path), err)) from err


def _swap_into_place(staging: Path, target: Path) -> None:
    """Put `staging` at `target`; what was at `target` ends up at `staging` (removed by the caller)."""
    _fsync_dir(staging)
    if not target.exists():
        os.rename(staging, target)
        _fsync_dir(target.parent)
        return
    if not _exchange(staging, target):
        old = Path(tempfile.mkdtemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent))
        os.rename(target, old / target.name)
        FAULTS.point()
        os.rename(staging, target)
        os.rename(old, staging)  # the caller removes `staging`: now the old tree
    _fsync_dir(target.parent)
    FAULTS.point()
    _remove(staging)


_RENAME_EXCHANGE, _AT_FDCWD = 2, -100


def _exchange(a: Path, b: Path) -> bool:
    """Swap two paths atomically (Linux renameat2); False where the system or filesystem cannot."""
    renameat2 = getattr(ctypes.CDLL(None, use_errno=True), "renameat2", None)
    if renameat2 is None:
        return False
    if renameat2(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) == 0:
        return True
    code = ctypes.get_errno()
    if code in (errno.EINVAL, errno.ENOSYS, errno.ENOTSUP, errno.EOPNOTSUPP):
        return False
    raise OSError(code, os.strerror(code), str(b))


def check_outputs(outputs: Any) -> None:
    """Check every output path of a stage's `Outputs` before its work starts (one line if one is unusable).

    A field named `folder` is an output folder holding `Outputs.FILES`; any
    other path field is an output file; None is skipped.
    """
    for field in dataclasses.fields(outputs):
        value = getattr(outputs, field.name)
        if value is None:
            continue
        if field.name == "folder":
            check_output_folder(Path(value), getattr(outputs, "FILES", ("*",)))
        else:
            check_output_file(Path(value))


def check_output_folder(folder: Path, owns: Iterable[str]) -> None:
    """`folder` can be (re)placed: no file in the way, a writable parent, nothing in it the stage did not write."""
    folder = Path(folder).resolve() if Path(folder).is_symlink() else Path(folder)
    if folder.exists() and not folder.is_dir():
        raise DearError(f"{folder}: exists and is not a folder; remove it or choose another output folder")
    _check_parent_writable(folder)
    if folder.is_dir():
        owns = (*owns, *KEPT, *ENGINE_MARKS, DIGESTS, ".*.tmp")  # .*.tmp: a killed atomic write of an earlier version
        foreign = sorted(entry.name for entry in os.scandir(folder)
                         if not any(fnmatch.fnmatchcase(entry.name, pattern) for pattern in owns))
        if foreign:
            raise DearError(f"{folder}: holds {foreign[0]!r} ({len(foreign)} such entries), which this stage does not "
                            "write; the stage replaces the whole folder, so move them away or choose another folder")
        _probe(folder, folder)  # the old files are deleted after the swap


def check_output_file(path: Path) -> None:
    """`path` can be written: not a folder, its folder creatable and writable."""
    path = Path(path)
    if path.is_dir():
        raise DearError(f"{path}: is a folder, not a file; remove it or choose another output path")
    _check_parent_writable(path)


def _check_parent_writable(path: Path) -> None:
    """Probe the nearest existing ancestor of `path` by making (and removing) a hidden folder in it.

    The probe is the check root, EROFS and ACLs cannot fool (unlike os.access);
    its name is that of a staging leftover, so a kill right here leaves
    nothing the next run does not remove.
    """
    remove_leftovers(path.parent, leftovers_of(path))
    ancestor = path.parent
    while not ancestor.exists() and ancestor != ancestor.parent:
        if ancestor.is_symlink():
            raise DearError(f"{path}: {ancestor} is a broken symbolic link; fix or remove it")
        ancestor = ancestor.parent
    if not ancestor.is_dir():
        raise DearError(f"{path}: cannot be created, {ancestor} is a file, not a folder; "
                        "remove that file or choose another output path")
    _probe(path, ancestor)


def _probe(path: Path, folder: Path) -> None:
    try:
        os.rmdir(tempfile.mkdtemp(prefix=f".{path.name}.", suffix=".tmp", dir=folder))
    except OSError as err:
        raise DearError(f"{path}: cannot write in {folder} ({_why(err)}); make it writable "
                        "or choose another output path") from err


def filesystem_message(path: Path, err: OSError) -> str:
    """One line for a filesystem failure while writing `path`: what happened and what to do."""
    what = _why(err) + (f": {err.filename}" if err.filename is not None else "")
    if err.errno in (errno.ENOSPC, errno.EDQUOT):
        advice = "free space and rerun the same command"
    elif err.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        advice = "make it writable or choose another output path"
    else:
        advice = "fix the path or choose another one, then rerun the same command"
    return f"{path}: writing failed ({what}); {advice}; its previous content is kept"


def _why(err: OSError) -> str:
    """The cause in words that do not depend on who runs (root meets EPERM where others meet EACCES)."""
    if err.errno in (errno.EACCES, errno.EPERM):
        return "not writable"
    if err.errno == errno.EROFS:
        return "read-only filesystem"
    if err.errno in (errno.ENOSPC, errno.EDQUOT):
        return "the disk is full"
    return err.strerror or str(err) or type(err).__name__


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


def load_torch(path: str | os.PathLike) -> Any:
    """`torch.load` that never runs code from the file: tensors, containers, numbers and strings only.

    A pickle can call any Python function while it loads; `weights_only=True`
    refuses every global outside torch's allow-list before it is called. A
    file refused for asking for one is a `DearError` naming it; a damaged one
    raises what torch raises (callers word those themselves).
    """
    import pickle

    import torch

    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as err:
        if not any(sign in str(err) for sign in ("GLOBAL", "unrecognized function", "Unsupported class")):
            raise  # damaged or not a pickle at all: refused all the same, the caller words it
        raise DearError(f"{path}: holds Python objects other than tensors, numbers and strings, so loading it "
                        "could run code; refused: use a file written by dear, or a plain state dict, "
                        "from a source you trust") from None


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
    """Versions of what shapes the numbers: ours, Python, torch, open_clip, the CUDA torch was built for, the driver."""
    from importlib.metadata import PackageNotFoundError, version

    from dear.compute.probe import nvidia_driver, torch_cuda_build

    found = {"python": platform.python_version()}
    for name in ("dear", "torch", "open_clip_torch", "pyarrow"):
        try:
            found[name] = version(name)
        except PackageNotFoundError:
            found[name] = "not installed"
    found["cuda"] = torch_cuda_build() or "none (CPU build)"
    found["nvidia_driver"] = nvidia_driver() or "none"
    return found


CODE_PATHS = ("dear", "workflow", "Snakefile", "dvc.yaml")  # what `clean` looks at: the code and the pipeline


@functools.cache
def code_version() -> dict[str, Any]:
    """The git commit of the code this process runs, and whether its code was as committed (no edits, no new files).

    Asked of git once per process; a package installed without its git
    checkout says so instead.
    """
    root = Path(__file__).resolve().parents[2]

    def git(*args: str) -> str | None:
        try:
            done = subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, timeout=30)
        except (OSError, subprocess.TimeoutExpired):
            return None
        return done.stdout.strip() if done.returncode == 0 else None

    top = git("rev-parse", "--show-toplevel")
    if top is None or Path(top).resolve() != root:
        return {"commit": "unknown: not run from a git checkout", "clean": None}
    status = git("status", "--porcelain", "--untracked-files=normal", "--", *CODE_PATHS)
    return {"commit": git("rev-parse", "HEAD"), "clean": status == "" if status is not None else None}


def devices() -> dict[str, Any]:
    """What this process computed on: the CPU, and each CUDA device torch started, with its peak memory.

    The peak is torch's own record (`torch.cuda.max_memory_allocated`: the
    most tensor memory held at once since the process began), read when the
    provenance is written, after the work.
    """
    import sys

    found: dict[str, Any] = {"cpu": _cpu_name()}
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_initialized():
        found["cuda"] = [{"name": torch.cuda.get_device_name(index),
                          "peak_memory_mb": round(torch.cuda.max_memory_allocated(index) / 2**20, 1)}
                         for index in range(torch.cuda.device_count())]
    return found


def compute_record() -> dict[str, Any]:
    """What decided the floats beyond the inputs: compute.reproducible, the CPU's instruction sets and the caps in force,
    the kernels torch runs (ATen's capability), its BLAS/oneDNN builds, threads, GPU and driver (dear.compute.reproducible)."""
    from dear.compute.reproducible import in_force

    return in_force()


def _cpu_name() -> str:
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


def record_overrides(overrides: dict[str, Any]) -> None:
    """Remember this run's `--set` values, so every output says its params were not the file's alone."""
    _OVERRIDES.clear()
    _OVERRIDES.update(overrides)


def record_job(job: dict[str, Any]) -> None:
    """Remember the job this process runs ({stage, args, reads, code}; {}: none): every output records it,
    and the engines compare it with what the config in use would make (dear.pipeline.stale)."""
    _JOB.clear()
    _JOB.update(job)


def provenance(params: Any, inputs: dict[str, str | os.PathLike] | None = None, seed: int | None = None) -> dict:
    """What made an output: params hash, input hashes, code commit, versions, devices, seed (and `--set` overrides).

    `params` is a pydantic section (or a dict of them); inputs that are
    folders are recorded by path only (hashing a dataset is `data.verify`'s job).
    Run by a `dear` command, it also records the job: the resolved values it
    read key by key (`dear.config.keys`), its arguments and the sha256 of its code.
    """
    params_dict = _as_dict(params)
    hashes, paths = {}, {}
    for name, path in (inputs or {}).items():
        path = Path(path)
        hashes[name] = sha256_file(path) if path.is_file() else f"dir:{path}"
        paths[name] = str(path)
    record = {
        "params": params_dict,
        "params_sha256": sha256_json(params_dict),
        "inputs_sha256": hashes,
        "inputs": paths,
        "code": code_version(),
        "versions": versions(),
        "devices": devices(),
        "compute": compute_record(),
        "seed": seed,
    }
    if _OVERRIDES:
        record["overrides"] = dict(_OVERRIDES)
    if _JOB:
        record["job"] = dict(_JOB)
    return record


def _as_dict(params: Any) -> Any:
    if hasattr(params, "model_dump"):
        return params.model_dump(mode="json")
    if isinstance(params, dict):
        return {key: _as_dict(value) for key, value in params.items()}
    return params
