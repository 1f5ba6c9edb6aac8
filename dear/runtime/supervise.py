"""A parent that outlives its stage, to say why a job was killed.

A process killed by SIGKILL (the kernel's OOM killer, a scheduler's limit,
`kill -9`) runs no code any more: its log just stops, and the workflow
learns nothing. So a `dear <stage>` process forks before the stage starts:
the child runs the stage, the parent only waits. When the child dies of a
signal, the parent writes the last line the child could not: the signal's
name, how long it ran, where the stage was (`dear.runtime.status`, read from memory
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
import signal
import sys
from typing import Callable

from dear.runtime import status, stops

_PR_SET_PDEATHSIG = 1


def supervise(report: Callable[[str], None]) -> None:
    """Fork. The child returns (and runs the stage); the parent waits, reports a death by signal, and exits."""
    status.share()
    oom_before = status.oom_kills()
    for stream in (sys.stdout, sys.stderr):
        stream.flush()  # or both processes would print what is buffered
    parent = os.getpid()
    pid = os.fork()
    if pid == 0:
        _die_with_parent(parent)
        return
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    for signum in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, lambda received, _frame: os.kill(pid, received))
    _, code, usage = os.wait4(pid, 0)  # retried by Python when a handled signal interrupts it (PEP 475)
    if os.WIFSIGNALED(code):
        signum = os.WTERMSIG(code)
        report(stops.killed(signum, usage.ru_maxrss / 2**20, status.oom_kills() - oom_before, status.place()))
        exit_code = 128 + signum
    else:
        exit_code = os.waitstatus_to_exitcode(code)
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    os._exit(exit_code)


def _die_with_parent(parent: int) -> None:
    """Ask the kernel to SIGKILL this process when its parent dies (Linux; elsewhere nothing happens)."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):
        pass
    if os.getppid() != parent:  # the parent died before prctl took effect
        os._exit(128 + signal.SIGKILL)
