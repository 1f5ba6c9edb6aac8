"""`dear compare RUN_A RUN_B`: which numbers moved beyond noise between two runs, and which inputs differ.

A run is its report folder (or an output root holding report/): its
record.json (dear.pipeline.runrecord) names the eval tables, model files, params,
code, data and environment of the run. Numbers: for every method both runs
hold, B minus A per seed on the same few-shot seeds and the same test
images, with the report's intervals and verdict (dear.report.paired: run B
takes the place of the method, run A of the baseline). Inputs: the params
(every key that differs), each trained model's recipe and run hash, the
code commits, the data manifests' hashes, the versions and devices.

A number of one run only (a dataset, protocol, seed or method the other
run did not score) cannot be paired: it is listed as such, never counted
as a number that did not move; when nothing pairs up at all, the
comparison says so and `dear compare` exits 1 (`NothingPaired`).
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pyarrow as pa

from dear.errors import DearError
from dear.config.params import Params
from dear.report import paired
from dear.scoring.results import read_evals

SNAPSHOT_EVALS = "evals.parquet"  # a snapshot's eval rows (write_comparable)
LOCATION_KEYS = ("output_root", "data.root", "model.cache_dir")  # where a run reads and writes, not what it computes
UNPAIRED = "missing"  # paired.differences' verdict of a number one run lacks


class NothingPaired(DearError):
    """No number of one run has a partner in the other: `text` is the whole comparison, which says why."""

    def __init__(self, message: str, text: str):
        super().__init__(message)
        self.text = text


def run(params: Params, run_a: Path, run_b: Path) -> str:
    """The comparison as Markdown (what `dear compare` prints); `NothingPaired` (with the text) when no number pairs."""
    a, b = _report_folder(run_a), _report_folder(run_b)
    record_a, record_b = _record(a), _record(b)
    lines = [f"# dear compare: {run_a} → {run_b}", "", "## Inputs that differ", ""]
    lines += inputs_differ(record_a, record_b)
    lines += ["", "## Machines", ""] + machines(record_a, record_b)
    moved = numbers(a, b, record_a, record_b, paired.Options(params.report.confidence,
                                                             params.report.bootstrap_resamples, params.report.std_ddof))
    lines += ["", "## Numbers", ""] + _numbers_text(moved, params.report.decimals, params.report.confidence)
    text = "\n".join(lines) + "\n"
    if not (moved["verdict"] != UNPAIRED).any():
        raise NothingPaired(f"{run_a} and {run_b}: nothing could be paired ({len(moved)} numbers, each in one run "
                            "only: other datasets, protocols, seeds or methods); compare runs of the same study", text)
    return text


def _report_folder(path: Path) -> Path:
    for folder in (Path(path), Path(path) / "report"):
        if (folder / "record.json").is_file():
            return folder
    if (Path(path) / "run.json").is_file():  # a docs/demo snapshot made before it kept the record
        raise DearError(f"{path}: a snapshot without the run's record.json and evals.parquet; make one that has them: "
                        "`make demo`, then `python -m dear.docs --snapshot`")
    raise DearError(f"{path}: no record.json here or in {Path(path) / 'report'}; pass a run's report folder "
                    "(written by `dear report` with --models and --benchmarks) or its output root")


def _record(folder: Path) -> dict:
    try:
        return json.loads((folder / "record.json").read_text())
    except (OSError, json.JSONDecodeError) as err:
        raise DearError(f"{folder / 'record.json'}: not readable ({err}); rerun `dear report`") from err


# --- inputs ----------------------------------------------------------------------------

def inputs_differ(a: dict, b: dict) -> list[str]:
    """One line per kind of input: what differs between the two records, or that nothing does."""
    flat_a, flat_b = flatten(a["params"]), flatten(b["params"])
    changed = [key for key in sorted(set(flat_a) | set(flat_b)) if flat_a.get(key) != flat_b.get(key)]
    what = [key for key in changed if not key.startswith(LOCATION_KEYS)]
    lines = [f"- **params**: {len(what)} differ" + (":" if what else " (besides where the runs read and write)")]
    lines += [f"  - `{key}`: {_show(flat_a.get(key))} → {_show(flat_b.get(key))}" for key in what]
    where = [key for key in changed if key.startswith(LOCATION_KEYS)]
    if where:
        lines.append("  - where they read and write: " + ", ".join(f"`{key}`" for key in where))
    lines += _recipes(a["models"], b["models"])
    lines.append(_same_or("code", a["code"], b["code"], lambda c: f"{c.get('commit')} (clean: {c.get('clean')})"))
    lines += _plugin_code(a.get("plugins") or [], b.get("plugins") or [])
    data = _same_or("data", a["data"], b["data"], str)
    if a["data"] != b["data"] and a["params"].get("output_root") != b["params"].get("output_root"):
        data += (" (the manifests' sha256; a manifest records where its images lie, so the same images under "
                 "another output root or data.root give another hash)")
    lines.append(data)
    lines.append(_same_or("versions", a["versions"], b["versions"], lambda v: json.dumps(v, sort_keys=True)))
    lines.append(_same_or("devices", a["devices"], b["devices"], lambda v: json.dumps(v, sort_keys=True)))
    return lines


def machines(a: dict, b: dict) -> list[str]:
    """What differs in what decided the floats (dear.compute.reproducible.in_force of every job), named before the numbers."""
    ma, mb = _machine(a.get("compute") or []), _machine(b.get("compute") or [])
    if not ma or not mb:
        return ["- a run's record does not say which CPU kernels made it (made before the record kept them)"]
    lines = []
    if ma["vendor"] != mb["vendor"]:
        lines.append(_makers(ma, mb))
    if ma["cpu_flags"] != mb["cpu_flags"]:
        same_kernels = ma["kernels"] == mb["kernels"] and ma["reproducible"] == mb["reproducible"] == [True]
        lines.append(f"- **the runs were made on CPUs with different instruction sets** ({_list(ma['cpu_flags'])} → "
                     f"{_list(mb['cpu_flags'])}): "
                     + ("both capped their kernels at the same set (compute.reproducible), so this alone moves no number"
                        if same_kernels else "their kernels differ, so float rounding moves the numbers"))
    if ma["reproducible"] != mb["reproducible"]:
        lines.append(f"- **compute.reproducible**: {_list(ma['reproducible'])} → {_list(mb['reproducible'])}")
    if ma["kernels"] != mb["kernels"]:
        lines.append(f"- **kernels**: {_list(ma['kernels'])} → {_list(mb['kernels'])}")
    if ma["builds"] != mb["builds"]:
        lines.append(f"- **torch builds** (BLAS, oneDNN): {_list(ma['builds'])} → {_list(mb['builds'])}")
    if ma["cuda"] != mb["cuda"]:
        lines.append(f"- **GPU**: {_list(ma['cuda']) or 'none'} → {_list(mb['cuda']) or 'none'}")
    return lines or ["- the same: CPU maker, instruction sets, kernels, caps and torch builds"]


def _makers(ma: dict, mb: dict) -> str:
    """CPUs of other makers: what MKL could compute differently on each (dear.compute.reproducible).

    MKL picks its code by the CPU's maker except on its COMPATIBLE branch, one code for Intel and AMD alike
    (compute.reproducible since 2026-12-05); every other library the setting caps picks by instruction set alone.
    Even on COMPATIBLE, MKL's vector math (ATen's sqrt, exp, log, erf) gave other bytes on an Intel CPU than on an
    AMD one (docs/compute.md, measured 2026-12-07): the numbers of a model that uses them can move.
    """
    makers = f"{_list(ma['vendor'])} → {_list(mb['vendor'])}"
    branches = f"MKL's branch {_list(ma['mkl'])} → {_list(mb['mkl'])}"
    neutral = ma["mkl"] == mb["mkl"] == ["COMPATIBLE"] and ma["reproducible"] == mb["reproducible"] == [True]
    if neutral and ma["kernels"] == mb["kernels"]:
        return (f"- **CPU makers**: {makers}: both ran MKL's COMPATIBLE branch (compute.reproducible), one code "
                "on every maker for the matrix products and convolutions; MKL's vector math (sqrt, exp, log, erf) "
                "still differs between Intel and AMD CPUs, so the numbers of the methods that train through it "
                "(AdamW, GELU, softmax) may move by float rounding (docs/compute.md)")
    return (f"- **CPU makers**: {makers} ({branches}: outside its COMPATIBLE branch MKL picks its code by the "
            "CPU's maker, so the numbers may move)")


def _mkl(record: dict) -> str | None:
    """MKL's branch in a job's record: COMPATIBLE, or what the CPU's maker decides (AUTO, AVX2, OFF, ...).

    A record written before `mkl_branch` was kept says what was asked for (MKL_CBWR); only COMPATIBLE is taken
    on every maker as asked, any other branch on Intel CPUs only.
    """
    if "aten_capability" not in record:  # a stage without torch: no MKL
        return None
    branch = record.get("mkl_branch") or record.get("caps", {}).get("MKL_CBWR") or "OFF"
    return "COMPATIBLE" if branch.split(",")[0] == "COMPATIBLE" else branch


def _machine(records: list[dict]) -> dict[str, list[str]]:
    """Every job's compute record of one run, as sorted distinct texts per aspect (threads: the jobs' own)."""
    if not records:
        return {}
    aspects = {
        "reproducible": lambda r: r.get("reproducible"),
        "vendor": lambda r: r.get("cpu_vendor") or None,
        "cpu_flags": lambda r: " ".join(r.get("cpu_flags", [])),
        "kernels": lambda r: ", ".join([f"ATen {r['aten_capability']}",
                                        f"oneDNN {'on' if r.get('mkldnn_enabled') else 'off'}",
                                        *(f"OpenBLAS {name}" for name in r.get("openblas", [])),
                                        *(f"{k}={v}" for k, v in sorted(r.get("caps", {}).items())
                                          if not k.endswith("_NUM_THREADS"))]) if "aten_capability" in r else None,
        "mkl": _mkl,
        "builds": lambda r: "; ".join(f"{k}: {v}" for k, v in sorted(r.get("builds", {}).items())) or None,
        "cuda": lambda r: json.dumps(r["cuda"], sort_keys=True) if r.get("cuda") else None,
    }
    return {name: sorted({value for r in records if (value := get(r)) is not None}, key=str)
            for name, get in aspects.items()}


def _list(values: list) -> str:
    return "; ".join(str(v).lower() if isinstance(v, bool) else str(v) for v in values)


def write_comparable(report: Path, folder: Path) -> list[Path]:
    """A run's record.json (without its job times) and every eval row it scored (evals.parquet) into `folder`:
    what `dear compare` reads of a snapshot (docs/demo, `python -m dear.docs --snapshot`). Nothing without a record."""
    from dear.runtime.io import write_json, write_parquet
    from dear.scoring.results import EVAL_SCHEMA

    if not (report / "record.json").is_file():
        return []
    record = _record(report)
    rows = read_evals([_located(report, entry["file"]) for entry in record["evaluations"]])
    write_parquet(folder / SNAPSHOT_EVALS, pa.Table.from_pandas(rows, preserve_index=False), EVAL_SCHEMA)
    per_job = ("code", "versions", "devices", "compute")  # summed up in the record's own keys
    kept = {key: value for key, value in record.items() if key not in ("jobs", "rules")}
    kept["models"] = [{k: v for k, v in model.items() if k not in per_job} for model in record["models"]]
    kept["evaluations"] = [{k: v for k, v in entry.items() if k not in per_job} for entry in record["evaluations"]]
    write_json(folder / "record.json", kept)
    return [folder / SNAPSHOT_EVALS, folder / "record.json"]


def flatten(value, prefix: str = "") -> dict[str, object]:
    """{"train.recipes.coop.epochs": 30, ...}: nested dicts as dotted keys (lists stay values)."""
    if not isinstance(value, dict):
        return {prefix: value}
    found = {}
    for key, item in value.items():
        found.update(flatten(item, f"{prefix}.{key}" if prefix else str(key)))
    return found


def _show(value) -> str:
    return "absent" if value is None else json.dumps(value)


def _recipes(a: list[dict], b: list[dict]) -> list[str]:
    """Trained runs (method, dataset, classes, seed) whose recipe or run hash differ, with the recipe keys."""
    key = lambda m: (m["method"], m["dataset"], m["classes"], m.get("shots"), m["seed"])  # noqa: E731
    old, new = {key(m): m for m in a}, {key(m): m for m in b}
    both = sorted(set(old) & set(new), key=str)
    hashes = [k for k in both if old[k]["params_sha256"] != new[k]["params_sha256"]]
    keys = sorted({name for k in both for name in set(_values(old[k])) | set(_values(new[k]))
                   if _values(old[k]).get(name) != _values(new[k]).get(name)})
    lines = [f"- **trained runs**: {len(hashes)} of {len(both)} in both runs have another run hash"
             + (f" ({', '.join(sorted({k[0] for k in hashes}))})" if hashes else "")]
    if keys:
        lines.append("  - recipe keys that differ: " + ", ".join(f"`{name}`" for name in keys))
    only = sorted(set(old) ^ set(new), key=str)
    if only:
        lines.append(f"  - {len(only)} trained runs are in one run only")
    return lines


def _plugin_code(a: list[dict], b: list[dict]) -> list[str]:
    """Each plugin method whose code differs between the runs (its release, or the files its jobs counted: an
    edit of an installed plugin moves numbers as an edit of dear does), with the files that differ."""
    old, new = _plugin_codes(a), _plugin_codes(b)
    lines = []
    for method in sorted(set(old) | set(new)):
        (release_a, files_a, _), (release_b, files_b, state) = old.get(method, ("absent", {}, None)), \
            new.get(method, ("absent", {}, None))
        if (release_a, files_a) == (release_b, files_b):
            continue
        edited = [key for key in sorted(set(files_a) | set(files_b)) if files_a.get(key) != files_b.get(key)]
        release = release_b if release_a == release_b else f"{release_a} → {release_b}"
        lines.append(f"- **plugin code** of {method} ({release}): "
                     + (f"{', '.join(edited)} differ{'s' if len(edited) == 1 else ''}" if edited else "the same files")
                     + (f" (run B's files: {state})" if state else "") + "; a cause of what moved for this method")
    return lines or (["- **plugin code**: the same"] if old or new else [])


def _plugin_codes(records: list[dict]) -> dict[str, tuple[str, dict, str | None]]:
    """{method: (distribution and version, {file: fingerprint} its jobs counted, its state against RECORD)}."""
    found: dict[str, tuple[str, dict, str | None]] = {}
    for record in records:  # one per distinct code of a method; a run whose jobs saw two codes merges them
        _, files, _ = found.get(record["method"], ("", {}, None))
        found[record["method"]] = (f"{record['distribution']} {record['version']}",
                                   {**files, **(record.get("code_files") or {})}, record.get("installed"))
    return found


def _values(model: dict) -> dict[str, object]:
    """A trained run's recipe as {key: value} (a recorded recipe's values; an older model.pt's train section)."""
    recipe = model["recipe"]
    if isinstance(recipe, dict) and "settings" in recipe:
        return {key: setting["value"] for key, setting in recipe["settings"].items()}
    return flatten(recipe)


