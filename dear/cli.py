"""The `dear` command line: one thin command per stage.

Each command only parses its arguments, loads `params.yaml` (with any
`--set KEY=VALUE` on top) and calls the stage's `run(params, inputs, outputs)`.
A `DearError` (bad input) prints one line and exits 1; `--debug` shows the
traceback instead. Commands are defined in pipeline order, which `--help` keeps.
"""

from __future__ import annotations

import contextlib
import fnmatch
import gc
import json
import importlib
import logging
import os
import sys
import time
from pathlib import Path
from typing import List, Optional

import click
import typer
import typer.core

from dear.compute import reproducible  # before the imports that load numpy: OpenBLAS reads its cap when it loads

if __name__ == "__main__" or Path(sys.argv[0]).name == "dear":  # the command, not an import (tests, the API)
    reproducible.early(sys.argv[1:])

from dear.runtime import status, stops, supervise  # noqa: E402
from dear.compute import cpus  # noqa: E402
from dear.config.check import check_file, stage_problems  # noqa: E402
from dear.config.check import warnings as check_warnings  # noqa: E402
from dear.errors import DearError  # noqa: E402
from dear.methods import names as method_names  # noqa: E402
from dear.config.params import DEFAULT_PATH, load_params, parse_overrides  # noqa: E402
from dear.config.params import use as use_params  # noqa: E402

app = typer.Typer(
    name="dear",
    help="DeAR pipeline: each stage of the study as one command (docs/stages.md).",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,  # click's plain help: typer 0.29's panels show every flag as `--debug <bool>`
)

_state = {"debug": False, "threads": None, "supervise": False}

ParamsOption = typer.Option(DEFAULT_PATH, "--params", help="parameters file (one section per stage)")
LogOption = typer.Option(None, "--log", help="also write this stage's log to this file")
SetOption = typer.Option(
    None, "--set", metavar="KEY=VALUE",
    help="change one parameter for this run (repeatable; dotted keys, YAML values: --set data.shots=4); "
         "checked like the params file and recorded in the outputs' provenance")
SEED = "{seed}"  # in a path option: replaced by each seed of the job
MethodOption = typer.Option(
    None, "--method", help="the method the model was trained with (the engines pass it: the job's code is that "
                           "method's module; another model's method is an error); default: the model's")
SeedOption = typer.Option(
    None, "--seed", help=f"run seed; repeat for several. Paths holding {SEED} are run once per seed "
                         f"(default: every data.seeds when a path holds {SEED})")


def _print_version(value: bool) -> None:
    if value:
        from importlib.metadata import version

        typer.echo(f"dear {version('dear')}")
        raise typer.Exit()


@app.callback()
def _main(
    debug: bool = typer.Option(False, "--debug", help="show tracebacks for errors"),
    threads: Optional[int] = typer.Option(
        None, "--threads", min=1, metavar="N",
        help="CPUs the stage may use: torch threads plus image-loading processes. Default: OMP_NUM_THREADS when set "
             "(Snakemake sets it to each rule's threads), else what the config asks for: 1 + compute.workers for "
             "profile, train, fuse and evaluate; data.workers for prepare; backbone.threads for backbone; 1 for the "
             "rest (docs/compute.md)"),
    version: bool = typer.Option(False, "--version", callback=_print_version, is_eager=True,
                                 help="print the version and exit"),
) -> None:
    _state["debug"] = debug
    _state["threads"] = threads


