"""The `dear` command: a stage runs through the warm server when one fits, else in this process as always.

`main` imports nothing heavy. Commands that run no stage (--help, check,
recipe, plan, compare, server) import no torch and run in this process. For a
stage it finds the server that fits the command
(`wire.key`), starting it on first use (one at a time per key: a lock file),
sends the request with its standard streams, and then only waits: Ctrl-C
(SIGINT) goes to the command's whole process group, as a terminal sends it
to a foreground job; SIGTERM, SIGHUP, SIGQUIT, SIGUSR1/2 to the command
process, as `kill` would send them to `dear`. It exits with the command's
exit code, or dies of the signal that killed it.

Without a usable server (`DEAR_SERVER=off`, a folder that is not the user's
alone, a server that does not start or answer) the command runs here, as
without the server: one line on stderr says why, unless it was switched
off. A failure after the command started is not retried (it may have written
something): one line, exit 1.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import sys
import time
from pathlib import Path

from dear.server import wire

_START_TIMEOUT = 180.0   # seconds a first command waits for its server's imports (a loaded machine: ~10-20 s)
_BEFORE = {signum: signal.getsignal(signum) for signum in wire.FORWARDED}  # as Python set them: the plain path


def main() -> None:
    """The `dear` console script."""
    os.environ.pop("DEAR_SERVED_BY", None)  # set by a server in the command it runs, not inherited from a caller
    if wire.switched_off() or wire.command_of(sys.argv) not in wire.STAGES:  # --help, check, recipe, plan, server:
        return _plain()  # light without torch (a server's start would cost them seconds); `server` manages servers
    try:
        conn = connect(sys.argv, dict(os.environ), list(sys.path))
        status = run(conn, sys.argv, dict(os.environ), list(sys.path))
    except wire.Unavailable as why:
        _restore_signals()
        print(f"dear: no warm server: {why}; running the command in this process (docs/performance.md)",
              file=sys.stderr, flush=True)
        return _plain()
    _exit_as(status)


def _plain() -> None:
    from dear.cli import main as plain

    plain()


def connect(argv: list[str], environ: dict[str, str], path: list[str]) -> socket.socket:
    """A connection to the server that fits this command, started if there is none; Unavailable otherwise."""
    env = wire.import_env(argv, environ)
    name = wire.key(env, path)
    place = wire.folder(environ)
    socket_path = place / f"{name}.sock"
    conn = wire.connected(socket_path)
    if conn is not None:
        return conn
    with _locked(place / f"{name}.lock"):
        conn = wire.connected(socket_path)  # another command started it while this one waited for the lock
        if conn is None:
            with contextlib.suppress(FileNotFoundError):
                socket_path.unlink()  # a server that was killed leaves its socket: nobody answers there
            conn = _start(socket_path, env, path, wire.idle_seconds(environ))
    return conn


@contextlib.contextmanager
def _locked(lock: Path):
    import fcntl

    try:
        handle = open(lock, "a")
    except OSError as err:
        raise wire.Unavailable(f"cannot write {lock} ({err.strerror})") from None
    with handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        yield


def _start(socket_path: Path, env: dict[str, str], path: list[str], idle: float) -> socket.socket:
    """Start a server in a session of its own (its log beside the socket) and wait until it answers."""
    import json
    import subprocess

    log = socket_path.with_suffix(".log")
    code = ("import json, sys; sys.path[:] = json.loads(sys.argv[1]); from dear.server.daemon import serve; "
            "serve(sys.argv[2], float(sys.argv[3]))")
    try:
        with open(log, "ab") as out:
            server = subprocess.Popen([sys.executable, "-c", code, json.dumps(path), str(socket_path), str(idle)],
                                      env=env, cwd="/", stdin=subprocess.DEVNULL, stdout=out, stderr=out,
                                      start_new_session=True)
    except OSError as err:
        raise wire.Unavailable(f"cannot start a server ({err.strerror})") from None
    deadline = time.monotonic() + _START_TIMEOUT
    while time.monotonic() < deadline:
        conn = wire.connected(socket_path)
        if conn is not None:
            return conn
        if server.poll() is not None:
            raise wire.Unavailable(f"the server stopped while starting (exit {server.returncode}; its log: {log})")
        time.sleep(0.05)
    server.kill()
    raise wire.Unavailable(f"the server did not answer within {_START_TIMEOUT:.0f} s (its log: {log})")


def run(conn: socket.socket, argv: list[str], environ: dict[str, str], path: list[str]) -> int:
    """Send the command, forward signals to it, and return its wait status."""
    target: list[int] = []
    pending: list[int] = []

    def forward(signum, _frame):
        if not target:
            pending.append(signum)
            return
        with contextlib.suppress(ProcessLookupError):
            (os.killpg if signum == signal.SIGINT else os.kill)(target[0], signum)

    ignored = [signum for signum in wire.FORWARDED if signal.getsignal(signum) == signal.SIG_IGN]  # nohup, `cmd &`
    for signum in set(wire.FORWARDED) - set(ignored):
        signal.signal(signum, forward)
    umask = os.umask(0)
    os.umask(umask)
    request = {"argv": argv, "cwd": os.getcwd(), "env": environ, "path": path, "umask": umask,
               "ignored": [int(signum) for signum in ignored]}
    try:
        conn.settimeout(wire.ANSWER_TIMEOUT)
        wire.send(conn, request, fds=[0, 1, 2])
        started, _ = wire.receive(conn)
        conn.settimeout(None)
    except OSError as err:
        raise wire.Unavailable(f"it did not take the command ({err.strerror or type(err).__name__})") from None
    if started is None:
        raise wire.Unavailable("it closed the connection before starting the command")
    target.append(started["pid"])
    for signum in pending:
        forward(signum, None)
    answer, _ = wire.receive(conn)
    if answer is None:
        print("error: the warm server's process that ran this command ended before it did (killed?); the command "
              "stopped with it: rerun it, or set DEAR_SERVER=off to run commands without the server", file=sys.stderr)
        return 1 << 8
    return answer["status"]


def _restore_signals() -> None:
    for signum, handler in _BEFORE.items():
        signal.signal(signum, handler)


def _exit_as(status: int) -> None:
    """Exit as the command did: its exit code, or death by the same signal (what a shell reports as 128 + N)."""
    if os.WIFSIGNALED(status):
        signum = os.WTERMSIG(status)
        _restore_signals()
        if signum not in (signal.SIGKILL, signal.SIGSTOP):  # those two cannot be caught: nothing to restore
            signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)
        sys.exit(128 + signum)
    sys.exit(os.waitstatus_to_exitcode(status))
