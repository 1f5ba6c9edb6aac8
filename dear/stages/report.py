"""`dear report`: every eval table aggregated into the paper's tables, pictures and DVC metrics.

Reads the eval.parquet files given (schema in `dear.scoring.results`), the train logs
and the head-role heatmaps, or the runs each `results/<method>/runs.json` of
`dear collect` lists (each file's sha256 checked), checks all of them, computes everything in
memory, and only then writes the output folder, which replaces the old one
as a whole (`dear.runtime.io.output_folder`):

    results.md, results.csv        tables per protocol (dear.report.tables / markdown), pictures linked
    differences.csv                paired differences (report.compare against each method, and each `+roles` variant
                                   against its plain method) with intervals and verdicts
    streams.csv                    each logit stream's own accuracy per dataset and method
    published.csv                  published numbers beside ours (rows only for a run in their setting)
    inference.csv                  unseen classes under both inferences (fusion.novel cls / fused), every dataset
    metrics.json                   averages per protocol and method, for `dvc metrics/exp show`
    provenance.json                params, input hashes and versions behind the report
    record.json                    the record of the run (dear.pipeline.runrecord): code, params, recipes, data, environment,
                                   each job's time and memory
    base_novel.png, loss_curves.png, roles/<dataset>.png
    roles_change.png               what the roles change: each variant minus its plain method (with a variant only)
    few_shot.png, plots/few_shot.csv   accuracy against shots (only when the eval tables hold few-shot runs)
    plots/base_novel.csv, plots/transfer.csv, plots/loss.csv   data of `dvc plots`
    paper/<protocol>.csv|md|tex    the papers' table layouts, best per column in bold (dear.report.paper)
"""

from __future__ import annotations

import dataclasses
import logging
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

import pandas as pd

from dear.errors import DearError
from dear.pipeline import runrecord
from dear.runtime.io import (output_folder, provenance, read_json, read_parquet, read_provenance, sha256_file, sha256_json,
                     write_bytes, write_json)
from dear.methods import ROLES
from dear.methods.recipe import FEWEST_STEPS
from dear.config.params import Params
from dear.model import ablation
from dear.report import markdown, paired, paper, plots, reference, tables
from dear.report.train_logs import read_train_logs
from dear.scoring.results import read_evals, seed_accuracy, shots_of

log = logging.getLogger("dear.report")
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
METRIC_DIGITS = 4


@dataclass(frozen=True)
class Inputs:
    evals: list[Path]                                       # eval.parquet of every run to report
    train_logs: list[Path] = field(default_factory=list)    # train_log.parquet (runs/<method>/<ds>/train/seed<S>/)
    roles: list[Path] = field(default_factory=list)         # roles/<dataset>/heatmap.png (ablation.parquet beside it)
    models: list[Path] = field(default_factory=list)        # model.pt of every run: the record's recipes and hashes
    benchmarks: list[Path] = field(default_factory=list)    # folders of the jobs' *.benchmark.tsv (logs/)
    runs: list[Path] = field(default_factory=list)          # results/<method>/runs.json of `dear collect`: their files


@dataclass(frozen=True)
class Outputs:
    folder: Path  # gets the files listed in the module docstring
    FILES: ClassVar[tuple[str, ...]] = ("results.md", "*.csv", "metrics.json", "provenance.json", "record.json", "*.png",
                                        "plots", "roles", "paper")