def _same_or(kind: str, a, b, show) -> str:
    if a == b:
        return f"- **{kind}**: the same"
    if isinstance(a, dict):
        keys = sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k))
        return f"- **{kind}**: differ for " + ", ".join(f"{k} ({_short(a.get(k))} → {_short(b.get(k))})" for k in keys)
    return f"- **{kind}**: {'; '.join(map(show, a))} → {'; '.join(map(show, b))}"


def _short(value) -> str:
    if isinstance(value, list):
        return ", ".join(str(v)[:12] for v in value) or "absent"
    return "absent" if value is None else str(value)[:12]


# --- numbers ---------------------------------------------------------------------------

def numbers(a: Path, b: Path, record_a: dict, record_b: dict, options: paired.Options) -> pd.DataFrame:
    """Every number of both runs' tables: B − A per method, paired by seed and test image, with a verdict."""
    evals_a = _output_rows(a, record_a)
    evals_b = _output_rows(b, record_b)
    return paired_numbers(evals_a, evals_b, options)


def paired_numbers(evals_a: pd.DataFrame, evals_b: pd.DataFrame, options: paired.Options) -> pd.DataFrame:
    """B − A of every number either run holds (paired.COLUMNS less baseline); verdict `missing`: one run only.

    A method of one run only gives its numbers as unpaired rows too (it was scored, its partner was not).
    """
    frames = []
    for method in sorted(set(evals_a["method"]) | set(evals_b["method"])):
        both = pd.concat([evals_a[evals_a["method"] == method].assign(method="A"),
                          evals_b[evals_b["method"] == method].assign(method="B")], ignore_index=True)
        try:
            moved = paired.differences(both, [("B", "A")], options)
        except DearError as err:
            raise DearError(f"{method}: the runs scored different test images, so no number pairs up "
                            f"({err})") from err
        frames.append(moved.assign(method=method).drop(columns="baseline"))
    return pd.concat(frames, ignore_index=True)


