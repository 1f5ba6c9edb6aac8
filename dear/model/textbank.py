"""The text bank: short image descriptions, each labelled with a concept.

TextSpan explains a head with texts of this bank, and Concept Entropy counts
their concepts (SPEC §2-3). The default bank ships in
`dear/resources/text_bank.tsv` (made by `dear/resources/make_text_bank.py`);
a user bank is a TSV (header `text<TAB>concept`) or a Parquet file with
columns `text` and `concept`. A malformed line fails with its line number.
No torch here: `dear check` reads the bank before any model loads.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Sequence

from dear.errors import DearError

DEFAULT = "default"
WORLD = "world"  # the embedded world's own descriptions (dear.data.world.text_bank)


@dataclass(frozen=True)
class TextBank:
    texts: tuple[str, ...]
    concepts: tuple[str, ...]  # one per text
    sha256: str  # of the file's bytes
    source: str  # path it was read from

    def __len__(self) -> int:
        return len(self.texts)


def default_path() -> Path:
    return Path(str(resources.files("dear") / "resources" / "text_bank.tsv"))


def resolve(spec: str) -> Path:
    """`profile.text_bank` -> the file to read ("default" is the packaged bank)."""
    path = default_path() if spec == DEFAULT else Path(spec)
    if not path.is_file():
        raise DearError(f"profile.text_bank: {path} not found; give a TSV/Parquet of text and concept, or 'default'")
    return path


def load_bank(spec: str, allowed: Sequence[str], world=None) -> TextBank:
    """Read and check a bank; every concept must be one of `allowed`.

    spec: "default" (packaged), "world" (the embedded world's descriptions, from `world` params) or a file.
    """
    if spec == WORLD:
        return _world_bank(world, allowed)
    path = resolve(spec)
    data = path.read_bytes()
    rows = _parquet_rows(path) if path.suffix.lower() == ".parquet" else _tsv_rows(path, data)
    return _checked(rows, allowed, str(path), data)


def _world_bank(world, allowed: Sequence[str]) -> TextBank:
    from dear.data.world import text_bank

    rows = [(f"text {i + 1}", text, concept) for i, (text, concept) in enumerate(text_bank(world))]
    data = "\n".join(f"{text}\t{concept}" for _, text, concept in rows).encode()
    return _checked(rows, allowed, "world text bank (dear.data.world.text_bank)", data)


def _checked(rows: list[tuple[str, str, str]], allowed: Sequence[str], path: str, data: bytes) -> TextBank:
    allowed_set = set(allowed)
    seen: dict[str, str] = {}
    for where, text, concept in rows:
        if concept not in allowed_set:
            raise DearError(f"{path}: {where}: unknown concept '{concept}'; use one of {sorted(allowed_set)} "
                            f"or add it to profile.concepts.allowed")
        if text in seen:
            raise DearError(f"{path}: {where}: text '{text}' repeats {seen[text]}; keep each text once")
        seen[text] = where
    if not rows:
        raise DearError(f"{path}: the text bank is empty; give at least one text per concept")
    return TextBank(texts=tuple(r[1] for r in rows), concepts=tuple(r[2] for r in rows),
                    sha256=hashlib.sha256(data).hexdigest(), source=path)


def _tsv_rows(path: Path, data: bytes) -> list[tuple[str, str, str]]:
    try:
        lines = data.decode("utf-8").splitlines()
    except UnicodeDecodeError as err:
        raise DearError(f"{path}: not UTF-8 text ({err.reason}); save the bank as UTF-8")
    if not lines or lines[0].strip().split("\t") != ["text", "concept"]:
        raise DearError(f"{path}: line 1: header must be 'text<TAB>concept'; add it")
    rows = []
    for number, line in enumerate(lines[1:], start=2):
        if not line.strip() or line.startswith("#"):
            continue
        fields = line.split("\t")
        if len(fields) != 2:
            raise DearError(f"{path}: line {number}: expected 2 tab-separated fields (text, concept), got {len(fields)}")
        rows.append(_row(path, f"line {number}", *fields))
    return rows


def _parquet_rows(path: Path) -> list[tuple[str, str, str]]:
    import pyarrow.parquet as pq

    try:
        table = pq.read_table(path)
    except Exception as err:  # pyarrow raises several types for a bad file
        raise DearError(f"{path}: not a readable Parquet file ({err}); give a TSV or Parquet bank")
    if not {"text", "concept"} <= set(table.column_names):
        raise DearError(f"{path}: columns 'text' and 'concept' are required; found {table.column_names}")
    texts, concepts = table.column("text").to_pylist(), table.column("concept").to_pylist()
    return [_row(path, f"row {i + 1}", t, c) for i, (t, c) in enumerate(zip(texts, concepts))]


def _row(path: Path, where: str, text: object, concept: object) -> tuple[str, str, str]:
    text = text.strip() if isinstance(text, str) else ""
    concept = concept.strip() if isinstance(concept, str) else ""
    if not text or not concept:
        raise DearError(f"{path}: {where}: empty text or concept; fill both fields")
    return where, text, concept
