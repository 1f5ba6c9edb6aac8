"""Progress of long loops: a bar on stderr when it is a terminal, and the place a stopped job reports (`dear.status`).

Bars go to stderr, never stdout (rich's default console), so what a program
prints on stdout (a benchmark's Markdown) holds no bar; off a terminal (a job's
log, a pipe, a test) none is drawn, as rich would print each finished bar as a
line of its own there.
"""

from __future__ import annotations

import sys
from typing import Iterable, Iterator, TypeVar

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

from dear import status

T = TypeVar("T")


def track(items: Iterable[T], description: str, total: int | None = None) -> Iterator[T]:
    """Iterate `items` with a progress bar on stderr when it is a terminal; note the place of each item.

    Over a `range` the place is the item itself out of the range's end (a
    resumed training run reads "step 41 of 120", not "1 of 80").
    """
    total = total if total is not None else (len(items) if hasattr(items, "__len__") else None)
    counting = isinstance(items, range) and items.step == 1
    of = f" of {items.stop if counting else total}" if total is not None else ""
    for done, item in enumerate(_drawn(items, description, total), start=1):
        status.update(step=f"at {description}, {item + 1 if counting else done}{of}")
        yield item
    status.update(step=f"after {description}")  # (a loop that stopped on an error keeps its place)


def _drawn(items: Iterable[T], description: str, total: int | None) -> Iterable[T]:
    if not sys.stderr.isatty():
        return items
    columns = (TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
               TimeRemainingColumn())
    return _bar(items, description, total, columns)


def _bar(items: Iterable[T], description: str, total: int | None, columns: tuple) -> Iterator[T]:
    with Progress(*columns, console=Console(stderr=True), transient=False) as progress:
        yield from progress.track(items, total=total, description=description)