def _output_rows(folder: Path, record: dict) -> pd.DataFrame:
    if (folder / SNAPSHOT_EVALS).is_file():  # a snapshot (docs/demo): the eval rows kept in one file
        return read_evals([folder / SNAPSHOT_EVALS])
    paths = [_located(folder, entry["file"]) for entry in record["evaluations"]]
    frame = read_evals(paths)
    return frame


def _located(report: Path, path: str) -> Path:
    """A path as the report was given it: relative to where the engine ran, which holds the report folder."""
    if Path(path).is_absolute() or Path(path).exists():
        return Path(path)
    for base in report.resolve().parents:
        if (base / path).exists():
            return base / path
    raise DearError(f"{path}: eval table listed in {report / 'record.json'} not found; compare runs whose trees "
                    "are still there")


def _numbers_text(every: pd.DataFrame, decimals: int, confidence: float) -> list[str]:
    unpaired = every[every["verdict"] == UNPAIRED]
    moved = every[every["verdict"] != UNPAIRED]
    real = moved[moved["verdict"].str.startswith(("better", "worse"))]
    changed = moved[(moved["mean"].abs() > 0) & ~moved.index.isin(real.index)]
    pct = f"{confidence:.0%}"
    lines = [f"Δ = B − A per seed (the same seeds, the same test images), averaged; {pct} intervals over seeds and "
             f"over test images; *beyond noise* when both exclude 0 (as the report's paired differences). "
             f"{len(moved)} numbers compared: {len(real)} moved beyond noise, {len(changed)} moved within noise, "
             f"{len(moved) - len(real) - len(changed)} did not move; {len(unpaired)} could not be paired "
             "(in one run only).", ""]
    if moved.empty:
        lines += ["**Nothing could be paired**: no number of one run has a partner in the other (other datasets, "
                  "protocols, seeds or methods; the inputs above say which). There is nothing to compare.", ""]
    for title, rows in (("Moved beyond noise", real), ("Moved within noise", changed)):
        lines += [f"### {title}", ""]
        if rows.empty:
            lines += ["None.", ""]
            continue
        lines += ["| Method | Protocol | Dataset | Metric | Δ | seeds | images | verdict | n |",
                  "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
        for row in rows.itertuples(index=False):
            lines.append(f"| {row.method} | {_where(row)} | {row.dataset} | {row.metric} | {row.mean:+.{decimals}f} | "
                         f"[{row.seed_low:+.{decimals}f}, {row.seed_high:+.{decimals}f}] | "
                         f"[{row.image_low:+.{decimals}f}, {row.image_high:+.{decimals}f}] | {row.verdict} | "
                         f"{row.n_seeds} |")
        lines.append("")
    if not unpaired.empty:
        lines += ["### Could not be paired (one run only)", "", "| Method | Protocol | Dataset | Metric |",
                  "| --- | --- | --- | --- |"]
        lines += [f"| {row.method} | {_where(row)} | {row.dataset} | {row.metric} |"
                  for row in unpaired.itertuples(index=False)]
        lines.append("")
    return lines


def _where(row) -> str:
    return "base-to-novel" if row.protocol == "base_to_novel" else f"{row.protocol} from {row.source}"
