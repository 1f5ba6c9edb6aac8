"""The warm server: imports the heavy libraries once, then forks a child per `dear` command.

`serve` runs in a process of its own session (the `dear` command starts it:
`dear.server.client`). It imports `PRELOAD`, none of `dear`'s own modules
past this package, and computes nothing: no thread pool, no random draw, no
tensor exists before a fork, so a child starts where a fresh process would
be after its imports. One choice it makes: ATen's kernels (`_pin_kernels`). It then listens on a Unix socket in the user's 0700
folder and accepts only peers of its own user.

Per command, two processes:
- a handler (forked at `accept`) receives the request (argv, working folder,
  environment, import path) with the client's standard streams, forks the
  command, sends its pid back, and waits for whichever ends first: the
  command (its wait status goes back to the client) or the client (gone: the
  command's process group is killed, as the kernel kills a stage whose `dear`
  process was killed: dear.runtime.supervise);
- the command (`_become`): its own process group, the client's streams,
  folder, environment, argv and import path, `dear` dropped from
  `sys.modules` so that it and any plugin are imported fresh from disk, its
  imports noted (`imports.track`: torch is loaded, but does the command use
  it?); then `dear.cli.main()`, and an exit as the interpreter's own.

The server ends after `idle` seconds without a command (none running), on
SIGTERM (`dear server stop`), or when its socket was removed or replaced.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import gc
import importlib
import io
import os
import select
import signal
import socket
import struct
import sys
import tempfile
import threading
import time
import traceback

from dear.compute import imports
from dear.server import wire

# What every job of a study imports (a stage's modules import these at their top), and nothing of `dear`'s but
# the one function that imports open_clip as dear does (without transformers: dear.model.without_transformers).
PRELOAD = ("torch", "torchvision", "open_clip", "numpy", "pandas", "pyarrow", "pyarrow.parquet", "matplotlib",
           "PIL.Image", "scipy", "yaml", "pydantic", "typer", "click", "rich")
_PR_SET_PDEATHSIG = 1
_REQUEST_TIMEOUT = 30  # seconds a connected client may take to send its request


def serve(path: str, idle: float) -> None:
    """Import, listen on `path` (made ready atomically: a client never finds a socket that does not answer), serve."""
    from dear.model import without_transformers  # as dear imports open_clip: HuggingFace transformers blocked

    started = time.time()
    for name in PRELOAD:
        with without_transformers() if name == "open_clip" else contextlib.nullcontext():
            importlib.import_module(name)
    _pin_kernels()
    gc.collect()
    gc.freeze()  # the imports' millions of objects: out of every later collection, and shared by the children
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    os.chdir(os.path.dirname(path))  # names relative to the socket folder: a socket's address has at most 107 bytes
    path = os.path.basename(path)
    ready = f"{path}.{os.getpid()}.new"
    listener.bind(ready)
    os.chmod(ready, 0o600)
    listener.listen(64)
    os.rename(ready, path)
    inode = os.stat(path).st_ino
    print(f"dear server {os.getpid()}: ready in {time.time() - started:.1f} s at {path}", flush=True)
    try:
        _accept_loop(listener, path, inode, idle, started)
    finally:
        listener.close()
        with contextlib.suppress(OSError):
            if os.stat(path).st_ino == inode:
                os.unlink(path)


def _pin_kernels() -> None:
    """Have ATen pick its kernels (AVX2, AVX-512) now, from this process's ATEN_CPU_CAPABILITY.

    ATen reads the variable the first time it is asked, and keeps its answer. A
    plain stage sets it (compute.reproducible) before torch loads; a served one
    has torch loaded and sets it after its first question
    (`dear.compute.reproducible.apply`), so its child would pick the CPU's fastest
    kernels, and train other weights. The server's environment is the command's
    import environment (`wire.import_env`, part of the server's key): picked
    here, the child runs what the plain command runs (tests/server/test_server.py).
    """
    import torch

    torch.backends.cpu.get_cpu_capability()


def _accept_loop(listener: socket.socket, path: str, inode: int, idle: float, started: float) -> None:
    """Accept until SIGTERM, `idle` seconds without a command (none running), or a socket no longer ours."""
    wake_read, wake_write = os.pipe()  # SIGTERM wakes the wait at once (signal.set_wakeup_fd), a command or not
    os.set_blocking(wake_write, False)
    signal.set_wakeup_fd(wake_write)
    stopping: list[int] = []
    signal.signal(signal.SIGTERM, lambda signum, _frame: stopping.append(signum))
    handlers: set[int] = set()
    served, last = 0, time.monotonic()
    while not stopping:
        handlers -= _reaped(handlers)
        ready, _, _ = select.select([listener, wake_read], [], [], min(5.0, idle))
        if listener not in ready:
            if wake_read in ready:
                os.read(wake_read, 512)
            elif (not handlers and time.monotonic() - last >= idle) or not _still_ours(path, inode):
                return
            continue
        conn, _ = listener.accept()
        last = time.monotonic()
        if _peer_uid(conn) != os.getuid():  # the folder is 0700; this is the second lock on the door
            conn.close()
            continue
        served += 1
        pid = os.fork()
        if pid == 0:
            signal.set_wakeup_fd(-1)
            os.close(wake_read)
            os.close(wake_write)
            listener.close()
            _handle(conn, {"pid": os.getppid(), "started": started, "served": served, "running": len(handlers)})
        handlers.add(pid)
        conn.close()


def _reaped(pids: set[int]) -> set[int]:
    """The handlers among `pids` that have ended (collected, so no zombie stays)."""
    done = set()
    for pid in pids:
        try:
            ended = os.waitpid(pid, os.WNOHANG)[0] != 0
        except ChildProcessError:
            ended = True
        if ended:
            done.add(pid)
    return done


def _still_ours(path: str, inode: int) -> bool:
    try:
        return os.stat(path).st_ino == inode
    except OSError:
        return False


def _peer_uid(conn: socket.socket) -> int:
    creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    return struct.unpack("3i", creds)[1]


def _handle(conn: socket.socket, about: dict) -> None:
    """The handler process: one request, one command, its status back to the client. Never returns."""
    try:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        conn.settimeout(_REQUEST_TIMEOUT)
        request, fds = wire.receive(conn, max_fds=3)
        conn.settimeout(None)
        if request is None:
            return
        if request.get("control") == "status":
            wire.send(conn, about)
            return
        if request.get("control") == "stop":
            os.kill(about["pid"], signal.SIGTERM)
            wire.send(conn, about)
            return
        handler = os.getpid()
        pid = os.fork()
        if pid == 0:
            _become(request, fds, conn, handler)
        with contextlib.suppress(OSError):
            os.setpgid(pid, pid)  # also in the child: whichever runs first, the group exists before any signal
        for fd in fds:
            os.close(fd)
        wire.send(conn, {"pid": pid})
        wire.send(conn, {"status": _wait(pid, conn)})
    except BaseException:  # noqa: BLE001 (a handler's failure is the client's one line; the server goes on)
        traceback.print_exc()
    finally:
        os._exit(0)


def _wait(pid: int, conn: socket.socket) -> int:
    """The command's wait status; if the client goes away first, the command's process group is killed."""
    pidfd = os.pidfd_open(pid)
    while True:
        ready, _, _ = select.select([conn, pidfd], [], [])
        if pidfd in ready:
            return os.waitpid(pid, 0)[1]
        if not conn.recv(1):  # the client is gone (killed): nobody waits for this command any more
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGKILL)
            return os.waitpid(pid, 0)[1]


def _become(request: dict, fds: list[int], conn: socket.socket, handler: int) -> None:
    """The command process: the client's world in place of the server's, then `dear.cli.main()`. Never returns."""
    code = 1
    try:
        os.setpgid(0, 0)
        _die_with(handler)
        for signum in wire.FORWARDED:  # as a new Python process has them, or ignored as the client's were
            ignored = signum in request["ignored"]
            signal.signal(signum, signal.SIG_IGN if ignored else
                          signal.default_int_handler if signum == signal.SIGINT else signal.SIG_DFL)
        os.umask(request["umask"])
        for target, fd in enumerate(fds[:3]):
            os.dup2(fd, target)
        for fd in fds:
            os.close(fd)
        conn.close()
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"], DEAR_SERVED_BY=str(os.getppid()))  # the job records its own processes'
        # memory beside Snakemake's benchmark of the client (dear.pipeline.runrecord.benchmarked)
        sys.argv[:] = request["argv"]
        sys.path[:] = request["path"]
        for name in [name for name in sys.modules if name == "dear" or name.startswith("dear.")]:
            del sys.modules[name]  # `dear` and plugins: from disk, as edited now
        importlib.invalidate_caches()
        imports.track()  # which of the loaded libraries the command imports, as its own process would
        tempfile.tempdir = None  # TMPDIR is the client's
        _standard_streams()
        code = _run_cli()
    except BaseException:  # noqa: BLE001 (the command never started: say why, as a crashed process would)
        traceback.print_exc()
    _exit(code)


def _run_cli() -> int:
    """`dear.cli.main()` as the `dear` command runs it; its exit code as the interpreter would give it."""
    try:
        from dear.cli import main

        main()
        return 0
    except SystemExit as done:
        if done.code is None or isinstance(done.code, int):
            return done.code or 0
        print(done.code, file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        _finish()
        signal.signal(signal.SIGINT, signal.SIG_DFL)  # as the interpreter does: killed by SIGINT, for the shell
        os.kill(os.getpid(), signal.SIGINT)
        return 130
    except BaseException:  # noqa: BLE001
        traceback.print_exc()
        return 1


def _exit(code: int) -> None:
    _finish()
    os._exit(code)


def _finish() -> None:
    """What the interpreter does at exit: wait for non-daemon threads, run atexit functions, flush the streams."""
    with contextlib.suppress(BaseException):
        threading._shutdown()  # noqa: SLF001 (the interpreter's own first step at exit)
    with contextlib.suppress(BaseException):
        atexit._run_exitfuncs()  # noqa: SLF001
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(BaseException):
            stream.flush()


def _standard_streams() -> None:
    """sys.stdin/stdout/stderr anew on descriptors 0-2, buffered as Python buffers them for these files."""
    for fd, name in ((0, "stdin"), (1, "stdout"), (2, "stderr")):
        old = getattr(sys, name)
        raw = io.FileIO(fd, "rb" if fd == 0 else "wb", closefd=False)
        unbuffered = fd and bool(os.environ.get("PYTHONUNBUFFERED"))
        buffered = raw if unbuffered else (io.BufferedReader(raw) if fd == 0 else io.BufferedWriter(raw))
        stream = io.TextIOWrapper(buffered, encoding=old.encoding, errors=old.errors,
                                  line_buffering=fd == 2 or (fd == 1 and raw.isatty()), write_through=bool(unbuffered))
        setattr(sys, name, stream)
        setattr(sys, f"__{name}__", stream)


def _die_with(parent: int) -> None:
    """SIGKILL when the handler dies (it waits for this command; without it the client would wait forever)."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent:
        os._exit(128 + signal.SIGKILL)
