"""Interleaved timing shared by the benchmarks: machine load hits every side of a ratio alike."""

from __future__ import annotations

import statistics
import time


def interleave(functions: dict, repeats: int) -> dict[str, float]:
    """Median seconds of each zero-argument function, run in turn `repeats` times after one warm-up."""
    return {name: statistics.median(values) for name, values in samples(functions, repeats).items()}


def samples(functions: dict, repeats: int) -> dict[str, list[float]]:
    """Every timed run (seconds) of each zero-argument function, run in turn `repeats` times after one warm-up."""
    times = {name: [] for name in functions}
    for index in range(repeats + 1):
        for name, function in functions.items():
            start = time.perf_counter()
            function()
            if index:
                times[name].append(time.perf_counter() - start)
    return times
