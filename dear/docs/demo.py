"""The demo's numbers in the docs: a snapshot of one `make demo` run, and the blocks that show it.

`python -m dear.docs --snapshot` (after `make demo`) copies the run's
report/results.csv and the sanity part of backbone/card.json into docs/demo/,
with run.json saying when and from which commit, and what `dear compare
docs/demo report` needs (the run's record.json and its eval tables' rows, when
the run has a record); docs/img/base_novel.png is
drawn from that results.csv by the report's own plotting code. The blocks
`demo-results` (README) and `demo-card` (docs/world.md) are written from the
snapshot, so a page never shows numbers of another run than the picture.
"""

from __future__ import annotations

import datetime
import json
import subprocess
from pathlib import Path

import pandas as pd

from dear.docs.format import percent, table
from dear.errors import DearError
from dear.runtime.io import read_json, write_bytes, write_json
from dear.config.params import load_params

SNAPSHOT = Path("docs/demo")
PICTURE = Path("docs/img/base_novel.png")
CARD_KEYS = ("arch", "pretrained", "parameters", "sanity")
TRANSFER = {"cross_dataset": "cross-dataset", "domain_generalization": "domain generalization"}


def snapshot(demo: Path, root: Path, command: str = "make demo") -> list[Path]:
    """Copy the numbers of the run in `demo` (a project folder after `make demo`) into root/docs/demo/."""
    results, card = demo / "report" / "results.csv", demo / "backbone" / "card.json"
    for path in (results, card):
        if not path.is_file():
            raise DearError(f"{path}: not found; run `make demo` in {demo} first")
    folder = root / SNAPSHOT
    made = datetime.datetime.fromtimestamp(results.stat().st_mtime, datetime.timezone.utc).date().isoformat()
    run = {"date": made, "command": command, "commit": _commit(demo),
           "sources": ["report/results.csv", "backbone/card.json"]}
    write_bytes(folder / "results.csv", results.read_bytes())
    write_json(folder / "card.json", {key: read_json(card).get(key) for key in CARD_KEYS})
    write_json(folder / "run.json", run)
    from dear.pipeline.compare import write_comparable  # record.json and evals.parquet: `dear compare docs/demo report`

    return [folder / "results.csv", folder / "card.json", folder / "run.json",
            *write_comparable(demo / "report", folder), draw(root)]


def _commit(demo: Path) -> str:
    """The commit the run was made from, '+changes' when tracked files differed from it."""
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=demo, capture_output=True, text=True,
                              check=True).stdout.strip()
        clean = subprocess.run(["git", "diff", "--quiet", "HEAD"], cwd=demo).returncode == 0
    except (OSError, subprocess.CalledProcessError):
        return "unknown (not a git checkout)"
    return head if clean else f"{head}+changes"


def draw(root: Path) -> Path:
    """docs/img/base_novel.png from the snapshot's results.csv, as `dear report` draws report/base_novel.png."""
    from dear.report.plots import base_novel_png

    params = load_params(root / "params.yaml")
    write_bytes(root / PICTURE, base_novel_png(_results(root), params.report_methods, params.report.confidence,
                                               params.report.dpi))
    return root / PICTURE


def _results(root: Path) -> pd.DataFrame:
    path = root / SNAPSHOT / "results.csv"
    if not path.is_file():
        raise DearError(f"{path}: no snapshot of a demo run; run `make demo`, then `python -m dear.docs --snapshot`")
    return pd.read_csv(path, keep_default_na=False, na_values=[""])


def _run(root: Path) -> dict:
    return json.loads((root / SNAPSHOT / "run.json").read_text())


def _source(run: dict) -> str:
    return f"`{run['command']}` on {run['date']} (commit {run['commit']})"