def _run_stage(name: str, params: Path, sets: Optional[List[str]], log: Optional[Path], inputs: dict, outputs: dict,
               seeds: Optional[List[int]] = None) -> None:
    """Load params (and --set), then run `dear.stages.<name>.run(params, Inputs(**inputs), Outputs(**outputs))`.

    With {seed} in its paths, the stage runs once per seed in this one process:
    a job of several seeds pays the imports (~5 s of torch, torchvision and
    open_clip on 2 cores) once. The params file is validated before the stage's
    (heavy) imports, every output location of every seed is checked before the
    first seed's work starts (a read-only folder is found in seconds, not after
    a training run), and a `DearError` anywhere becomes one line on stderr and
    exit code 1. However the stage stops, its last line says why and where
    (`dear.runtime.stops`); run as the `dear` command, a parent process watches it and
    writes that line when it is killed outright (`dear.runtime.supervise`).
    """
    from dear.runtime import io  # pyarrow: not for --help and --version

    os.environ["HF_HUB_OFFLINE"] = "1"  # stages never try the network (`dear fetch-weights` does, on purpose)
    logging_to_file = False
    try:
        _check_log_outside(log, outputs.get("folder"))
        _configure_logging(log)
        logging_to_file = log is not None
        if _state.get("supervise"):
            supervise.supervise(lambda line: _print_errors(DearError(line), log))
        stops.stop_on_signals()
        status.update(stage=name)
        use_params(params)  # messages name the file the user passed, not params.yaml
        loaded = load_params(params, sets or ())
        reproducible.apply(loaded.compute.reproducible)  # before torch loads: the libraries read the caps once
        io.record_overrides(parse_overrides(sets or ()))
        stage_problems(loaded, name, str(params))  # every problem of this stage's params, before torch loads
        job = job_record(name, loaded, inputs)
        io.record_job(job)
        runs = seed_runs(inputs, outputs, seeds, loaded.data.seeds)
        stage = _import_stage(name)
        reproducible.configure_torch(loaded.compute.reproducible)
        cpus.apply(cpus.budget(loaded, name, _state.get("threads")), name)
        from dear.runtime.io import check_outputs

        from dear.pipeline.runrecord import benchmarked

        for _, _, seed_outputs in runs:  # every seed's outputs, before the first seed's work
            check_outputs(stage.Outputs(**seed_outputs))
        from dear.pipeline.jobs import CACHED

        with benchmarked(log, itself=name in CACHED):  # under DVC: the job's time and memory, as Snakemake's benchmark: records them
            reused = _restored(name, job, inputs, outputs, stage)  # under DVC: the machine's world and backbone
            for index, (seed, seed_inputs, seed_outputs) in enumerate([] if reused else runs, 1):
                if len(runs) > 1:
                    logging.getLogger("dear").info("%s: seed %s (%d of %d)", name, seed, index, len(runs))
                status.update(seed=None if seed is None else f"{seed}" + (f" ({index} of {len(runs)})" if len(runs) > 1 else ""),
                              step=None, checkpoint=None, checkpoint_file=None)
                stage.run(loaded, stage.Inputs(**seed_inputs), stage.Outputs(**seed_outputs))
            _write_digests(name, outputs)
            if reused is False:
                from dear.pipeline import machine_cache

                machine_cache.store(name, machine_cache.wanted(name, job, inputs), Path(outputs["folder"]))
    except DearError as err:
        if _state["debug"]:
            raise
        _print_errors(err, log if logging_to_file else None)
        raise typer.Exit(code=1)
    except (KeyboardInterrupt, stops.Stopped) as stop:
        _print_errors(DearError(stops.interrupted(stop)), log if logging_to_file else None)
        raise typer.Exit(code=stops.exit_code(stop))
    except Exception as err:
        if _state["debug"]:
            raise
        if not stops.out_of_memory(err):
            logging.getLogger("dear").exception("%s stopped on an unexpected error; the traceback:", name)
        _print_errors(DearError(stops.failed(err)), log if logging_to_file else None)
        raise typer.Exit(code=1)
    finally:
        io.record_overrides({})  # a later command in this process (tests) starts clean
        io.record_job({})
        use_params(DEFAULT_PATH)
        cpus.release()
        reproducible.release()


def _restored(name: str, job: dict, inputs: dict, outputs: dict, stage) -> bool | None:
    """Under DVC, `dear world` and `dear backbone` copy the machine's output of this very job when it has one
    (dear.pipeline.machine_cache): True when restored, False when the stage must run (and then keeps its output there),
    None when the machine's cache is not for this stage."""
    from dear.pipeline import machine_cache

    if not machine_cache.active(name) or not job:
        return None
    entry = machine_cache.find(name, machine_cache.wanted(name, job, inputs))
    if entry is None:
        return False
    machine_cache.restore(entry, Path(outputs["folder"]), stage.Outputs.FILES)
    return True


def job_record(stage: str, params, inputs: dict) -> dict:
    """What every output of this run records about its job: the stage, its arguments, the values it reads
    (resolved, key by key: dear.config.keys), the sha256 of its code and each file's fingerprint (dear.pipeline.jobs.code)."""
    from dear.pipeline import jobs
    from dear.config import keys
    from dear.methods import entry

    shots = {"shots": inputs["shots"]} if inputs.get("shots") is not None else {}  # a few-shot run's K
    args = {"train": lambda: dict(method=inputs["method"] or params.train.method, dataset=inputs["dataset"],
                                  classes=inputs["classes"], **shots),
            "prepare": lambda: dict(dataset=inputs["dataset"]),
            "collect": lambda: dict(method=inputs["method"]),
            "fuse": lambda: dict(method=inputs["method"], classes=inputs["classes"]),
            "evaluate": lambda: dict(method=inputs["method"], classes=inputs["classes"], **shots)}.get(stage, dict)()
    try:
        reads = keys.reads(params, stage, **args)
        code = jobs.code(stage, args.get("method") if stage in jobs.METHOD_STAGES else None, args.get("dataset"))
        plugin = entry(args["method"]).plugin if args.get("method") else None
    except DearError:  # an argument the stage refuses in its own words (an unknown --method): no record to make
        return {}
    return {"stage": stage, "args": args, "reads": reads, "code": code.sha256, "code_files": code.files,
            **({"plugin": plugin_record(plugin, code.files)} if plugin else {})}


