"""Markdown formatting shared by the generated blocks: tables and config values."""

from __future__ import annotations


def table(header: list[str], rows: list[list[str]]) -> str:
    """A Markdown table; a `|` inside a cell is escaped so it cannot split the cell."""
    lines = [header, ["---"] * len(header)] + rows
    return "\n".join("| " + " | ".join(str(cell).replace("|", "\\|") for cell in line) + " |" for line in lines)


def value(item) -> str:
    """A config value as YAML's flow style writes it (floats as the project writes them: 1.0e-3)."""
    if item is None:
        return "null"
    if isinstance(item, bool):
        return "true" if item else "false"
    if isinstance(item, float):
        return _float(item)
    if isinstance(item, list):
        return "[" + ", ".join(value(part) for part in item) + "]"
    if isinstance(item, dict):
        return "{" + ", ".join(f"{key}: {value(part)}" for key, part in item.items()) + "}"
    return str(item)


def code(item) -> str:
    """A config value in backticks, ready for a table cell."""
    return f"`{value(item)}`"


def _float(number: float) -> str:
    if number != 0 and abs(number) < 1e-2:
        mantissa, exponent = f"{number:.1e}".split("e")
        return f"{mantissa}e{int(exponent)}"
    return repr(number)


def minutes(total: int) -> str:
    """A Slurm time limit in minutes, as a person reads it: 30 min, 2 h, 1 h 30 min."""
    hours, rest = divmod(total, 60)
    if not hours:
        return f"{rest} min"
    return f"{hours} h" + (f" {rest} min" if rest else "")


def percent(mean: float, std: float | None = None, decimals: int = 2) -> str:
    """'mean ± std' of a percentage; '—' when missing (never 0)."""
    if mean is None or mean != mean:
        return "—"
    text = f"{mean:.{decimals}f}"
    if std is not None and std == std:
        text += f" ± {std:.{decimals}f}"
    return text
