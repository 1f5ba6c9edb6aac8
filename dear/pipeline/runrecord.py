"""The record of a run: what made its numbers (code, params, recipes, data, environment) and what each job cost.

Nothing here is measured; everything is read from where it was recorded:
- each model.pt's metadata (`dear train`): method, dataset, seed, the run's
  params hash, its resolved recipe (or, for a model.pt that predates
  recorded recipes, the `train` section its provenance holds), and the
  provenance of the training process (code commit and clean tree, versions,
  devices with torch's peak GPU memory, input hashes);
- each eval.parquet's provenance (`dear evaluate`): the same for the
  evaluation, the sha256 of every data manifest scored and of each test
  image list, and fusion.novel;
- each job's wall time and peak memory: Snakemake's `benchmark:` files
  (`<log>.benchmark.tsv` beside each job's log). Under DVC, which records
  neither, `dear` writes the same file with Snakemake's own benchmark code
  when DVC runs the command (it sets DVC_STAGE), so both engines leave one
  record (`benchmarked`); a job run through the warm server adds its own
  processes' memory and CPU time beside it (`<log>.served.tsv`).
"""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path
from typing import Any, Iterator

import pandas as pd

from dear.errors import DearError
from dear.runtime.io import atomic_path, load_torch, read_provenance

BENCHMARK_SUFFIX = ".benchmark.tsv"
SERVED_SUFFIX = ".served.tsv"  # a job run through the warm server: its own processes' memory and CPU time
BENCHMARK_COLUMNS = {"s": "seconds", "max_rss": "max_rss_mb", "cpu_time": "cpu_seconds"}


def benchmark_path(log: Path) -> Path:
    """Where a job's benchmark lies: beside its log (logs/train/coop/dsA.log -> logs/train/coop/dsA.benchmark.tsv)."""
    return Path(log).with_name(Path(log).stem + BENCHMARK_SUFFIX)


def served_path(log: Path) -> Path:
    """Where a job run through the warm server records its own processes (logs/train/coop/dsA.served.tsv)."""
    return Path(log).with_name(Path(log).stem + SERVED_SUFFIX)


@contextlib.contextmanager
def benchmarked(log: Path | None, itself: bool = False) -> Iterator[None]:
    """Under DVC (DVC_STAGE set), record this command as Snakemake's `benchmark:` would, beside `log`.

    `itself`: record it whatever runs it: the rules Snakemake's output cache keeps (world, backbone) may
    have no `benchmark:` (a restored output has no time to report).

    Snakemake writes the file itself around its jobs; DVC records no time or
    memory, so the command records itself with the same code and format
    (snakemake.benchmark: wall time, the process tree's peak RSS, CPU time).
    Written after success only, as Snakemake does.

    Run through the warm server (dear/server/: DEAR_SERVED_BY set) under Snakemake, the job's processes are
    the server's children, not the `dear` command's that Snakemake measures: the job records its own tree
    beside Snakemake's file (`served_path`), and `read_benchmarks` takes its memory and CPU time from there.
    A job run otherwise removes that file, so it never outlives the run it describes.
    """
    if log is None:
        yield
        return
    recorded = benchmark_path(log) if "DVC_STAGE" in os.environ or itself else \
        served_path(log) if "DEAR_SERVED_BY" in os.environ else None
    if recorded != served_path(log):
        with contextlib.suppress(FileNotFoundError):
            served_path(log).unlink()
    if recorded is None:
        yield
        return
    from snakemake.benchmark import benchmarked as measure
    from snakemake.benchmark import write_benchmark_records

    with measure() as record:
        yield
    with atomic_path(recorded) as tmp:
        write_benchmark_records([record], str(tmp), extended_fmt=False)