def plugin_record(plugin, counted: dict) -> dict:
    """What a run records of a plugin method: the distribution and version that declare it, its entry point, and
    its code the job counted, against the distribution's RECORD (`dear.pipeline.codegraph.code_record`)."""
    from dear.pipeline.codegraph import code_record

    return {"method": plugin.name, "distribution": plugin.distribution, "version": plugin.version,
            "entry_point": plugin.target, "contract": plugin.method.contract, **code_record(plugin, counted)}


def _import_stage(name: str):
    """`dear.stages.<name>`, imported with the cyclic garbage collector paused.

    The stage's imports (torch, torchvision, open_clip: ~3,000 modules) create
    millions of objects that live as long as the process. The collector's
    passes over them during the imports, and in every full collection after,
    cost a job of the demo ~1.5 s (docs/performance.md); `gc.freeze` keeps
    them out of later collections. The collection first: garbage left by an
    earlier command in the same process (tests) is not frozen with them.
    """
    gc.collect()
    gc.disable()
    try:
        return importlib.import_module(f"dear.stages.{name}")
    finally:
        gc.freeze()
        gc.enable()


def _print_errors(err: DearError, log: Optional[Path] = None) -> None:
    """One `error:` line per problem on stderr (and in the log)."""
    lines = [f"error: {line}" for line in getattr(err, "lines", [str(err)])]
    for line in lines:
        typer.echo(line, err=True)
    if log is not None:
        with open(log, "a") as handle:
            handle.write("".join(f"{line}\n" for line in lines))


def _check_log_outside(log: Optional[Path], folder: Optional[Path]) -> None:
    """A stage replaces its output folder as a whole: a log inside it would be lost (any seed's, for {seed})."""
    if log is None or folder is None:
        return
    pattern = str(Path(folder).resolve()).replace(SEED, "*")
    if any(fnmatch.fnmatchcase(str(parent), pattern) for parent in Path(log).resolve().parents):
        raise DearError(f"--log {log}: inside the output folder {folder}, which the stage replaces as a whole; "
                        "put the log elsewhere (e.g. logs/)")


DIGESTED = {"folder": False, "fusion": True}  # Outputs field -> whether it names a file (else a folder)


def _write_digests(name: str, outputs: dict) -> None:
    """After the last seed: the digests of each output folder (dear/pipeline/digest.py: what dvc.yaml links stages by)."""
    from dear.pipeline.digest import digested_folder, write_digests

    for key, value in outputs.items():
        folder = digested_folder(value, DIGESTED[key], SEED) if key in DIGESTED and value is not None else None
        if folder is not None and folder.is_dir():
            write_digests(folder, name)


def seed_runs(inputs: dict, outputs: dict, seeds: Optional[List[int]], default: list[int]) -> list[tuple]:
    """(seed, inputs, outputs) of each run: {seed} in a path becomes the seed, `seed` (if asked for) is set.

    Without {seed} in any path the stage runs once, for at most one seed. Every
    templated input must exist for every seed before the first run starts, so a
    missing file never leaves the earlier seeds' outputs behind.
    """
    templated = [key for key, value in {**inputs, **outputs}.items() if SEED in str(value or "")]
    if not templated:
        if seeds and len(seeds) > 1:
            raise DearError(f"{len(seeds)} seeds but no path holds {SEED}; put {SEED} in the output path")
        if "seed" not in inputs:  # the stage itself takes no seed
            return [(None, inputs, outputs)]
        chosen = seeds or default
        if len(chosen) > 1:
            raise DearError(f"data.seeds holds {len(chosen)} seeds; pass --seed S, or put {SEED} in the paths to run all")
        return [(chosen[0], _with_seed(inputs, chosen[0]), outputs)]
    untemplated = [key for key, value in outputs.items() if value is not None and SEED not in str(value)]
    if untemplated:
        option = OUTPUT_OPTIONS.get(untemplated[0], untemplated[0])
        raise DearError(f"--{option}: holds no {SEED} while other paths do; every seed would write it")
    chosen = list(seeds or default)
    runs = [(seed, _at_seed(_with_seed(inputs, seed), seed), _at_seed(outputs, seed)) for seed in chosen]
    for seed, seed_inputs, _ in runs:
        for key in templated:
            if key in seed_inputs and not Path(seed_inputs[key]).exists():
                raise DearError(f"{seed_inputs[key]}: not found (--{key}, seed {seed}); run the stage that writes it first")
    return runs


OUTPUT_OPTIONS = {"folder": "out", "fusion": "out"}  # Outputs field -> its command-line option


