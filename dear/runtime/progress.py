"""Progress of long loops: a bar on a terminal, lines in a log, and the place a stopped job reports (`dear.runtime.status`).

Bars go to stderr, never stdout (rich's default console), so what a program
prints on stdout (a benchmark's Markdown) holds no bar; off a terminal (a job's
log, a pipe, a test) none is drawn, as rich would print each finished bar as a
line of its own there. There a loop logs instead, by the clock rather than
every N steps: a first line `FIRST_AFTER` seconds in (so a job's log says how
fast it goes within seconds of the loop's start, however slow a step is), then
one every `EVERY` seconds, and a last one when a loop that logged ends. Each
line says how far (done/total), how fast, and how long is left:
`train coop: 41/120 steps, 2.31 steps/s, about 34 s left`.
"""

from __future__ import annotations

import logging
import sys
import time
from typing import Callable, Iterable, Iterator, TypeVar

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

from dear.runtime import status

T = TypeVar("T")
FIRST_AFTER = 5.0  # seconds from a loop's start to its first line in a log
EVERY = 30.0  # seconds between the lines after
clock: Callable[[], float] = time.monotonic  # what the lines time (tests set a fake one)
log = logging.getLogger("dear.progress")


class Pace:
    """How far a loop is and how fast it goes: `line(done)` -> '41/120 steps, 2.31 steps/s, about 34 s left'.

    The rate counts the steps of this process only (`start`: where a resumed loop began).
    """

    def __init__(self, total: int | None, start: int = 0, unit: str = "steps"):
        self.total, self.start, self.unit, self.began = total, start, unit, clock()

    def line(self, done: int) -> str:
        seconds = max(clock() - self.began, 1e-9)
        rate = (done - self.start) / seconds
        shown = f"{rate:.2f} {self.unit}/s" if rate >= 1 or rate == 0 else f"{1 / rate:.1f} s per {singular(self.unit)}"
        if self.total is None:
            return f"{done} {self.unit}, {shown}, {duration(seconds)} so far"
        left = f"about {duration((self.total - done) / rate)} left" if rate > 0 else "time left unknown yet"
        return f"{done}/{self.total} {self.unit}, {shown}, {left}" if done < self.total else \
            f"{done}/{self.total} {self.unit} in {duration(seconds)}, {shown}"


def singular(unit: str) -> str:
    """'batches' -> 'batch', 'steps' -> 'step', 'images' -> 'image': the English plural undone, not cut."""
    for plural, one in (("ches", "ch"), ("shes", "sh"), ("sses", "ss"), ("xes", "x")):
        if unit.endswith(plural):
            return unit[: -len(plural)] + one
    return unit[:-1] if len(unit) > 1 and unit.endswith("s") and not unit.endswith("ss") else unit


def duration(seconds: float) -> str:
    """'4 s', '3 min 20 s', '2 h 05 min'."""
    seconds = round(seconds)
    if seconds < 60:
        return f"{seconds} s"
    if seconds < 3600:
        return f"{seconds // 60} min {seconds % 60:02d} s"
    return f"{seconds // 3600} h {seconds % 3600 // 60:02d} min"


def track(items: Iterable[T], description: str, total: int | None = None, unit: str = "steps") -> Iterator[T]:
    """Iterate `items` with a progress bar on stderr when it is a terminal, lines in the log when not; note the
    place of each item.

    Over a `range` the place is the item itself out of the range's end (a
    resumed training run reads "step 41 of 120", not "1 of 80").
    """
    total = total if total is not None else (len(items) if hasattr(items, "__len__") else None)
    counting = isinstance(items, range) and items.step == 1
    of = f" of {items.stop if counting else total}" if total is not None else ""
    drawn = sys.stderr.isatty()
    offset = items.start if counting else 0
    pace = Pace(None if total is None else total + offset, offset, unit)
    due, position, logged = pace.began + FIRST_AFTER, offset, None
    for done, item in enumerate(_drawn(items, description, total) if drawn else items, start=1):
        status.update(step=f"at {description}, {item + 1 if counting else done}{of}")
        yield item
        position = offset + done
        if not drawn and clock() >= due:
            log.info("%s: %s", description, pace.line(position))
            due, logged = clock() + EVERY, position
    if logged is not None and logged != position:  # a loop that logged says when it ended
        log.info("%s: %s", description, pace.line(position))
    status.update(step=f"after {description}")  # (a loop that stopped on an error keeps its place)


def _drawn(items: Iterable[T], description: str, total: int | None) -> Iterable[T]:
    columns = (TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
               TimeRemainingColumn())
    return _bar(items, description, total, columns)


def _bar(items: Iterable[T], description: str, total: int | None, columns: tuple) -> Iterator[T]:
    with Progress(*columns, console=Console(stderr=True), transient=False) as progress:
        yield from progress.track(items, total=total, description=description)