def run(params: Params, inputs: Inputs, outputs: Outputs) -> None:
    inputs = with_collected_runs(inputs)
    conventions = tables.Conventions(methods=params.report_methods, seeds=list(params.data.seeds),
                                     ddof=params.report.std_ddof, std_warning=params.report.std_warning,
                                     confidence=params.report.confidence)
    every_stream = read_evals(inputs.evals, streams=True)
    evals = every_stream[every_stream["stream"] == "output"]
    logs = read_train_logs(inputs.train_logs)
    heatmaps = read_heatmaps(inputs.roles)
    ablations = read_ablations(inputs.roles)
    record = provenance({"report": params.report, "seeds": params.data.seeds, "model": params.model,
                         "data": params.data}, inputs=_input_paths(inputs))
    run_record = runrecord.build(inputs.models, inputs.evals, inputs.benchmarks, params.model_dump(mode="json"),
                                 {"params_sha256": sha256_json(params.model_dump(mode="json")),
                                  **{key: record[key] for key in ("code", "versions", "devices")}})
    results = tables.aggregate(seed_accuracy(evals), conventions)
    pairs = comparisons(params.report_methods, params.report_compare, evals)
    differences = paired.differences(evals, pairs, paired.Options(
        confidence=params.report.confidence, resamples=params.report.bootstrap_resamples, ddof=params.report.std_ddof))
    role_changes = paired.differences(evals, role_pairs(conventions.methods, evals), paired.Options(
        confidence=params.report.confidence, resamples=params.report.bootstrap_resamples, ddof=params.report.std_ddof))
    streams = tables.stream_accuracy(seed_accuracy(every_stream), conventions)
    inferences = tables.both_inferences(every_stream, conventions)
    problems = reference.setting_problems(params)
    published = reference.beside(results) if params.report.reference and not problems \
        else pd.DataFrame(columns=reference.COLUMNS)  # the file is always there; rows only in the published setting

    page = markdown.Page(decimals=params.report.decimals, methods=conventions.methods, seeds=conventions.seeds,
                         std_warning=conventions.std_warning, n_evals=len(set(inputs.evals)),
                         confidence=params.report.confidence, resamples=params.report.bootstrap_resamples,
                         reference=params.report.reference, heatmaps=[f"roles/{name}.png" for name in heatmaps],
                         has_loss=True, ablations={name: ablation.markdown(rows) for name, rows in ablations.items()},
                         setting_problems=problems, inference=_inference(run_record),
                         notes=notes(params, inputs.train_logs) + short_runs(run_record["models"]),
                         limits=limits(evals))
    text = markdown.render(results, page, differences, streams, published, inferences, role_changes)
    files = {
        "results.md": "\n".join([text, *runrecord.markdown(run_record)]).encode(),
        "results.csv": _csv(results),
        "differences.csv": _csv(pd.concat([differences, role_changes]).drop_duplicates(
            ["protocol", "source", "dataset", "method", "baseline", "metric"])),  # a variant's pair may be both
        "streams.csv": _csv(streams),
        "published.csv": _csv(published),
        "inference.csv": _csv(inferences),
        "base_novel.png": plots.base_novel_png(results, conventions.methods, params.report.confidence,
                                               params.report.dpi),
        "loss_curves.png": plots.loss_png(logs, conventions.methods, params.report.loss_smoothing,
                                          params.report.dpi),
        "plots/base_novel.csv": _csv(base_novel_data(results)),
        "plots/transfer.csv": _csv(transfer_data(results)),
        "plots/loss.csv": _csv(logs),
        **few_shot_files(results, conventions.methods, params.report.confidence, params.report.dpi),
        **({"roles_change.png": plots.role_changes_png(role_changes, conventions.methods, params.report.confidence,
                                                       params.report.dpi)} if not role_changes.empty else {}),
        **paper.tables(results, conventions.methods, params.report.decimals, limits(evals)),
        **{f"roles/{name}.png": data for name, data in heatmaps.items()},
    }
    with output_folder(outputs.folder, Outputs.FILES) as folder:  # also drops pictures of datasets no longer given
        for name, data in files.items():
            write_bytes(folder / name, data)
        (folder / "paper").mkdir(exist_ok=True)  # declared by both engines: there even when no layout applies
        write_json(folder / "metrics.json", metrics(results, pd.concat([differences, role_changes])))
        write_json(folder / "provenance.json", {"provenance": record})
        write_json(folder / "record.json", run_record)
    _log_summary(results, outputs.folder)


def limits(evals: pd.DataFrame) -> dict[str, str]:
    """{method: why it has no number for some class lists} of the reported methods that say so (the registry's
    `scores`: a linear probe has no classifier for novel classes or another dataset's)."""
    from dear.errors import DearError
    from dear.methods import entry

    def scores(name: str) -> str:
        try:
            return entry(name).scores
        except DearError:  # a plugin no longer installed: its tables still report, without the sentence
            return ""

    return {name: scores(name) for name in sorted(set(evals["method"])) if scores(name)}