def _with_seed(inputs: dict, seed: int) -> dict:
    return {**inputs, "seed": seed} if "seed" in inputs else inputs


def _at_seed(paths: dict, seed: int) -> dict:
    return {key: Path(str(value).replace(SEED, str(seed))) if isinstance(value, Path) and SEED in str(value) else value
            for key, value in paths.items()}


class _Stderr(logging.StreamHandler):
    """Writes to whatever `sys.stderr` is at the time (test runners swap it)."""

    @property
    def stream(self):
        return sys.stderr

    @stream.setter
    def stream(self, value):
        pass


def _configure_logging(log: Optional[Path]) -> None:
    """INFO of dear's own loggers to stderr and, with --log, to that file (other libraries stay quiet)."""
    logger = logging.getLogger("dear")
    for handler in list(logger.handlers):
        logger.removeHandler(handler)
        handler.close()
    handlers: list[logging.Handler] = [_Stderr()]
    if log is not None:
        from dear.runtime.io import check_output_file, filesystem_errors

        check_output_file(log)
        with filesystem_errors(log):
            log.parent.mkdir(parents=True, exist_ok=True)
            handlers.append(logging.FileHandler(log, mode="w"))
    formatter = logging.Formatter("%(asctime)s %(name)s: %(message)s")
    for handler in handlers:
        handler.setFormatter(formatter)
        logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    logger.propagate = False


@app.command()
def world(
    out: Path = typer.Option(Path("world"), help="output folder: one CoOp-layout folder per embedded dataset + card.json"),
    params: Path = ParamsOption,
    log: Optional[Path] = LogOption,
    overrides: Optional[List[str]] = SetOption,
) -> None:
    """Draw the embedded emoji world in CoOp's layout.

    Every embedded dataset of the `world:` section, with each image's true attributes.
    """
    _run_stage("world", params, overrides, log, inputs=dict(), outputs=dict(folder=out))


@app.command()
def backbone(
    world: Path = typer.Option(Path("world"), "--world", help="folder written by `dear world` (sanity evaluation)"),
    out: Path = typer.Option(Path("backbone"), help="output folder: model.pt (state dict) and card.json"),
    params: Path = ParamsOption,
    log: Optional[Path] = LogOption,
    overrides: Optional[List[str]] = SetOption,
) -> None:
    """Make the CLIP backbone: train it here or load weights.

    The card holds the weights' sha256 and zero-shot sanity metrics on the world.
    """
    _run_stage("backbone", params, overrides, log, inputs=dict(world=world), outputs=dict(folder=out))


@app.command()
def prepare(
    dataset: str = typer.Option(..., help="dataset folder name under data.root (e.g. oxford_pets)"),
    out: Path = typer.Option(..., help="output folder: manifest.parquet and fewshot-seed<S>.parquet"),
    params: Path = ParamsOption,
    log: Optional[Path] = LogOption,
    overrides: Optional[List[str]] = SetOption,
) -> None:
    """Index a dataset: manifest and a few-shot table per seed.

    Reads <data.root>/<dataset> in CoOp's layout and checks its images as data.verify asks.
    """
    _run_stage("prepare", params, overrides, log, inputs=dict(dataset=dataset), outputs=dict(folder=out))


@app.command()
def profile(
    manifest: Path = typer.Option(..., help="manifest.parquet of the profiled dataset (profile.dataset), from `dear prepare`"),
    out: Path = typer.Option(..., help="output folder: roles.parquet, head_concepts.parquet, head_texts.parquet, heatmap.png, roles.md"),
    backbone: Path = typer.Option(Path("backbone"), "--backbone", help="folder written by `dear backbone`"),
    params: Path = ParamsOption,
    log: Optional[Path] = LogOption,
    overrides: Optional[List[str]] = SetOption,
) -> None:
    """Give each image head its concepts and a role.

    Per-head TextSpan texts, Concept Entropy and roles of the last profile.layers layers.
    """
    _run_stage("profile", params, overrides, log, inputs=dict(backbone=backbone, manifest=manifest), outputs=dict(folder=out))


