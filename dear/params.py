"""Typed, validated parameters: `params.yaml` is the single source of truth.

Each top-level section of `params.yaml` is a pydantic model below, strict
(no silent coercion: `"16"` is not an int, `1e-3` is a string in YAML 1.1)
and closed (an unknown key is an error, not ignored). A bad file fails with
one line naming the file, the key and the expected type.

`workflow/schemas/params.schema.yaml` is generated from these models
(`python -m dear.params > workflow/schemas/params.schema.yaml`), so Snakemake
validates the same rules; a test keeps the two in step.
"""

from __future__ import annotations

import sys
import typing
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from dear.errors import DearError

DEFAULT_PATH = "params.yaml"


class Section(BaseModel):
    """Base of every section: strict types, unknown keys rejected, frozen."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


# --- data: which datasets, where they live, how they are checked ---------------

class Data(Section):
    source: Literal["embedded", "coop"] = Field(
        description="embedded: the packaged emoji world under `root`; coop: real datasets in CoOp's layout")
    root: str = Field(description="folder holding one sub-folder per dataset, in CoOp's layout")
    datasets: list[str] = Field(description="datasets the pipeline prepares (folder names of DATASETS.md)")
    seeds: list[int] = Field(description="few-shot seeds; every seed gets its own few-shot table and runs")
    shots: int = Field(ge=1, description="training shots per class (validation: min(shots, 4))")
    verify: Literal["decode", "exists", "none"] = Field(
        description="decode opens every image; exists checks files are there; none trusts the split")
    skip_bad: bool = Field(description="drop missing/corrupt images (listed next to the manifest) instead of failing")
    hash_content: bool = Field(description="record each image's sha256 in the manifest (reads every byte)")
    workers: int = Field(ge=1, description="parallel workers for image verification")
    max_listed: int = Field(ge=1, description="how many bad files an error names before it counts the rest")


class Params(Section):
    """The whole `params.yaml`."""

    data: Data


# --- loading -------------------------------------------------------------------

def read_yaml(path: str | Path) -> dict:
    """Read `params.yaml` the way Snakemake's config loader does (PyYAML, YAML 1.1)."""
    path = Path(path)
    if not path.is_file():
        raise DearError(f"{path}: parameters file not found; pass --params PATH or run from the project root")
    try:
        raw = yaml.safe_load(path.read_text())
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark else ""
        raise DearError(f"{path}: not valid YAML{where}; fix the syntax")
    if not isinstance(raw, dict):
        raise DearError(f"{path}: expected a mapping of sections at the top level")
    return raw


def load_params(path: str | Path = DEFAULT_PATH) -> Params:
    """Load and validate the whole file; any problem is a one-line `DearError`."""
    raw = read_yaml(path)
    try:
        return Params.model_validate(raw)
    except ValidationError as err:
        raise DearError(_one_line(err, Path(path))) from None


def _one_line(err: ValidationError, path: Path) -> str:
    """The first validation problem, as: file, dotted key, what was expected."""
    problem = err.errors()[0]
    key = ".".join(str(part) for part in problem["loc"])
    expected = _expected_type(problem["loc"])
    kind = problem["type"]
    if kind == "missing":
        return f"{path}: missing key '{key}' (expected {expected}); add it"
    if kind == "extra_forbidden":
        return f"{path}: unknown key '{key}'; remove it or fix its spelling"
    given = problem.get("input")
    hint = ""
    if isinstance(given, str) and _looks_numeric(given):
        hint = " (YAML 1.1 reads exponents without a dot as text: write 1.0e-3, not 1e-3)"
    shown = f"{type(given).__name__} {given!r}" if not isinstance(given, (dict, list)) else type(given).__name__
    return f"{path}: key '{key}' must be {expected} ({problem['msg'].lower()}), got {shown}{hint}"


def _looks_numeric(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _expected_type(loc: tuple) -> str:
    """Walk the models along `loc` and describe the annotation found there."""
    model: Any = Params
    annotation: Any = Params
    for part in loc:
        if isinstance(part, int):
            args = typing.get_args(annotation)
            annotation = args[0] if args else annotation
            model = annotation
            continue
        fields = getattr(model, "model_fields", {})
        if part not in fields:
            return "no such key"
        annotation = fields[part].annotation
        model = annotation
    return _describe(annotation)


def _describe(annotation: Any) -> str:
    origin = typing.get_origin(annotation)
    if origin is Literal:
        return "one of " + " | ".join(str(v) for v in typing.get_args(annotation))
    if origin in (list, tuple):
        return f"a list of {_describe(typing.get_args(annotation)[0])}"
    if origin is dict:
        key, value = typing.get_args(annotation)
        return f"a mapping of {_describe(key)} to {_describe(value)}"
    if origin in (typing.Union, getattr(__import__('types'), 'UnionType', None)):
        return " or ".join(_describe(arg) for arg in typing.get_args(annotation))
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return f"a '{annotation.__name__.lower()}' section"
    return getattr(annotation, "__name__", str(annotation))


def json_schema() -> dict:
    """JSON Schema of `params.yaml`, for Snakemake's `validate`."""
    schema = Params.model_json_schema()
    schema["$schema"] = "http://json-schema.org/draft-07/schema#"
    schema["description"] = "params.yaml of the dear pipeline (generated by `python -m dear.params`)"
    return schema


if __name__ == "__main__":
    sys.stdout.write("# Generated by `python -m dear.params`; do not edit by hand.\n")
    sys.stdout.write(yaml.safe_dump(json_schema(), sort_keys=False))
