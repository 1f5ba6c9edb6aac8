"""Every bad input of `tests/bad_inputs.py`: exit 1, one line, nothing half-written, and as docs/bad-inputs.md says."""

import pytest

from tests.bad_inputs import CASES, documented, make_inputs, row, run_case

pytestmark = pytest.mark.xdist_group("bad-inputs")  # one worker makes the shared inputs once


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    return make_inputs(tmp_path_factory.mktemp("inputs"))


@pytest.mark.parametrize("case", CASES, ids=[case.id for case in CASES])
def test_bad_input_fails_in_one_line_leaving_nothing_half_written(inputs, tmp_path, case):
    outcome = run_case(case, inputs, tmp_path / "case")
    assert outcome.exit_code == 1, outcome.stderr[-3000:]
    assert len(outcome.errors) == 1 and "Traceback" not in outcome.stderr, outcome.stderr[-3000:]
    for phrase in case.expect:
        assert phrase in outcome.message, outcome.message
    assert not outcome.executed, "loading a crafted pickle ran its code"
    changed = {path for path in set(outcome.before) | set(outcome.after)
               if outcome.before.get(path) != outcome.after.get(path)}
    assert changed <= set(case.keeps), f"left behind: {sorted(changed)}"
    assert outcome.leftovers == []
    assert row(case, outcome) == documented().get(case.id), \
        "docs/bad-inputs.md does not say what happened: regenerate it with `python -m tests.bad_inputs`"


def test_the_page_lists_exactly_these_cases():
    assert sorted(documented()) == sorted(case.id for case in CASES)