@app.command()
def train(
    dataset: str = typer.Option(..., help="dataset name (its layers of the method's recipe apply: REG_WEIGHT, prompt, ...)"),
    fewshot: Path = typer.Option(..., help="few-shot table of `dear prepare` (data/<ds>/fewshot-seed{seed}.parquet)"),
    out: Path = typer.Option(..., help="output folder: model.pt and train_log.parquet (e.g. runs/<m>/<ds>/train/seed{seed})"),
    seed: Optional[List[int]] = typer.Option(
        None, "--seed", help="run seed (init of the learnable parts, batch order, augmentations); repeat for several; "
                             "default: every data.seeds. Several seeds need {seed} in --fewshot and --out"),
    method: Optional[str] = typer.Option(None, help=" | ".join(method_names()) + " | a plugin's method (default: train.method)"),
    backbone: Path = typer.Option(Path("backbone"), "--backbone", help="folder written by `dear backbone`"),
    roles: Optional[Path] = typer.Option(None, help="roles.parquet of `dear profile` (needed by --method dear)"),
    classes: str = typer.Option("base", help="classes trained on: base (base-to-novel) | all (transfer source)"),
    shots: Optional[int] = typer.Option(None, help="few-shot learning: K shots per class, all classes (with --classes "
                                                   "all and data/<ds>/fewshot-shots<K>-seed{seed}.parquet): the "
                                                   "recipe's few_shot layers for K"),
    checkpoint: Optional[Path] = typer.Option(
        None, help="resumable checkpoint file (default: <output_root>/checkpoints/<out below the root>/ckpt.pt)"),
    params: Path = ParamsOption,
    log: Optional[Path] = LogOption,
    overrides: Optional[List[str]] = SetOption,
) -> None:
    """Train one method on a dataset's few-shot shots, every seed.

    Each seed resumes from its checkpoint when one is there.
    """
    _run_stage("train", params, overrides, log,
               inputs=dict(method=method, dataset=dataset, seed=None, backbone=backbone, fewshot=fewshot, roles=roles,
                           classes=classes, shots=shots),
               outputs=dict(folder=out, checkpoint=checkpoint), seeds=seed)


@app.command()
def fuse(
    model: Path = typer.Option(..., help="model.pt of `dear train`"),
    fewshot: Path = typer.Option(..., help="few-shot table whose validation shots refit alpha"),
    out: Path = typer.Option(..., help="output file fusion.json"),
    classes: str = typer.Option("base", help="base | all: the classes the model was trained on"),
    method: Optional[str] = MethodOption,
    backbone: Path = typer.Option(Path("backbone"), "--backbone", help="folder written by `dear backbone`"),
    roles: Optional[Path] = typer.Option(None, help="roles.parquet (method dear)"),
    seed: Optional[List[int]] = SeedOption,
    params: Path = ParamsOption,
    log: Optional[Path] = LogOption,
    overrides: Optional[List[str]] = SetOption,
) -> None:
    """Refit the fusion weights on validation shots.

    The network stays frozen; only alpha is fitted.
    """
    _run_stage("fuse", params, overrides, log, inputs=dict(model=model, method=method, backbone=backbone, roles=roles,
                                                fewshot=fewshot,
                                                manifest=fewshot.parent / "manifest.parquet", classes=_classes(classes)),
               outputs=dict(fusion=out), seeds=seed)


@app.command()
def evaluate(
    model: Path = typer.Option(..., help="model.pt of `dear train`"),
    fusion: Path = typer.Option(..., help="fusion.json of `dear fuse`"),
    source: Path = typer.Option(..., help="prepared folder of the training dataset (data/<ds>)"),
    out: Path = typer.Option(..., help="output folder: eval.parquet and metrics.json"),
    classes: str = typer.Option("base", help="base: base-to-novel | all: the transfer protocols of study.*"),
    method: Optional[str] = MethodOption,
    shots: Optional[int] = typer.Option(None, help="few-shot learning (with --classes all): score the model trained "
                                                   "on K shots on its own dataset's test split, all classes"),
    data: Path = typer.Option(Path("data"), help="folder of prepared datasets (transfer targets)"),
    backbone: Path = typer.Option(Path("backbone"), "--backbone", help="folder written by `dear backbone`"),
    roles: Optional[Path] = typer.Option(None, help="roles.parquet (method dear)"),
    seed: Optional[List[int]] = SeedOption,
    params: Path = ParamsOption,
    log: Optional[Path] = LogOption,
    overrides: Optional[List[str]] = SetOption,
) -> None:
    """Score a trained model: per-class counts for each protocol.

    Correct/total counts per class for base-to-novel or the transfer protocols of study.*.
    """
    _run_stage("evaluate", params, overrides, log, inputs=dict(model=model, method=method, fusion=fusion, backbone=backbone,
                                                    roles=roles, source=source, classes=_classes(classes), data=data,
                                                    shots=shots),
               outputs=dict(folder=out), seeds=seed)


@app.command()
def collect(
    method: str = typer.Option(..., help="a method of study.methods: every evaluation of it in the study is listed"),
    out: Path = typer.Option(..., help="output folder: runs.json (results/<method>)"),
    params: Path = ParamsOption,
    log: Optional[Path] = LogOption,
    overrides: Optional[List[str]] = SetOption,
) -> None:
    """List one method's runs for the report.

    Each evaluation of the study, its model and train log, with their sha256.
    """
    _run_stage("collect", params, overrides, log, inputs=dict(method=method), outputs=dict(folder=out))


