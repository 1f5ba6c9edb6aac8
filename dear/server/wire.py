"""What the `dear` command and its warm server agree on: which server fits a command, where it listens, the messages.

Standard library only (and `dear.compute.reproducible`, itself light): the `dear`
command reads this module before it decides whether to import anything heavy.

A server fits a command when everything that could have changed what the
server imported is the same for both: the Python interpreter and its import
path, the installed packages (the modification times of the site-packages
folders on the path: pip adds and removes files there), the server's own code, and the
environment variables that libraries read when they load (`IMPORT_TIME`:
thread counts, BLAS and kernel caps, locale, ...), as the command would set
them before importing torch (`import_env`), its resource limits and its control
group (what the kernel counts its memory against). The key of a server is a digest
of all of that, so a change to any of it starts another server, and the old
one ends when idle. `dear`'s own modules and plugins are never imported by a
server, so editing them needs no new one.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import socket
import stat
import struct
import sys
from pathlib import Path

from dear.compute import reproducible

SWITCH = "DEAR_SERVER"          # off / 0 / false / no: every command runs in its own process, as without a server
FOLDER = "DEAR_SERVER_DIR"      # where the sockets lie (default: $XDG_RUNTIME_DIR/dear, else /tmp/dear-<uid>)
IDLE = "DEAR_SERVER_IDLE"       # seconds without a command after which a server ends
ANSWER_TIMEOUT = 30.0          # seconds a server may take to fork a command
DEFAULT_IDLE = 900.0            # a researcher's loop: edit, rerun, read; a quarter of an hour between reruns is common
# The commands that run a stage (`dear.cli._run_stage`): before importing torch they set HF_HUB_OFFLINE and, under
# compute.reproducible, the kernel caps (`dear.compute.reproducible.apply`); a server for them imports with the same values.
STAGES = frozenset({"world", "backbone", "prepare", "profile", "train", "fuse", "evaluate", "collect", "report",
                    "predict"})
# Prefixes of the environment variables a library may read when it loads (OpenMP and the BLAS libraries read their
# thread counts and kernel choices then; Python its hash seed, path and I/O encoding; the locale; the CUDA runtime).
IMPORT_TIME = ("PYTHON", "OMP_", "GOMP_", "KMP_", "MKL_", "OPENBLAS_", "GOTO", "BLIS_", "ATEN_", "ONEDNN_", "DNNL_",
               "CUBLAS_", "CUDA_", "CUDNN_", "NVIDIA_", "NCCL_", "TORCH", "PYTORCH_", "NPY_", "NUMPY_", "MPL",
               "HF_", "HUGGINGFACE_", "TRANSFORMERS_", "TOKENIZERS_", "ARROW_", "LD_", "LANG", "LC_", "TZ", "HOME",
               "XDG_CACHE_HOME", "XDG_CONFIG_HOME")
# the signals a client hands on to its command (Ctrl-C: to its process group); one the client was started with
# ignored (nohup, a shell's `&`) stays ignored, in the command too
FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2)
_HEADER = struct.Struct("!I")   # each message: its length, then JSON
_CODE = ("wire.py", "daemon.py", "../compute/imports.py", "../model/__init__.py")  # what the server runs of dear: a new version, a new server


class Unavailable(Exception):
    """No server can run this command (the message says why): it runs in the `dear` process itself."""


def switched_off(environ=os.environ) -> bool:
    """Off by the user's word, or inside a Slurm job: there each job has its own node share and control group, and a
    server it started would end with it (docs/cluster.md)."""
    return environ.get(SWITCH, "").strip().lower() in ("off", "0", "false", "no") or "SLURM_JOB_ID" in environ


def command_of(argv: list[str]) -> str | None:
    """The `dear` subcommand in argv[1:] (past the global options --debug and --threads N)."""
    args = iter(argv[1:])
    for arg in args:
        if arg == "--threads":
            next(args, None)
        elif not arg.startswith("-"):
            return arg
    return None


def import_env(argv: list[str], environ: dict[str, str]) -> dict[str, str]:
    """The environment the command would have when it imports torch, without a server (dear.cli, dear.compute.reproducible).

    `reproducible.early` caps OpenBLAS for any command whose params ask for it;
    a stage command also sets HF_HUB_OFFLINE and, when its params ask for it,
    every cap of `compute.reproducible` (`reproducible.apply`), before its imports.
    """
    env = dict(environ)
    asks = "avx2" in reproducible.cpu_flags() and reproducible._asks_for_it(argv[1:])
    if asks:
        env["OPENBLAS_CORETYPE"] = reproducible.CAPS["OPENBLAS_CORETYPE"]
    if command_of(argv) in STAGES:
        env["HF_HUB_OFFLINE"] = "1"
        if asks:
            env.update(reproducible.CAPS)
    return env


def key(env: dict[str, str], path: list[str]) -> str:
    """The digest that names the server fit for a command with this import environment and import path."""
    here = Path(__file__).parent
    folders = [(entry, os.stat(entry).st_mtime_ns) for entry in path if _installs(entry)]
    described = {
        "python": [sys.executable, sys.version, sys.prefix],
        "path": path,
        "folders": folders,
        "code": [hashlib.sha256((here / name).read_bytes()).hexdigest() for name in _CODE],
        "env": {name: value for name, value in sorted(env.items()) if name.startswith(IMPORT_TIME)},
        "limits": _limits(),
        "cgroup": _cgroup(),
    }
    return hashlib.sha256(json.dumps(described, sort_keys=True).encode()).hexdigest()[:24]


def _limits() -> list:
    """The resource limits (ulimit) the command's own process has: a server started by it has them too, and
    passes them to its children, so a command under `ulimit -v` runs under that limit."""
    import resource

    return [resource.getrlimit(getattr(resource, name)) for name in sorted(dir(resource)) if name.startswith("RLIMIT_")]


def _cgroup() -> str:
    """The control group the command runs in (a systemd scope, a batch job's): its children count there, and so do
    a server's, so a command is served only by a server of its own group."""
    try:
        return Path("/proc/self/cgroup").read_text()
    except OSError:
        return ""


def _installs(entry: str) -> bool:
    """Whether a folder of the import path is one pip installs into (its time changes with every install there).

    Other folders (a checkout on PYTHONPATH, a plugin's source) change as a researcher works; their modules are
    imported fresh by each command, so their times must not name a new server.
    """
    return os.path.basename(entry) in ("site-packages", "dist-packages") and os.path.isdir(entry)


def folder(environ=os.environ) -> Path:
    """The user's folder of sockets, made 0700 if absent; Unavailable when it is not the user's alone."""
    chosen = environ.get(FOLDER)
    if not chosen:
        runtime = environ.get("XDG_RUNTIME_DIR")
        chosen = str(Path(runtime) / "dear") if runtime and os.path.isdir(runtime) else f"/tmp/dear-{os.getuid()}"
    path = Path(chosen)
    try:
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
        info = os.lstat(path)
    except OSError as err:
        raise Unavailable(f"cannot make its folder {path} ({err.strerror})") from None
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid() or stat.S_IMODE(info.st_mode) & 0o077:
        raise Unavailable(f"its folder {path} is not a folder of this user's alone (mode 0700); remove it or set "
                          f"{FOLDER}")
    return path


def idle_seconds(environ=os.environ) -> float:
    try:
        return float(environ.get(IDLE, DEFAULT_IDLE))
    except ValueError:
        return DEFAULT_IDLE


def send(sock: socket.socket, message: dict, fds: list[int] = ()) -> None:
    data = json.dumps(message).encode()
    payload = _HEADER.pack(len(data)) + data
    if fds:
        sent = socket.send_fds(sock, [payload], list(fds))
        sock.sendall(payload[sent:])
    else:
        sock.sendall(payload)


def receive(sock: socket.socket, max_fds: int = 0) -> tuple[dict | None, list[int]]:
    """One message and the descriptors sent with it; (None, fds) when the other side closed first.

    Reads exactly one message's bytes, so two messages sent back to back (a
    command's pid and, for a quick one, its status) are read one at a time.
    """
    if max_fds:
        head, fds, _, _ = socket.recv_fds(sock, _HEADER.size, max_fds)
    else:
        head, fds = sock.recv(_HEADER.size), []
    head = _exactly(sock, head, _HEADER.size)
    body = None if head is None else _exactly(sock, b"", _HEADER.unpack(head)[0])
    return (None if body is None else json.loads(body)), fds


def _exactly(sock: socket.socket, data: bytes, size: int) -> bytes | None:
    while len(data) < size:
        more = sock.recv(size - len(data))
        if not more:
            return None
        data += more
    return data


def connected(socket_path: Path) -> socket.socket | None:
    """A connection to the server listening at `socket_path`; None: nobody listens there."""
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    folder = os.open(socket_path.parent, os.O_RDONLY | os.O_DIRECTORY) if socket_path.parent.is_dir() else None
    try:  # through the folder's descriptor: a socket's address has at most 107 bytes, a folder's path may be longer
        conn.connect(f"/proc/self/fd/{folder}/{socket_path.name}" if folder is not None else str(socket_path))
        return conn
    except (FileNotFoundError, ConnectionRefusedError):
        conn.close()
        return None
    except OSError as err:
        conn.close()
        raise Unavailable(f"cannot connect to {socket_path} ({err.strerror})") from None
    finally:
        if folder is not None:
            os.close(folder)


def control(action: str, environ=os.environ) -> list[dict]:
    """`dear server status|stop`: ask each server of this user for its state, or to stop (after its running
    commands). [{socket, pid, started, served, running}], or {socket, error} for a socket nobody answers at."""
    found = []
    for socket_path in sorted(folder(environ).glob("*.sock")):
        conn = connected(socket_path)
        if conn is None:
            found.append({"socket": str(socket_path), "error": "nobody answers (a killed server's socket)"})
            continue
        with conn:
            conn.settimeout(ANSWER_TIMEOUT)
            send(conn, {"control": action})
            about, _ = receive(conn)
        found.append({"socket": str(socket_path), **(about or {"error": "no answer"})})
    return found