def read_benchmarks(folder: Path | None) -> pd.DataFrame:
    """One row per job with a benchmark file under `folder`: job, rule, seconds, max_rss_mb, cpu_seconds, file.

    `job` is the file's path below `folder` without the suffix (train/coop/dsA);
    `rule` its first part. A repeated benchmark's lines are averaged (time)
    and maxed (memory). Missing values (a job faster than Snakemake's first
    sample) stay missing.
    """
    records = []
    for path in sorted(Path(folder).rglob(f"*{BENCHMARK_SUFFIX}")) if folder and Path(folder).is_dir() else []:
        table = _benchmark_table(path)
        job = str(path.relative_to(folder))[: -len(BENCHMARK_SUFFIX)]
        served = path.with_name(path.name[: -len(BENCHMARK_SUFFIX)] + SERVED_SUFFIX)
        own = _benchmark_table(served) if served.is_file() else table  # the job's processes, not its client's
        records.append({"job": job, "rule": job.split("/")[0], "seconds": float(table["s"].mean()),
                        "max_rss_mb": float(own["max_rss"].max()), "cpu_seconds": float(own["cpu_time"].mean()),
                        "file": str(path)})
    return pd.DataFrame(records, columns=["job", "rule", "seconds", "max_rss_mb", "cpu_seconds", "file"])


def _benchmark_table(path: Path) -> pd.DataFrame:
    try:
        table = pd.read_csv(path, sep="\t", na_values=["NA", "-"])
    except (OSError, ValueError) as err:
        raise DearError(f"{path}: not a readable benchmark file ({err}); rerun its job or remove the file")
    missing = sorted(set(BENCHMARK_COLUMNS) - set(table.columns))
    if missing or table.empty:
        raise DearError(f"{path}: not a Snakemake benchmark file (no columns {missing or list(BENCHMARK_COLUMNS)});"
                        " rerun its job or remove the file")
    return table


def read_model(path: Path) -> dict:
    """What a model.pt records about its training run (metadata only; the tensors are not looked at)."""
    try:
        payload = load_torch(path)
        meta = json.loads(payload["meta"])
    except DearError:
        raise
    except Exception as err:  # torch and json raise many types on a damaged file
        raise DearError(f"{path}: not a readable model.pt ({type(err).__name__}); rerun `dear train`") from err
    made_by = meta.get("provenance", {})
    method = meta.get("method")
    recipe = meta.get("recipe")
    return {"file": str(path), "method": method.get("name") if isinstance(method, dict) else method,
            "dataset": meta.get("dataset"), "classes": meta.get("classes"), "seed": meta.get("seed"),
            **({"shots": meta["shots"]} if meta.get("shots") is not None else {}),  # a few-shot run's K
            "steps": meta.get("steps"),  # optimizer steps taken (0: nothing trained; None: not recorded then)
            "params_sha256": meta.get("params_sha256"),
            "recipe": recipe if recipe is not None else {"train (recorded section)": made_by.get("params", {})
                                                         .get("train")},
            **_process(made_by)}


def read_evaluation(path: Path) -> dict:
    """What an eval.parquet's provenance records about its evaluation."""
    made_by = read_provenance(path)
    inputs = made_by.get("inputs_sha256", {})
    return {"file": str(path), "params_sha256": made_by.get("params_sha256"),
            "fusion_novel": made_by.get("params", {}).get("fusion", {}).get("novel"),
            "manifests": {key.split(":", 1)[1]: sha for key, sha in inputs.items() if key.startswith("manifest:")},
            "model_sha256": inputs.get("model"), "test_images": made_by.get("test_images_sha256", {}),
            **_process(made_by)}


def _process(made_by: dict) -> dict:
    plugin = made_by.get("job", {}).get("plugin")  # a method from an installed package: its distribution
    return {"code": made_by.get("code", {}), "versions": made_by.get("versions", {}),
            "devices": made_by.get("devices", {}), "compute": made_by.get("compute", {}),
            **({"plugin": plugin} if plugin else {})}