def _classes(value: str) -> str:
    if value not in ("base", "all"):
        typer.echo(f"error: --classes must be base or all, got {value!r}", err=True)
        raise typer.Exit(code=1)
    return value


REPORT_LISTS = {"--evals": "evals", "--train-logs": "train_logs", "--roles": "roles", "--models": "models",
                "--benchmarks": "benchmarks", "--runs": "runs"}


class _FileListsCommand(typer.core.TyperCommand):
    """A command whose list options take every path up to the next option (`--evals a b c --roles d`).

    Click options take one value each, so the lists are taken out of the
    arguments before click parses the rest (into `ctx.meta["file_lists"]`);
    their options stay declared, so `--help` lists them with the others.
    """

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        ctx.meta["file_lists"], rest = _file_lists(args, REPORT_LISTS)
        return super().parse_args(ctx, rest)


@app.command(
    cls=_FileListsCommand,
    epilog="File lists: --evals EVAL.parquet... (required unless --runs), --train-logs TRAIN_LOG.parquet..., "
           "--roles roles/<dataset>/heatmap.png..., --models MODEL.pt... (the record of the run), "
           "--runs RUNS.json... (`dear collect`'s results/<method>/runs.json: the evaluations, models and train logs "
           "of each method's runs, what both engines pass), "
           "--benchmarks LOGS_FOLDER (its *.benchmark.tsv: each job's time and memory). Each list takes every path "
           "up to the next option, so shell globs work (--evals runs/*/*/eval/seed*/eval.parquet).",
)
def report(
    ctx: typer.Context,
    out: Path = typer.Option(..., help="output folder: results.md/csv, metrics.json, pictures, plots/"),
    evals: Optional[List[Path]] = typer.Option(
        None, "--evals", metavar="EVAL.parquet...",
        help="eval tables of `dear evaluate` (or --runs); takes every path up to the next option, so shell globs "
             "work: --evals runs/*/*/eval/seed*/eval.parquet"),
    runs: Optional[List[Path]] = typer.Option(
        None, "--runs", metavar="RUNS.json...", help="results/<method>/runs.json of `dear collect`: their evaluations, "
                                                     "models and train logs, each checked by sha256; as --evals"),
    train_logs: Optional[List[Path]] = typer.Option(
        None, "--train-logs", metavar="TRAIN_LOG.parquet...", help="train logs of `dear train` (loss curves), as --evals"),
    roles: Optional[List[Path]] = typer.Option(
        None, "--roles", metavar="HEATMAP.png...", help="roles/<dataset>/heatmap.png of `dear profile`, as --evals"),
    params: Path = ParamsOption,
    log: Optional[Path] = LogOption,
    overrides: Optional[List[str]] = SetOption,
) -> None:
    """Aggregate eval tables into the paper's tables and pictures.

    Also writes DVC metrics and plots (docs/report.md).
    """
    _run_stage("report", params, overrides, log, inputs=ctx.meta["file_lists"], outputs=dict(folder=out))


def _file_lists(args: list[str], flags: dict[str, str]) -> tuple[dict[str, list[Path]], list[str]]:
    """({name: [paths]} of every `--flag a b c` in `args`, the other arguments), greedy, order kept.

    A list takes every argument up to the next one starting with `-`, so a
    shell glob (or Snakemake's `{input.evals}`) can follow its flag; click
    parses the other arguments (and names what it does not know).
    """
    lists: dict[str, list[Path]] = {name: [] for name in flags.values()}
    rest: list[str] = []
    current = None
    for token in args:
        if token.startswith("-"):
            flag, _, value = token.partition("=")
            current = flags.get(flag)
            if current is None:
                rest.append(token)
            elif value:
                _add(lists[current], value)
        elif current is not None:
            _add(lists[current], token)
        else:
            rest.append(token)
    return lists, rest


def _add(paths: list[Path], value: str) -> None:
    """Append a path; a shell glob that matched nothing names no file of that kind (a protocol that is off)."""
    if not (any(char in value for char in "*?[") and not Path(value).exists()):
        paths.append(Path(value))


# --- utilities, after the stages in --help -----------------------------------------

@contextlib.contextmanager
def _one_line_errors():
    """A utility command's `DearError`: one `error:` line per problem and exit 1 (the traceback with --debug)."""
    try:
        yield
    except DearError as err:
        if _state["debug"]:
            raise
        _print_errors(err)
        raise typer.Exit(code=1)


