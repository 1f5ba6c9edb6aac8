"""Progress bars: on stderr when it is a terminal, never on stdout (a benchmark's Markdown), and the place noted;
off a terminal, log lines by the clock (a fake one here, never wall time) saying how far, how fast, how long is left."""

from __future__ import annotations

import io
import logging
import sys

import pytest

from dear.runtime import progress, status


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_bars_go_to_a_terminal_s_stderr_and_never_to_stdout(monkeypatch, capsys):
    terminal = _Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    assert list(progress.track(range(3), "steps")) == [0, 1, 2]
    assert "steps" in terminal.getvalue() and "3/3" in terminal.getvalue()
    assert capsys.readouterr().out == ""
    monkeypatch.setattr(sys, "stderr", io.StringIO())  # not a terminal: no bar at all
    assert list(progress.track(["a", "b"], "files")) == ["a", "b"]
    assert sys.stderr.getvalue() == "" and capsys.readouterr().out == ""


def test_the_place_is_the_step_of_a_range_and_the_count_of_anything_else():
    places = [status.place()["step"] for _ in progress.track(range(40, 43), "train dear")]
    assert places == ["at train dear, 41 of 43", "at train dear, 42 of 43", "at train dear, 43 of 43"]
    assert [status.place()["step"] for _ in progress.track(iter("ab"), "files", total=2)] == \
        ["at files, 1 of 2", "at files, 2 of 2"]
    assert status.place()["step"] == "after files"

@pytest.fixture
def fake_clock(monkeypatch):
    """A clock that moves only when the test says: `now[0] += seconds`."""
    now = [1000.0]
    monkeypatch.setattr(progress, "clock", lambda: now[0])
    return now


def lines(caplog) -> list[str]:
    return [record.getMessage() for record in caplog.records if record.name == "dear.progress"]


def test_the_first_line_comes_seconds_in_then_one_every_half_minute_each_with_rate_and_time_left(fake_clock, caplog):
    caplog.set_level(logging.INFO, logger="dear.progress")
    for _ in progress.track(range(100), "train coop"):
        fake_clock[0] += 2.0  # a slow step: 2 s
    said = lines(caplog)
    assert said[0] == "train coop: 3/100 steps, 2.0 s per step, about 3 min 14 s left"  # 6 s in: within 10 s
    assert said[1] == "train coop: 18/100 steps, 2.0 s per step, about 2 min 44 s left"  # 30 s later
    assert said[-1] == "train coop: 100/100 steps in 3 min 20 s, 2.0 s per step"
    assert len(said) == 2 + (100 - 18) // 15 + 1


def test_a_resumed_loop_counts_from_where_it_resumed_and_its_rate_from_this_process(fake_clock, caplog):
    caplog.set_level(logging.INFO, logger="dear.progress")
    for _ in progress.track(range(40, 120), "train mmrl", total=80):
        fake_clock[0] += 0.25
    assert lines(caplog)[0] == "train mmrl: 60/120 steps, 4.00 steps/s, about 15 s left"


def test_a_short_loop_logs_nothing_and_a_fast_one_with_a_unit_says_it(fake_clock, caplog):
    caplog.set_level(logging.INFO, logger="dear.progress")
    for _ in progress.track(range(10), "sanity"):
        fake_clock[0] += 0.1
    assert lines(caplog) == []
    for _ in progress.track(iter(range(500)), "world world_objects", total=500, unit="images"):
        fake_clock[0] += 0.0125
    assert lines(caplog) == ["world world_objects: 400/500 images, 80.00 images/s, about 1 s left",
                             "world world_objects: 500/500 images in 6 s, 80.00 images/s"]


def test_durations_read_as_a_person_writes_them():
    assert [progress.duration(s) for s in (4.4, 200, 7500)] == ["4 s", "3 min 20 s", "2 h 05 min"]


def test_a_slow_loop_names_one_of_its_units_in_the_singular(fake_clock, caplog):
    caplog.set_level(logging.INFO, logger="dear.progress")
    for _ in progress.track(range(4), "evaluate: world_objects_sketch all", unit="batches"):
        fake_clock[0] += 2.2
    assert "4/4 batches in 9 s, 2.2 s per batch" in lines(caplog)[-1]
    assert [progress.singular(unit) for unit in ("batches", "steps", "images", "passes", "s")] == \
        ["batch", "step", "image", "pass", "s"]