def build(models: list[Path], evals: list[Path], benchmarks: list[Path], params: dict, report: dict) -> dict:
    """The whole record (record.json): every job, every input that differs between runs, and the totals."""
    trained = [read_model(Path(p)) for p in sorted({str(p) for p in models})]
    evaluated = [read_evaluation(Path(p)) for p in sorted({str(p) for p in evals})]
    jobs = pd.concat([read_benchmarks(Path(folder)) for folder in sorted(set(benchmarks))] or [read_benchmarks(None)],
                     ignore_index=True)
    processes = trained + evaluated
    return {
        "params": params,
        "report": report,
        "code": _distinct([p["code"] for p in processes + [report]]),
        "versions": _distinct([p["versions"] for p in processes + [report]]),
        "plugins": _distinct([p.get("plugin") for p in processes]),  # methods from installed packages
        "devices": _distinct([_device_names(p["devices"]) for p in processes]),
        "compute": _distinct([p["compute"] for p in processes]),  # what decided the floats (dear.compute.reproducible)
        "peak_gpu_memory_mb": max([peak for p in processes if (peak := _gpu_peak(p["devices"])) is not None],
                                  default=None),
        "data": _manifests(evaluated),
        "models": trained,
        "evaluations": evaluated,
        "jobs": jobs.drop(columns="file").to_dict(orient="records"),
        "rules": _per_rule(jobs),
    }


def _distinct(values: list[Any]) -> list[Any]:
    """Each distinct value once, in a stable order (a run should hold one of each; more is what to look at)."""
    found = {json.dumps(value, sort_keys=True): value for value in values if value}
    return [found[key] for key in sorted(found)]


def _device_names(devices: dict) -> dict:
    return {"cpu": devices.get("cpu"), "cuda": sorted({d["name"] for d in devices.get("cuda", [])})}


def _gpu_peak(devices: dict) -> float | None:
    peaks = [d.get("peak_memory_mb") for d in devices.get("cuda", [])]
    return max(peaks) if peaks else None


def _manifests(evaluated: list[dict]) -> dict[str, list[str]]:
    """{dataset: [sha256, ...]}: more than one hash means the runs of this report read different data."""
    found: dict[str, set[str]] = {}
    for record in evaluated:
        for name, sha in record["manifests"].items():
            found.setdefault(name, set()).add(sha)
    return {name: sorted(shas) for name, shas in sorted(found.items())}


def _per_rule(jobs: pd.DataFrame) -> list[dict]:
    if jobs.empty:
        return []
    grouped = jobs.groupby("rule", sort=True).agg(jobs=("job", "count"), seconds=("seconds", "sum"),
                                                   max_rss_mb=("max_rss_mb", "max"))
    return grouped.reset_index().to_dict(orient="records")


# --- the record as results.md shows it -------------------------------------------------