@app.command()
def predict(
    model: Path = typer.Option(..., help="model.pt of `dear train` (any method)"),
    images: Path = typer.Option(..., help="a folder of images (searched below), an image, or a text file of paths"),
    out: Path = typer.Option(..., help="output folder: predictions.parquet and predictions.csv"),
    class_list: Optional[Path] = typer.Option(
        None, "--class-list", help="text file of class names to choose from, one per line (may hold classes never "
                                   "trained on); default: the classes the model was trained on"),
    top_k: int = typer.Option(5, "--top-k", help="classes (and probabilities) per image"),
    rule: str = typer.Option(
        "by-class", "--rule", help="by-class: a trained class by the method's output on seen classes, any other by "
                                   "its rule for unseen ones (fusion.novel), as `dear evaluate` scores them | seen | "
                                   "unseen: every class by that one rule"),
    backbone: Path = typer.Option(Path("backbone"), "--backbone", help="folder written by `dear backbone`"),
    roles: Optional[Path] = typer.Option(None, help="roles.parquet (method dear)"),
    fusion: Optional[Path] = typer.Option(None, help="fusion.json of `dear fuse` (default: the trained alpha)"),
    params: Path = ParamsOption,
    log: Optional[Path] = LogOption,
    overrides: Optional[List[str]] = SetOption,
) -> None:
    """Label new images: the top-k classes, each with its rule.

    Unreadable images are listed with their error; it fails only when none can be read.
    """
    _run_stage("predict", params, overrides, log, inputs=dict(model=model, backbone=backbone, images=images, roles=roles,
                                                   fusion=fusion, class_list=class_list, top_k=top_k, rule=rule),
               outputs=dict(folder=out))


@app.command()
def check(
    params: Path = ParamsOption,
    overrides: Optional[List[str]] = SetOption,
    jobs: Optional[Path] = typer.Option(
        None, "--jobs", help="also compare every existing output with what the config would make, mark the ones out "
                             "of date and write each job's values file here (DVC's check stage: .dear/jobs)"),
) -> None:
    """List every problem of a params file before any job runs.

    Values, data folders, weights, device, SVD rank...; warnings (fewer shots than asked, more loader processes
    than CPUs) are printed too but do not fail the check. Every independent check runs; one that reads a section with a problem says it waits on it. With --jobs
    (the first stage of dvc.yaml) a problem stops `dvc repro` before any job, and each job whose outputs were
    made otherwise than the config says is named with the keys that differ (docs/engines.md).
    """
    loaded, found = check_file(params, overrides or ())
    for line in check_warnings(loaded, str(params)) if loaded is not None else ():
        typer.echo(f"warning: {line}", err=True)
    for finding in found:
        typer.echo(f"{'error' if finding.is_problem else 'note'}: {finding.text}", err=True)
    problems = sum(finding.is_problem for finding in found)
    if problems:
        typer.echo(f"{params}: {problems} problem(s)", err=True)
        raise typer.Exit(code=1)
    if jobs is not None:
        from dear.pipeline import engines

        for line in engines.run(loaded, str(params), jobs):
            typer.echo(line, err=True)
    typer.echo(f"{params}: no problems found")
    typer.echo(cost_line(loaded, params))


def cost_line(loaded, params: Path) -> str:
    """`dear check`'s line on the price of the run: the plan's total from the config's own record, if there is one."""
    record = Path(loaded.output_root) / "report" / "record.json"
    if not record.is_file():
        return (f"cost: no record of a run of this config yet ({record}); `dear plan --params {params} --record RUN` "
                "estimates it from another run's (a pilot on the target machines prices it best)")
    from dear.pipeline.plan import plan

    try:
        total = plan(loaded, json.loads(record.read_text())).iloc[-1]
    except DearError as err:
        return f"cost: not estimated ({err})"
    return (f"cost: about {total['seconds'] / 3600:.2f} device hours over {total['jobs']} jobs, peak RSS "
            f"{total['max_rss_mb'] / 1024:.1f} GB, from {record} (`dear plan --params {params}` per stage)")


@app.command()
def plan(
    params: Path = ParamsOption,
    record: Optional[Path] = typer.Option(
        None, help="a run's report folder (or output root) whose record.json prices this config; default: the "
                   "config's own output_root (a pilot or an earlier run of it)"),
) -> None:
    """Estimate device hours and memory from a run's record.

    Per stage and in total, before the run (docs/report.md)."""
    _configure_logging(None)
    with _one_line_errors():
        from dear.pipeline.plan import run

        loaded = load_params(params)
        typer.echo(run(loaded, record or Path(loaded.output_root)), nl=False)


@app.command()
def compare(
    run_a: Path = typer.Argument(..., help="the first run: its report folder, or the output root holding report/"),
    run_b: Path = typer.Argument(..., help="the second run"),
    params: Path = ParamsOption,
) -> None:
    """Say which numbers moved beyond noise from RUN_A to RUN_B.

    And which inputs differ (params, recipes, code, data, environment). Numbers of one run only are listed as not
    paired; with nothing paired it says so and exits 1. Intervals and their level come from --params (report
    section)."""
    _configure_logging(None)
    from dear.pipeline.compare import NothingPaired

    with _one_line_errors():
        from dear.pipeline.compare import run

        try:
            typer.echo(run(load_params(params), run_a, run_b), nl=False)
        except NothingPaired as err:  # the comparison says why on stdout; the error line and exit 1 follow
            typer.echo(err.text, nl=False)
            raise


