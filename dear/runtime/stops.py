"""Why a stage stopped, in the one line that ends its log.

Every way a stage can stop has its line here: Ctrl-C and SIGTERM/SIGHUP
(`interrupted`: the stage raises `Stopped` on the signal and says where it was
and what a rerun does), an exception that is not bad input (`failed`: out of
memory with the peak and the limits, or an unexpected error), and a death by
signal, which the stage cannot report itself (`killed`: written by the parent
that watches it, dear/runtime/supervise.py). Bad input has its own line (`DearError`).
Where the stage was comes from `dear.runtime.status`.
"""

from __future__ import annotations

import signal

from dear.runtime import status

CRASHES = {signal.SIGSEGV, signal.SIGBUS, signal.SIGILL, signal.SIGFPE}


class Stopped(BaseException):
    """SIGTERM or SIGHUP reached the stage: stop like Ctrl-C (a scheduler's time limit, scancel, Snakemake stopping)."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


def stop_on_signals() -> None:
    """Raise `Stopped` on SIGTERM and SIGHUP, once: a second one (a whole process group signalled, then the parent
    handing its copy on) would break into the exit."""
    def stop(signum: int, _frame) -> None:
        for other in (signal.SIGTERM, signal.SIGHUP):
            signal.signal(other, signal.SIG_IGN)
        raise Stopped(signum)

    for signum in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, stop)


def exit_code(stop: BaseException) -> int:
    """A shell's code for a command stopped by a signal: 128 + its number (Ctrl-C: 130)."""
    return 128 + getattr(stop, "signum", signal.SIGINT)


def interrupted(stop: BaseException) -> str:
    """The line of a stage stopped by Ctrl-C (KeyboardInterrupt) or by SIGTERM/SIGHUP (`Stopped`)."""
    if isinstance(stop, Stopped):
        what = (f"stopped by {signal.Signals(stop.signum).name} (a scheduler's time limit, scancel, or the workflow "
                "stopping)")
    else:
        what = "interrupted (Ctrl-C)"
    return f"{what} after {status.elapsed()}, {status.where()}; {status.resume_hint()}"


def out_of_memory(err: BaseException) -> bool:
    """Python's MemoryError, or torch's failed allocation (CPU: "can't allocate memory", CUDA: OutOfMemoryError)."""
    text = str(err).lower()
    return isinstance(err, MemoryError) or type(err).__name__ == "OutOfMemoryError" or (
        isinstance(err, RuntimeError) and ("can't allocate memory" in text or "out of memory" in text))


def failed(err: Exception) -> str:
    """The line of a stage stopped by an exception that is not bad input: out of memory, or unexpected."""
    message = " ".join(str(err).split())[:300]
    if out_of_memory(err):
        return (f"out of memory after {status.elapsed()}, {status.where()} ({type(err).__name__}: {message}); "
                f"{_memory(status.peak_memory_gb())}; lower a batch size or give the job more memory; "
                f"{status.resume_hint()}")
    return (f"{type(err).__name__}: {message}, after {status.elapsed()}, {status.where()}; an error dear does not "
            "expect (a bug, or a broken install): the traceback is above and in the log; please report it with them")


def killed(signum: int, peak_gb: float, oom_killed: int, place: dict[str, str]) -> str:
    """The line of a stage killed by `signum` (written by its parent: `place` is what the stage last shared)."""
    if oom_killed > 0:
        cause = ("the kernel's OOM killer ended it: the job reached its memory limit; ask for more memory or lower "
                 "a batch size")
    elif signum == signal.SIGKILL:
        cause = ("SIGKILL comes from outside the job: the kernel's OOM killer (out of memory), a scheduler's time or "
                 "memory limit, or kill -9")
    elif signum in CRASHES:
        cause = "a crash in native code (torch, a library or a driver)"
    elif signum == signal.SIGABRT:
        cause = "an abort in native code (often an allocation that failed: out of memory)"
    else:
        cause = "a signal from outside the job"
    return (f"killed by {signal.Signals(signum).name} after {status.elapsed()}, {status.where(place)}; "
            f"{_memory(peak_gb)}; {cause}; {status.resume_hint(place)}")


def _memory(peak_gb: float) -> str:
    limits = status.memory_limits()
    return f"peak memory {peak_gb:.2f} GB" + (f" (limits: {', '.join(limits)})" if limits else "")
