"""Progress bars: on stderr when it is a terminal, never on stdout (a benchmark's Markdown), and the place noted."""

from __future__ import annotations

import io
import sys

from dear import progress, status


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
