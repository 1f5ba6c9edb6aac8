"""Where the running stage is and what memory it used, for the last line of a job that stopped (`dear.runtime.stops`).

A stage reports its place as it goes: `dear.cli` the stage and the seed,
`dear.runtime.progress.track` the loop and how far it got, the training checkpoint
its step. When the job stops on an error, Ctrl-C, a signal or a lack of
memory, `where()` goes into the line that ends its log. A job killed outright
(SIGKILL) runs no code any more, so the supervising parent (`dear.runtime.supervise`)
writes that line instead; it reads the place from memory it shares with the
stage (`share()`, before the fork), which the stage rewrites at each update
(a few hundred bytes, microseconds: cheap next to a loop's item). The memory
facts: the peak the kernel counted, the limits in force (the job's cgroup,
`ulimit -v`) and how many processes the kernel's OOM killer ended.
"""

from __future__ import annotations

import json
import mmap
import resource
import time
from pathlib import Path

_SIZE = 4096  # bytes of the shared record: a length, then JSON
_place: dict[str, str] = {}
_shared: mmap.mmap | None = None
_started = time.monotonic()


def share() -> None:
    """Keep the place in memory a forked parent can read after the stage died (call before forking)."""
    global _shared
    _shared = mmap.mmap(-1, _SIZE)  # anonymous and MAP_SHARED: parent and child see the same bytes


def update(**parts: str | None) -> None:
    """Set parts of the place (stage, seed, step, checkpoint); None removes one."""
    for key, value in parts.items():
        if value is None:
            _place.pop(key, None)
        else:
            _place[key] = value
    if _shared is not None:
        data = json.dumps(_place).encode()[:_SIZE - 4]
        _shared[4:4 + len(data)] = data
        _shared[:4] = len(data).to_bytes(4, "little")


def place() -> dict[str, str]:
    """The place as this process last set it, or as the stage it shares memory with wrote it."""
    if _shared is None:
        return dict(_place)
    length = int.from_bytes(_shared[:4], "little")
    try:
        return json.loads(_shared[4:4 + length].decode(errors="replace")) if length else {}
    except json.JSONDecodeError:  # killed in the middle of a write
        return {}


def where(found: dict[str, str] | None = None) -> str:
    """'in train, seed 2 (2 of 3), at train mmrl, 41 of 120' (whatever is known)."""
    found = place() if found is None else found
    parts = [f"in {found['stage']}" if "stage" in found else "before the stage started"]
    if "seed" in found:
        parts.append(f"seed {found['seed']}")
    if "step" in found:
        parts.append(found["step"])
    return ", ".join(parts)


def resume_hint(found: dict[str, str] | None = None) -> str:
    """What a rerun of the same command does after a stop at this place."""
    found = place() if found is None else found
    if "checkpoint" in found:
        return f"its last checkpoint ({found['checkpoint']}) is kept: rerun the same command to resume from it"
    if found.get("checkpoint_file") and Path(found["checkpoint_file"]).is_file():  # stopped as its first one was saved
        return f"its last checkpoint ({found['checkpoint_file']}) is kept: rerun the same command to resume from it"
    return "nothing half-written was kept: rerun the same command to run it again"


def elapsed() -> str:
    seconds = int(time.monotonic() - _started)
    return f"{seconds // 60} min {seconds % 60} s" if seconds >= 60 else f"{seconds} s"


def peak_memory_gb(children: bool = False) -> float:
    """Peak resident memory of this process (or of its waited-for children) in GB, as the kernel counted it."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN if children else resource.RUSAGE_SELF)
    return usage.ru_maxrss / 2**20  # KiB on Linux


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