def demo_results(root: Path) -> str:
    """The README's table: the base-to-novel average per method, each dataset's HM, the transfer averages."""
    results, run = _results(root), _run(root)
    b2n = results[results["protocol"] == "base_to_novel"]
    datasets = list(dict.fromkeys(b2n.loc[b2n["row"] == "dataset", "dataset"]))
    transfer = [p for p in TRANSFER if (results["protocol"] == p).any()]
    listed = load_params(root / "params.yaml").report_methods
    methods = listed + sorted(set(results["method"]) - set(listed))
    rows = [[method, *[_cell(b2n, "Average", method, metric, std=True) for metric in ("base", "novel", "hm")],
             *[_cell(b2n, dataset, method, "hm") for dataset in datasets],
             *[_cell(results[results["protocol"] == p], "Average", method, "accuracy") for p in transfer]]
            for method in methods]
    header = ["method", "Base", "Novel", "HM", *[f"{d} HM" for d in datasets], *[TRANSFER[p] for p in transfer]]
    seeds = sorted({int(s) for text in b2n["seeds"].dropna().astype(str) for s in text.split(";") if s})
    caption = (f"{_source(run)}; mean ± std over seeds {', '.join(map(str, seeds))}. Base, Novel, HM: the "
               f"average over the {len(datasets)} base-to-novel datasets (HM of the averaged Base and Novel); "
               f"{' and '.join(TRANSFER[p] for p in transfer)}: the average over the target datasets. "
               "— : not in that run.")
    note = f" {run['note']}" if run.get("note") else ""
    return table(header, rows) + f"\n\n{caption}{note}"


def _cell(rows: pd.DataFrame, dataset: str, method: str, metric: str, std: bool = False) -> str:
    match = rows[(rows["dataset"] == dataset) & (rows["method"] == method) & (rows["metric"] == metric)]
    if match.empty:
        return "—"
    row = match.iloc[0]
    return percent(float(row["mean"]), float(row["std"]) if std else None)


def demo_card(root: Path) -> str:
    """Zero-shot top-1 of the demo's backbone on every world test set (its card's sanity check)."""
    card, run = json.loads((root / SNAPSHOT / "card.json").read_text()), _run(root)
    sanity = card.get("sanity") or {}
    if not sanity:
        return f"The backbone of {_source(run)} ran without the zero-shot sanity check."
    rows = []
    for name, entry in sanity.items():
        rows.append([f"`{name}`", str(entry["classes"]), str(entry["images"]), f"{100 * entry['top1']:.1f}",
                     f"{100 * entry['chance']:.1f}"])
        if "base_top1" in entry:
            rows.append([f"... base / novel half (each among its own classes)", "", "",
                         f"{100 * entry['base_top1']:.1f} / {100 * entry['novel_top1']:.1f}",
                         f"{100 * entry['base_chance']:.1f}"])
    return (table(["test set", "classes", "images", "zero-shot top-1 (%)", "chance (%)"], rows)
            + f"\n\nFrom `backbone/card.json` of {_source(run)}: `{card.get('arch')}`"
              + (f", {card['parameters']:,} parameters." if card.get("parameters") else "."))


def demo_picture(root: Path) -> str:
    """The README's picture: the snapshot's base/novel/HM bars, and which run they show."""
    run, confidence = _run(root), load_params(root / "params.yaml").report.confidence
    return (f"![Base, Novel and HM accuracy per dataset and method on the embedded world]({PICTURE.as_posix()})\n\n"
            f"*Base-to-novel accuracy of {_source(run)} on the embedded world, per dataset and averaged (bars: the "
            f"mean over seeds, whiskers: its {confidence * 100:g}% interval); the numbers are under "
            f"[Results](#results-of-the-embedded-demo).*")


def roles_change(root: Path, folder: str = "docs/demo-roles") -> str:
    """The tables of the report's "What the roles change", from the paired differences a snapshot keeps.

    `folder` holds a `make demo-roles` run's report/differences.csv (and its roles_change.png); the rows
    rendered are its `+roles` pairs, with params.yaml's report settings (decimals, confidence), so the page
    shows the snapshot's numbers and no other run's.
    """
    from dear.methods import ROLES
    from dear.report.markdown import Page, role_changes_picture, role_changes_tables

    path = root / folder / "differences.csv"
    if not path.is_file():
        raise DearError(f"{path}: not found; copy a make demo-roles run's report/differences.csv there")
    frame = pd.read_csv(path).fillna({"source": ""})  # a few-shot Average has no source: "" in the report's frame
    frame = frame[frame["method"] == frame["baseline"] + ROLES]
    report = load_params(root / "params.yaml").report
    page = Page(decimals=report.decimals, methods=[], seeds=[], std_warning=0.0, confidence=report.confidence,
                resamples=report.bootstrap_resamples, n_evals=0, reference=False, heatmaps=[], has_loss=False)
    picture = Path(folder).relative_to("docs") / "roles_change.png"
    return "\n".join([*role_changes_tables(frame, page), role_changes_picture(str(picture))]) + "\n"
