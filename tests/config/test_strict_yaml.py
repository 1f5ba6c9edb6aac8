"""One strict reader: what it accepts, PyYAML (dear, Snakemake) and ruamel (DVC) read alike; the rest is refused."""

import pytest
import yaml

from dear.errors import DearError, Problems
from dear.config.strict_yaml import parse

# plain values the YAML versions may read differently (and some they read alike)
CANDIDATES = ["yes", "No", "ON", "off", "y", "n", "true", "False", "1e-3", "1E5", "1.0e3", "1.0e-3", "1.5e+2", "010",
              "0o17", "0x1F", "007", "0", "-3", "+12", "1_000", "0b101", "1:30", "1:30.5", ".5", "1.", ".inf", "-.inf",
              ".nan", "null", "~", "2026-12-04", "text", "a:b", "1.0"]


def by_dvc(text: str):
    from dvc.utils.serialize import parse_yaml

    return dict(parse_yaml(text, "x.yaml"))


@pytest.mark.parametrize("value", CANDIDATES)
def test_a_value_is_refused_when_the_yaml_versions_disagree_or_it_looks_octal(value):
    text = f"key: {value}\n"
    old, new = yaml.safe_load(text), by_dvc(text)
    same = old == new or (old["key"] != old["key"] and new["key"] != new["key"])  # nan != nan
    try:
        assert parse(text, "p.yaml") == old
        accepted = True
    except DearError as err:
        accepted = False
        assert str(err).startswith("p.yaml, line 1: key 'key': "), err
    octal = value.startswith("0") and value.isdigit() and len(value) > 1  # 007: the same here, 010 is not
    assert accepted == (same and not octal), (value, old, new)


def test_a_key_the_versions_read_differently_is_refused():
    with pytest.raises(DearError, match=r"^p.yaml, line 2: the key 'study.on': on is a boolean in YAML 1.1"):
        parse("study:\n  on: 3\n", "p.yaml")


def test_every_problem_of_a_file_is_listed_with_its_line_and_what_to_write():
    text = "data:\n  shots: 16\n  skip_bad: no\n  shots: 4\nbackbone:\n  lr: 1e-3\n  steps: 010\n"
    with pytest.raises(Problems) as err:
        parse(text, "params.yaml")
    assert err.value.lines == [
        "params.yaml, line 3: key 'data.skip_bad': no is a boolean in YAML 1.1 (dear, Snakemake) but text in YAML 1.2 "
        "(DVC); write false, or quote it for text",
        "params.yaml, line 4: key 'data.shots' is given twice (also on line 2); DVC refuses such a file and PyYAML "
        "keeps the last, so keep one of them",
        "params.yaml, line 6: key 'backbone.lr': 1e-3 is text in YAML 1.1 (dear, Snakemake) but the number 0.001 in "
        "YAML 1.2 (DVC); write 0.001",
        "params.yaml, line 7: key 'backbone.steps': 010 has a leading zero: YAML 1.1 (dear, Snakemake) reads it as "
        "octal (8), YAML 1.2 (DVC) as 10; write the number without its leading zero",
    ]


def test_quoted_text_and_merge_keys_are_fine():
    text = "base: &b {lr: 1.0e-3, name: 'yes'}\nrun:\n  <<: *b\n  lr: 2.0e-3\nwhen: '1:30'\n"
    assert parse(text, "p.yaml") == {"base": {"lr": 1e-3, "name": "yes"}, "run": {"lr": 2e-3, "name": "yes"},
                                     "when": "1:30"}


def test_a_syntax_error_keeps_the_parsers_problem_line_and_column():
    with pytest.raises(DearError) as err:
        parse("data:\n  shots: 16\n seeds: [1]\n", "params.yaml")
    assert str(err.value) == ("params.yaml, line 3, column 2: not valid YAML: expected <block end>, but found "
                              "'<block mapping start>'; fix the syntax")
