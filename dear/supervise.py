"""A parent that outlives its stage, to say why a job was killed.

A process killed by SIGKILL (the kernel's OOM killer, a scheduler's limit,
`kill -9`) runs no code any more: its log just stops, and the workflow
learns nothing. So a `dear <stage>` process forks before the stage starts:
the child runs the stage, the parent only waits. When the child dies of a
signal, the parent writes the last line the child could not: the signal's
name, how long it ran, where the stage was (`dear.status`, read from memory
the two share), the child's peak memory (the kernel's count, from `wait4`)
and, where they are known, the memory limits and whether the kernel's OOM
killer ended it. It then exits as a shell does for a killed command
(128 + the signal's number). Any other ending is the child's own: its exit
code passes through unchanged, and the child writes its own last line
(dear.cli: errors, Ctrl-C, SIGTERM, out of memory).

The parent ignores Ctrl-C (the terminal sends it to the child too, which
says where it stopped) and hands SIGTERM and SIGHUP on to the child. If the
parent itself is killed, the kernel kills the child (PR_SET_PDEATHSIG), so
no stage runs on unwatched.
"""

from __future__ import annotations

import ctypes
import os
import resource
import signal
import sys
from pathlib import Path
from typing import Callable

from dear import status

_PR_SET_PDEATHSIG = 1
CRASHES = {signal.SIGSEGV, signal.SIGBUS, signal.SIGILL, signal.SIGFPE}


def supervise(report: Callable[[str], None]) -> None:
    """Fork. The child returns (and runs the stage); the parent waits, reports a death by signal, and exits."""
    status.share()
    oom_before = oom_kills()
    for stream in (sys.stdout, sys.stderr):
        stream.flush()  # or both processes would print what is buffered
    pid = os.fork()
    if pid == 0:
        _die_with_parent()
        return
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    for signum in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, lambda received, _frame: os.kill(pid, received))
    _, code, usage = os.wait4(pid, 0)  # retried by Python when a handled signal interrupts it (PEP 475)
    if os.WIFSIGNALED(code):
        signum = os.WTERMSIG(code)
        report(killed_line(signum, usage.ru_maxrss / 2**20, oom_kills() - oom_before, status.place()))
        exit_code = 128 + signum
    else:
        exit_code = os.waitstatus_to_exitcode(code)
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    os._exit(exit_code)


def killed_line(signum: int, peak_gb: float, oom_killed: int, place: dict[str, str]) -> str:
    """The one line that ends the log of a stage killed by `signum`."""
    name = signal.Signals(signum).name
    limits = memory_limits()
    memory = f"peak memory {peak_gb:.2f} GB" + (f" (limits: {', '.join(limits)})" if limits else "")
    if oom_killed > 0:
        cause = "the kernel's OOM killer ended it: the job reached its memory limit; ask for more memory or lower a batch size"
    elif signum == signal.SIGKILL:
        cause = ("SIGKILL comes from outside the job: the kernel's OOM killer (out of memory), a scheduler's time or "
                 "memory limit, or kill -9")
    elif signum in CRASHES:
        cause = "a crash in native code (torch, a library or a driver)"
    elif signum == signal.SIGABRT:
        cause = "an abort in native code (often an allocation that failed: out of memory)"
    else:
        cause = "a signal from outside the job"
    return (f"killed by {name} after {status.elapsed()}, {status.where(place)}; {memory}; {cause}; "
            f"{status.resume_hint(place)}")


def memory_limits() -> list[str]:
    """The memory limits this process runs under, where they are set: its cgroup's and its address space's."""
    found = []
    cgroup = _cgroup_file("memory.max", "memory.limit_in_bytes")
    text = _read(cgroup) if cgroup else None
    if text and text.isdigit() and int(text) < 2**60:
        found.append(f"cgroup {int(text) / 2**30:.2f} GB")
    soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    if soft != resource.RLIM_INFINITY:
        found.append(f"address space (ulimit -v) {soft / 2**30:.2f} GB")
    return found


def oom_kills() -> int:
    """How many processes the kernel's OOM killer has ended in this process's memory cgroup (0 if unknown)."""
    events = _cgroup_file("memory.events", "memory.oom_control")
    for line in (_read(events) or "").splitlines() if events else ():
        key, _, value = line.partition(" ")
        if key == "oom_kill" and value.strip().isdigit():
            return int(value)
    return 0


def _cgroup_file(v2_name: str, v1_name: str) -> Path | None:
    """A file of this process's memory cgroup: cgroup v2's unified tree, else v1's memory controller."""
    for line in (_read(Path("/proc/self/cgroup")) or "").splitlines():
        _, controllers, path = line.split(":", 2)
        if controllers == "" and (Path("/sys/fs/cgroup") / path.lstrip("/") / v2_name).is_file():
            return Path("/sys/fs/cgroup") / path.lstrip("/") / v2_name
        if "memory" in controllers.split(","):
            candidate = Path("/sys/fs/cgroup/memory") / path.lstrip("/") / v1_name
            return candidate if candidate.is_file() else None
    return None


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def _die_with_parent() -> None:
    """Ask the kernel to SIGKILL this process when its parent dies (Linux; elsewhere nothing happens)."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):
        pass
    if os.getppid() == 1:  # the parent died before prctl took effect
        os._exit(128 + signal.SIGKILL)