@app.command()
def recipe(
    params: Path = ParamsOption,
    method: Optional[str] = typer.Option(None, help="only this method's jobs"),
    dataset: Optional[str] = typer.Option(None, help="only jobs training on this dataset"),
    protocol: Optional[str] = typer.Option(None, help="base_to_novel | transfer | few_shot: only jobs of this protocol"),
    as_json: bool = typer.Option(False, "--json", help="print JSON (one object per job) for scripts"),
    overrides: Optional[List[str]] = SetOption,
) -> None:
    """Show each training job's recipe: values and their sources.

    The resolved recipe of every training job of a config: each value and its source, and the prompts."""
    from dear.config import show

    with _one_line_errors():
        loaded = load_params(params, overrides or ())
        recipes = show.jobs(loaded, method, dataset, protocol)
        typer.echo(show.as_json(loaded, recipes) if as_json else show.as_text(loaded, recipes, str(params)))


@app.command("new-method")
def new_method(
    name: str = typer.Argument(..., help="the method's name (in study.methods) and its package's"),
    out: Optional[Path] = typer.Option(None, help="the package's new folder (default: ./NAME)"),
) -> None:
    """Write the package of a method of your own.

    Its module, recipe, entry point and a test (docs/your-method.md). As written it is zero-shot CLIP with nothing learnable and passes its test; fill in its hooks, then
    `pip install -e FOLDER` and name it in study.methods."""
    from dear import scaffold

    with _one_line_errors():
        folder = out or Path(name)
        scaffold.run(name, folder)
    typer.echo(f"{folder}: the package of method {name}; next: pip install -e {folder} && pytest {folder}/tests")


@app.command("fetch-weights")
def fetch_weights(params: Path = ParamsOption) -> None:
    """Download the weights and TAC's descriptions (network).

    model.arch + model.pretrained, into model.cache_dir; FushengHao/TAC's descriptions/<dataset>_prompt.json at a
    pinned commit, each checked against its digest, into train.recipes.tac.descriptions_dir.

    The one command that uses the network: run it where there is some (a cluster's login node);
    stages on compute nodes then read the cache offline.
    """
    _configure_logging(None)
    with _one_line_errors():
        loaded = load_params(params)
        model = loaded.model
        from dear.config.check import job_recipes
        from dear.methods import descriptions
        from dear.model.clip import resolve_arch
        from dear.model.weights import fetch_configured  # the network goes on for the download only

        path, sha = fetch_configured(model, resolve_arch)
        texts = descriptions.fetch_all(job_recipes(loaded))
    if path is None:
        typer.echo(f"model.pretrained is {model.pretrained!r}: nothing to fetch")
    else:
        typer.echo(f"{model.arch} '{model.pretrained}': {path} ({path.stat().st_size / 2**20:.0f} MiB, "
                   f"sha256 {sha[:12]}...)")
    for found in texts:
        typer.echo(f"{descriptions.REPOSITORY}@{descriptions.COMMIT[:7]}: {found} (checked)")


@app.command()
def server(action: str = typer.Argument("status", metavar="status|stop",
                                        help="status: list this user's warm servers; stop: end them (each after "
                                             "the commands it runs)")) -> None:
    """List or stop the warm servers of `dear` commands.

    They run `dear` commands without their ~5 s of imports (docs/performance.md).

    A server starts on a command's first use and ends after DEAR_SERVER_IDLE seconds (default 900) without one;
    DEAR_SERVER=off runs every command in its own process, as before.
    """
    from dear.server.wire import Unavailable, control

    if action not in ("status", "stop"):
        _print_errors(DearError(f"dear server {action}: unknown action; use status or stop"))
        raise typer.Exit(code=1)
    try:
        found = control(action)
    except Unavailable as why:
        _print_errors(DearError(f"dear server: {why}"))
        raise typer.Exit(code=1)
    for about in found:
        if "error" in about:
            typer.echo(f"{about['socket']}: {about['error']}")
            continue
        up = time.time() - about["started"]
        typer.echo(f"server {about['pid']}{' (stopping)' if action == 'stop' else ''}: up {up / 60:.0f} min, "
                   f"{about['served']} requests served, {about['running']} commands running ({about['socket']})")
    if not found:
        typer.echo("no warm server runs for this user")


def main() -> None:
    """The `dear` command: a stage runs watched by a parent that reports its death by a signal (dear.runtime.supervise)."""
    _state["supervise"] = True
    app()


if __name__ == "__main__":
    main()