def few_shot_files(results: pd.DataFrame, methods: list[str], confidence: float, dpi: int) -> dict[str, bytes]:
    """few_shot.png and plots/few_shot.csv, when the eval tables hold a few-shot run (none otherwise)."""
    data = few_shot_data(results)
    if data.empty:
        return {}
    return {"few_shot.png": plots.few_shot_png(results, methods, confidence, dpi), "plots/few_shot.csv": _csv(data)}


def few_shot_data(results: pd.DataFrame) -> pd.DataFrame:
    """plots/few_shot.csv: method, dataset (or Average), shots, accuracy and its interval over seeds, seeds, run."""
    rows = results[results["protocol"].map(shots_of).notna()]
    data = pd.DataFrame({"method": rows["method"], "dataset": rows["dataset"], "shots": rows["protocol"].map(shots_of),
                         "accuracy": rows["mean"], "ci_low": rows["ci_low"], "ci_high": rows["ci_high"],
                         "n_seeds": rows["n_seeds"]})
    data["run"] = data["method"] + " · " + data["dataset"]
    return data.sort_values(["dataset", "method", "shots"], kind="stable").reset_index(drop=True)


def _inference(run_record: dict) -> str:
    """fusion.novel as the eval tables record it ('cls', 'fused', or both named when they disagree)."""
    found = sorted({str(entry["fusion_novel"] or "not recorded") for entry in run_record["evaluations"]})
    return " and ".join(found) or "not recorded"


def role_pairs(methods: list[str], evals: pd.DataFrame) -> list[tuple[str, str]]:
    """(variant, its plain method) of every `+roles` variant whose plain method is reported too, in row order."""
    from dear.methods import entry

    shown = tables.method_order(methods, evals["method"])
    return [(name, entry(name).plain) for name in shown if name.endswith(ROLES) and entry(name).plain in shown]


def comparisons(methods: list[str], compare: str, evals: pd.DataFrame) -> list[tuple[str, str]]:
    """(compare, other) for every other method, listed or found, in the tables' row order (`methods`, then the
    eval tables' others: Params.report_methods, Params.report_compare)."""
    return [(compare, other) for other in tables.method_order(methods, evals["method"]) if other != compare]
SMOKE_ARCHS = ("dear-world-tiny",)  # the smoke study's backbone (configs/smoke.yaml): a test-sized model


def notes(params: Params, train_logs: list[Path]) -> list[str]:
    """What the page says about the run before its numbers: a smoke run's numbers mean nothing; the shots used."""
    found = []
    if params.model.arch in SMOKE_ARCHS:
        found.append(f"**These numbers mean nothing.** This run used `{params.model.arch}`, the smoke study's "
                     f"test-sized backbone ({params.backbone.steps} pretraining steps, {params.world.n_objects} "
                     "objects): it shows that every stage of every protocol runs, not how the methods compare. "
                     "`make demo` runs the demo study.")
    used = [read_provenance(path).get("shots_per_class") for path in train_logs]
    used = [shots for shots in used if shots]
    if used:
        fewest, most = min(low for low, _ in used), max(high for _, high in used)
        shots = f"{fewest}" if fewest == most else f"{fewest}-{most}"
        asked = params.data.shots
        found.append(f"Training shots per class: {shots} (data.shots: {asked})" + (
            "; fewer where a dataset has fewer training images of a class, so this is not a "
            f"{asked}-shot study." if fewest < asked else "."))
    return found


def short_runs(models: list[dict]) -> list[str]:
    """The note on runs that took fewer optimizer steps than any baseline's authors train a base-to-novel run with
    (`FEWEST_STEPS`): such a run may end where it began (issue 39: CoOp at 10 steps equalled zero-shot)."""
    runs: dict[tuple, list] = {}
    for model in models:
        if model.get("steps") and model["steps"] < FEWEST_STEPS:  # 0: nothing trained (zero-shot, a fitted probe)
            protocol = (model.get("recipe") or {}).get("protocol", model.get("classes"))
            key = (model["method"], model["dataset"], str(protocol).replace("_", "-"), model.get("shots"))
            runs.setdefault(key, []).append((model["seed"], model["steps"]))
    if not runs:
        return []
    shown = "; ".join(
        f"{method} on {dataset} ({protocol}{'' if shots is None else f', {shots} shots'}): "
        + ", ".join(f"{steps} steps (seed {seed})" for seed, steps in sorted(found, key=lambda item: str(item[0])))
        for (method, dataset, protocol, shots), found in sorted(runs.items(), key=str))
    keys = ", ".join(f"`train.recipes.{name}.epochs`" for name in sorted({_recipe_of(method) for method, *_ in runs}))
    return [f"**Short training.** These runs took fewer than {FEWEST_STEPS} optimizer steps, the shortest "
            f"base-to-novel run of the baselines' authors, and may have learned little: {shown}. Raise their epochs "
            f"({keys}) or `min_steps` (docs/your-data.md#training-lengths)."]


