"""The `dear` command line: one thin command per stage.

Each command only parses its arguments, loads `params.yaml` and calls the
stage's `run(params, inputs, outputs)`. A `DearError` (bad input) prints one
line and exits 1; `--debug` shows the traceback instead.
"""

from __future__ import annotations

import importlib
import logging
import sys
from pathlib import Path
from typing import Optional

import typer

from dear.errors import DearError
from dear.params import DEFAULT_PATH, load_params

app = typer.Typer(
    name="dear",
    help="DeAR pipeline: each stage of the study as one command (see README.md).",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

_state = {"debug": False}

ParamsOption = typer.Option(DEFAULT_PATH, "--params", help="parameters file (one section per stage)")
LogOption = typer.Option(None, "--log", help="also write this stage's log to this file")


@app.callback()
def _main(debug: bool = typer.Option(False, "--debug", help="show tracebacks for errors")) -> None:
    _state["debug"] = debug


def _run_stage(name: str, params: Path, log: Optional[Path], inputs: dict, outputs: dict) -> None:
    """Load params, then run `dear.stages.<name>.run(params, Inputs(**inputs), Outputs(**outputs))`.

    The params file is validated before the stage's (heavy) imports, and a
    `DearError` anywhere becomes one line on stderr and exit code 1.
    """
    _configure_logging(log)
    try:
        loaded = load_params(params)
        stage = importlib.import_module(f"dear.stages.{name}")
        stage.run(loaded, stage.Inputs(**inputs), stage.Outputs(**outputs))
    except DearError as err:
        if _state["debug"]:
            raise
        typer.echo(f"error: {err}", err=True)
        if log is not None:
            with open(log, "a") as handle:
                handle.write(f"error: {err}\n")
        raise typer.Exit(code=1)


def _configure_logging(log: Optional[Path]) -> None:
    handlers: list[logging.Handler] = [logging.StreamHandler(sys.stderr)]
    if log is not None:
        log.parent.mkdir(parents=True, exist_ok=True)
        handlers.append(logging.FileHandler(log, mode="w"))
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s", handlers=handlers, force=True)


@app.command()
def prepare(
    dataset: str = typer.Option(..., help="dataset folder name under data.root (e.g. oxford_pets)"),
    out: Path = typer.Option(..., help="output folder: manifest.parquet and fewshot-seed<S>.parquet"),
    params: Path = ParamsOption,
    log: Optional[Path] = LogOption,
) -> None:
    """Index a dataset in CoOp's layout: manifest and one few-shot table per seed."""
    _run_stage("prepare", params, log, inputs=dict(dataset=dataset), outputs=dict(folder=out))


def main() -> None:
    app()


if __name__ == "__main__":
    main()
