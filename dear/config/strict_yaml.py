"""The one reader of config files: `dear`, the Snakefile and the DVC helper scripts all parse through it.

A config is read by three YAML parsers: PyYAML (YAML 1.1) in `dear` and
Snakemake, ruamel (YAML 1.2) in DVC. They disagree on some plain values:
`yes`/`no`/`on`/`off` are booleans in 1.1 and text in 1.2, `1e-3` is text in
1.1 and a number in 1.2, `010` is 8 in 1.1 and 10 in 1.2, `1:30` is 90 in 1.1
and text in 1.2. PyYAML also keeps the last of two equal keys without a word
while DVC refuses the file. So this reader refuses all of these, with one line
each naming the file, the line and the key, and what to write instead: a file
it accepts means the same to every engine (tests/config/test_strict_yaml.py checks
against both parsers).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from dear.errors import DearError, Problems

_BOOL_11 = re.compile(r"^(yes|Yes|YES|no|No|NO|on|On|ON|off|Off|OFF)$")  # booleans in 1.1 only
_OCTAL_11 = re.compile(r"^[-+]?0[0-7_]+$")  # 010: 8 in 1.1, 10 in 1.2
_NUMBER_12 = re.compile(r"^[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?$|^0o[0-7]+$")  # numbers in 1.2
_INT, _FLOAT, _BOOL, _STR = (f"tag:yaml.org,2002:{name}" for name in ("int", "float", "bool", "str"))
_MERGE = "tag:yaml.org,2002:merge"
# libyaml's parser where PyYAML has it: the same nodes and values (PyYAML's resolver and constructor), ~20x faster,
# and every job reads its params file
_FAST = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def read(path: str | Path) -> Any:
    """The YAML file at `path`, or a one-line `DearError` (several lines: `Problems`) saying what to fix."""
    return _refuse(*read_all(path))


def read_all(path: str | Path) -> tuple[Any, list[tuple[str, str]]]:
    """(what PyYAML reads, [(dotted key, line)] of every problem): `dear check` goes on past them."""
    path = Path(path)
    if not path.is_file():
        raise DearError(f"{path}: parameters file not found; pass --params PATH or run from the project root")
    return parse_all(path.read_text(), str(path))


def parse(text: str, source: str, lines: bool = True) -> Any:
    """Parse `text` (from `source`, for the messages), refusing every problem; see `parse_all`."""
    return _refuse(*parse_all(text, source, lines))


def parse_all(text: str, source: str, lines: bool = True) -> tuple[Any, list[tuple[str, str]]]:
    """(the data as PyYAML reads it, [(dotted key, line)] of each duplicated key or value the versions disagree on).

    A syntax error is a `DearError` keeping the parser's problem, line and column. `lines=False` for a
    one-line value (`--set KEY=VALUE`): its messages name the source only.
    """
    try:
        return _parse_with(_FAST, text, source, lines)
    except yaml.YAMLError:
        pass  # PyYAML's own parser reads it again, for the error in its words
    try:
        return _parse_with(yaml.SafeLoader, text, source, lines)
    except yaml.MarkedYAMLError as err:
        mark = err.problem_mark or err.context_mark
        where = (f", line {mark.line + 1}" if lines else "") + f", column {mark.column + 1}" if mark else ""
        raise DearError(f"{source}{where}: not valid YAML: {err.problem or err.context}; fix the syntax") from None
    except yaml.YAMLError as err:
        raise DearError(f"{source}: not valid YAML ({err}); fix the syntax") from None


def _parse_with(loader_class, text: str, source: str, lines: bool) -> tuple[Any, list[tuple[str, str]]]:
    loader = loader_class(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None, []
        found = _problems(node, source, [], lines)  # before constructing, which folds `<<` merges into the node
        return loader.construct_document(node), found
    finally:
        loader.dispose()


def dump(data: Any) -> str:
    """YAML text of `data` that this reader reads back as `data`: text PyYAML would write bare but YAML 1.2
    reads otherwise (the string '1e-3') is quoted."""
    return yaml.dump(data, Dumper=_Dumper, sort_keys=False)


class _Dumper(yaml.SafeDumper):
    def represent_str(self, data: str):
        node = super().represent_str(data)
        node.style = node.style or ("'" if _trap(node) else None)
        return node


_Dumper.add_representer(str, _Dumper.represent_str)


def _refuse(data: Any, found: list[tuple[str, str]]) -> Any:
    if len(found) > 1:
        raise Problems([line for _, line in found])
    if found:
        raise DearError(found[0][1])
    return data


def _problems(node: Node, source: str, path: list[str], lines: bool) -> list[tuple[str, str]]:
    """(dotted key, line) of every duplicated key and every value the YAML versions read differently, below `node`."""
    where = lambda mark: f"{source}, line {mark.line + 1}" if lines else source  # noqa: E731
    dotted = ".".join(path)
    if isinstance(node, ScalarNode):
        trap = _trap(node)
        return [(dotted, f"{where(node.start_mark)}: {f'key {dotted!r}: ' if path else ''}{trap}")] if trap else []
    if isinstance(node, SequenceNode):
        return [found for index, item in enumerate(node.value)
                for found in _problems(item, source, [*path, str(index)], lines)]
    if not isinstance(node, MappingNode):
        return []
    found, seen = [], {}
    for key_node, value_node in node.value:
        if key_node.tag == _MERGE:  # `<<: *anchor`: merged keys may be overridden on purpose
            found += _problems(value_node, source, path, lines)
            continue
        name = str(key_node.value) if isinstance(key_node, ScalarNode) else "?"
        key = ".".join([*path, name])
        trap = _trap(key_node) if isinstance(key_node, ScalarNode) else None
        if trap:
            found.append((key, f"{where(key_node.start_mark)}: the key '{key}': {trap}"))
        if name in seen:
            found.append((key, f"{where(key_node.start_mark)}: key '{key}' is given twice (also on line {seen[name]}); "
                               "DVC refuses such a file and PyYAML keeps the last, so keep one of them"))
        seen.setdefault(name, key_node.start_mark.line + 1)
        found += _problems(value_node, source, [*path, name], lines)
    return found


def _trap(node: ScalarNode) -> str | None:
    """What is wrong with a plain scalar the YAML versions read differently, and what to write; None if nothing."""
    if node.style:  # quoted or block text: a string everywhere (plain: None, or "" from libyaml)
        return None
    value, tag = node.value, node.tag
    if tag == _BOOL and _BOOL_11.match(value):
        return (f"{value} is a boolean in YAML 1.1 (dear, Snakemake) but text in YAML 1.2 (DVC); "
                f"write {'true' if value.lower() in ('yes', 'on') else 'false'}, or quote it for text")
    if tag == _INT and _OCTAL_11.match(value):
        return (f"{value} has a leading zero: YAML 1.1 (dear, Snakemake) reads it as octal ({yaml.safe_load(value)}), "
                f"YAML 1.2 (DVC) as {int(value.replace('_', ''))}; write the number without its leading zero")
    if tag in (_INT, _FLOAT) and ":" in value:
        return (f"{value} is a base-60 number ({yaml.safe_load(value)}) in YAML 1.1 (dear, Snakemake) but text in "
                "YAML 1.2 (DVC); quote it")
    if tag == _STR and _NUMBER_12.match(value):
        number = int(value, 8) if value.startswith("0o") else float(value)
        return (f"{value} is text in YAML 1.1 (dear, Snakemake) but the number {number!r} in YAML 1.2 (DVC); "
                f"write {yaml.safe_dump(number).splitlines()[0]}")
    return None