def _recipe_of(method: str) -> str:
    """The recipe a method's runs read under train.recipes (dear_nomask: dear's); the method's name if unknown."""
    from dear.methods import entry

    try:
        return entry(method).recipe
    except DearError:
        return method


def read_heatmaps(paths: list[Path]) -> dict[str, bytes]:
    """{dataset: PNG bytes} from roles/<dataset>/heatmap.png, checked before anything is written."""
    found: dict[str, bytes] = {}
    for path in sorted({Path(p) for p in paths}):
        if not path.is_file():
            raise DearError(f"{path}: heatmap not found; run `dear profile` for this dataset or leave it out of --roles")
        data = path.read_bytes()
        if not data.startswith(PNG_SIGNATURE):
            raise DearError(f"{path}: not a PNG file; rerun `dear profile` for this dataset")
        name = path.parent.name
        if name in found:
            raise DearError(f"{path}: a second heatmap for dataset {name!r}; pass one roles/<dataset>/heatmap.png each")
        found[name] = data
    return found


def read_ablations(heatmaps: list[Path]) -> dict[str, list[dict]]:
    """{dataset: rows} of the role validations written beside the heatmaps (roles/<ds>/ablation.parquet)."""
    found = {}
    for heatmap in sorted({Path(p) for p in heatmaps}):
        path = heatmap.parent / "ablation.parquet"
        if path.is_file():
            rows = read_parquet(path, ablation.ABLATION_SCHEMA).to_pylist()
            if rows:
                found[heatmap.parent.name] = rows
    return found


def metrics(results: pd.DataFrame, differences: pd.DataFrame | None = None) -> dict:
    """Averages per protocol and method, nested for `dvc metrics show` / `dvc exp show`.

    base_to_novel.<method>.{base, novel, hm, seeds}: the Average row;
    cross_dataset|domain_generalization.<method>.<source>.{source, average, seeds};
    few_shot.<method>.shots<K>.{average, seeds}: the few-shot Average over datasets (only with few-shot runs);
    differences.<method>_minus_<baseline>.{base, novel, hm}: the Average's paired differences
    (and few_shot_<K>: the few-shot Average's).
    Missing numbers are null, never 0.
    """
    out: dict = {}
    if differences is not None:
        average = differences[(differences["dataset"] == tables.AVERAGE) & (differences["protocol"] == "base_to_novel")]
        for row in average.itertuples(index=False):
            out.setdefault("differences", {}).setdefault(f"{row.method}_minus_{row.baseline}", {})[row.metric] = \
                _rounded(row.mean)
        few = differences[(differences["dataset"] == tables.AVERAGE) & differences["protocol"].map(shots_of).notna()]
        for row in few.itertuples(index=False):
            out.setdefault("differences", {}).setdefault(f"{row.method}_minus_{row.baseline}", {})[row.protocol] = \
                _rounded(row.mean)
    averages = results[results["row"] == "average"]
    for row in averages[averages["protocol"] == "base_to_novel"].itertuples(index=False):
        entry = out.setdefault("base_to_novel", {}).setdefault(row.method, {})
        entry[row.metric] = _rounded(row.mean)
        entry["seeds"] = min(entry.get("seeds", row.n_seeds), row.n_seeds)
    for row in averages[averages["protocol"].map(shots_of).notna()].itertuples(index=False):
        out.setdefault("few_shot", {}).setdefault(row.method, {})[f"shots{shots_of(row.protocol)}"] = {
            "average": _rounded(row.mean), "seeds": int(row.n_seeds)}
    for protocol in ("cross_dataset", "domain_generalization"):
        for row in averages[averages["protocol"] == protocol].itertuples(index=False):
            own = results[(results["protocol"] == protocol) & (results["source"] == row.source)
                          & (results["method"] == row.method) & (results["dataset"] == row.source)]
            out.setdefault(protocol, {}).setdefault(row.method, {})[row.source] = {
                "source": _rounded(own["mean"].iloc[0]) if len(own) else None,
                "average": _rounded(row.mean),
                "seeds": int(row.n_seeds),
            }
    return out