def markdown(record: dict) -> list[str]:
    """The record in a few tables: code, environment, data, recipes, and each stage's time and memory."""
    lines = ["## Record of this run", "",
             "What made the numbers above and what they cost, read from the model files, the eval tables' provenance "
             "and the engines' benchmark files; everything, job by job: record.json. `dear compare RUN_A RUN_B` "
             "says what moved between two runs and which of these inputs differ.", ""]
    code = [f"{c.get('commit')} ({_clean(c.get('clean'))})" for c in record["code"]]
    lines += [f"- **Code**: {'; '.join(code) or 'not recorded'}"
              + (" — more than one commit made this report" if len(code) > 1 else ""),
              f"- **Params**: sha256 {record['report'].get('params_sha256', '?')[:12]} of this report's config; "
              f"{len(record['models'])} trained models with {len({m['params_sha256'] for m in record['models']})} "
              "distinct run hashes (each method, dataset and seed has its own)"]
    for versions in record["versions"]:
        lines.append("- **Versions**: " + ", ".join(f"{k} {v}" for k, v in sorted(versions.items())))
    for plugin in record.get("plugins", []):
        code = (f"; its code sha256 {plugin['code_sha256'][:12]} over {len(plugin['code_files'])} files, "
                f"{plugin['installed']}" + (f" ({', '.join(plugin['edited'])})" if plugin.get("edited") else "")
                if "code_sha256" in plugin else "")
        lines.append(f"- **Plugin method** {plugin['method']}: {plugin['distribution']} {plugin['version']} "
                     f"(entry point {plugin['entry_point']}, method contract {plugin['contract']}){code}")
    for devices in record["devices"]:
        lines.append(f"- **Devices**: CPU {devices.get('cpu')}; CUDA {', '.join(devices['cuda']) or 'none'}")
    peak = record.get("peak_gpu_memory_mb")
    lines.append(f"- **Peak GPU memory** (torch's record, any training or evaluation process): "
                 f"{'none: no CUDA device was used' if peak is None else f'{peak:.0f} MB'}")
    lines += [""]
    if record["data"]:
        lines += ["| Dataset | manifest sha256 |", "| --- | --- |"]
        lines += [f"| {name} | {', '.join(sha[:12] for sha in shas)}{' ⚠ differs between runs' if len(shas) > 1 else ''} |"
                  for name, shas in record["data"].items()] + [""]
    lines += _recipes(record["models"])
    if record["rules"]:
        total = sum(rule["seconds"] for rule in record["rules"])
        lines += ["| Stage | Jobs | Wall time | Peak memory (RSS) |", "| --- | --- | --- | --- |"]
        lines += [f"| {rule['rule']} | {rule['jobs']} | {_duration(rule['seconds'])} | {_megabytes(rule['max_rss_mb'])} |"
                  for rule in record["rules"]]
        lines += [f"| **all** | {sum(r['jobs'] for r in record['rules'])} | {_duration(total)} | "
                  f"{_megabytes(max(r['max_rss_mb'] for r in record['rules']))} |", "",
                  "Wall time: the sum over a stage's jobs of each job's `s` in its benchmark file (jobs that ran in "
                  "parallel overlap); memory: the largest `max_rss` (the job's process tree).", ""]
    else:
        lines += ["No benchmark files were given (--benchmarks): no job's time or memory is recorded.", ""]
    return lines


RECIPE_COLUMNS = ("optimizer", "lr", "batch_size", "epochs")


def _recipes(models: list[dict]) -> list[str]:
    """Each trained run's resolved recipe (its seeds in one row), and where it departs from the authors'."""
    rows = {}
    for model in models:
        settings = model["recipe"].get("settings") if isinstance(model["recipe"], dict) else None
        if settings is None:
            continue  # a model.pt from before recipes were recorded: record.json keeps its train section
        values = [str(settings.get(key, {}).get("value", "—")) for key in RECIPE_COLUMNS]
        differs = [f"{key} {s['value']} (authors {s['authors']})" for key, s in sorted(settings.items()) if "authors" in s]
        protocol = model["recipe"].get("protocol", model["classes"])
        shots = model["recipe"].get("shots")  # few-shot runs: one row per shot count K
        rows[(model["method"], model["dataset"], protocol if shots is None else f"{protocol} {shots}")] = \
            values + ["; ".join(differs) or "none"]
    if not rows:
        return []
    lines = ["| Method | Dataset | Protocol | " + " | ".join(RECIPE_COLUMNS) + " | differs from the authors |",
             "| --- " * (4 + len(RECIPE_COLUMNS)) + "|"]
    lines += [f"| {m} | {d} | {p} | " + " | ".join(cells) + " |" for (m, d, p), cells in sorted(rows.items())]
    return lines + ["", "The resolved recipe of every trained run as its model.pt records it (each key's value and "
                    "source: record.json).", ""]


def _clean(clean: bool | None) -> str:
    return "clean tree" if clean else "uncommitted changes in the code" if clean is False else "tree state unknown"


def _duration(seconds: float) -> str:
    if seconds != seconds:
        return "—"
    minutes, rest = divmod(round(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes:02d} min" if hours else f"{minutes} min {rest:02d} s" if minutes else f"{rest} s"


def _megabytes(value: float) -> str:
    return "—" if value != value else f"{value:,.0f} MB"