def base_novel_data(results: pd.DataFrame) -> pd.DataFrame:
    """plots/base_novel.csv: method, dataset, base, novel, hm, run (one row per dataset and method)."""
    rows = results[results["protocol"] == "base_to_novel"]
    wide = rows.pivot_table(index=["dataset", "method"], columns="metric", values="mean", sort=False, dropna=False)
    wide = wide.reindex(columns=list(tables.B2N_METRICS)).reset_index()
    wide["run"] = wide["method"] + " · " + wide["dataset"]
    return wide[["method", "dataset", "base", "novel", "hm", "run"]]


def transfer_data(results: pd.DataFrame) -> pd.DataFrame:
    """plots/transfer.csv: protocol, method, source, target, accuracy, run."""
    rows = results[results["protocol"].isin(["cross_dataset", "domain_generalization"])]
    data = pd.DataFrame({"protocol": rows["protocol"], "method": rows["method"], "source": rows["source"],
                         "target": rows["dataset"], "accuracy": rows["mean"]})
    data["run"] = data["method"] + " · " + data["source"] + " → " + data["target"]
    return data.reset_index(drop=True)


def _csv(frame: pd.DataFrame) -> bytes:
    return frame.to_csv(index=False, float_format="%.6f", lineterminator="\n").encode()


def _rounded(value: float) -> float | None:
    return None if value is None or math.isnan(value) else round(float(value), METRIC_DIGITS)


def with_collected_runs(inputs: Inputs) -> Inputs:
    """`inputs` with the eval tables and models of every run the --runs files list, and the train logs of the
    base-to-novel ones (the loss curves), each file checked against the sha256 `dear collect` recorded (a file
    changed since then is refused: collect again)."""
    found = {"eval": list(inputs.evals), "model": list(inputs.models), "train_log": list(inputs.train_logs)}
    for listing in inputs.runs:
        for run in read_json(listing).get("runs", []):
            for kind, paths in found.items():
                if run.get(kind) is None or (kind == "train_log" and run.get("protocol") != "base_to_novel"):
                    continue
                if not Path(run[kind]).is_file() or sha256_file(run[kind]) != run["sha256"][kind]:
                    what = "changed" if Path(run[kind]).is_file() else "gone"
                    raise DearError(f"{run[kind]}: {what} since {listing} listed it; rerun `dear collect` "
                                    f"for {run['job']}'s method")
                paths.append(Path(run[kind]))
    return dataclasses.replace(inputs, evals=found["eval"], models=found["model"], train_logs=found["train_log"])


def _input_paths(inputs: Inputs) -> dict[str, Path]:
    named = {}
    for kind, paths in (("eval", inputs.evals), ("train_log", inputs.train_logs), ("roles", inputs.roles),
                        ("model", inputs.models)):
        named.update({f"{kind}:{path}": Path(path) for path in sorted({str(p) for p in paths})})
    return named


def _log_summary(results: pd.DataFrame, folder: Path) -> None:
    for row in results[results["std_warning"]].itertuples(index=False):
        log.warning("seeds disagree: %s %s %s %s std %.2f points over %d seeds",
                    row.protocol, row.dataset, row.method, row.metric, row.std, row.n_seeds)
    averages = results[(results["row"] == "average") & (results["metric"].isin(["hm", "accuracy"]))]
    for row in averages.itertuples(index=False):
        shown = "missing" if math.isnan(row.mean) else f"{row.mean:.2f}"
        where = row.protocol if row.protocol == "base_to_novel" else f"few-shot with {shots_of(row.protocol)} shots" \
            if shots_of(row.protocol) is not None else f"{row.protocol} from {row.source}"
        log.info("%s %s average %s: %s (n=%d)", where, row.method, row.metric, shown, row.n_seeds)
    log.info("report written to %s (results.md, results.csv, metrics.json, pictures)", folder)
