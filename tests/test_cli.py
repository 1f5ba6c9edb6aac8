"""The command line as its users expect: --version, stages in pipeline order, --set KEY=VALUE on every stage."""

import re
from importlib.metadata import version

import pytest
from typer.testing import CliRunner

from dear.cli import app
from dear.runtime.io import read_provenance
from dear.config.params import load_params
from tests.fake_run import ROOT
from tests.fake_coop import make_fake_dataset, write_params

PIPELINE = ["world", "backbone", "prepare", "profile", "train", "fuse", "evaluate", "collect", "report"]


def test_version():
    result = CliRunner().invoke(app, ["--version"])
    assert result.exit_code == 0
    assert result.output.strip() == f"dear {version('dear')}"


def test_help_lists_the_stages_in_pipeline_order_each_on_one_whole_line():
    output = CliRunner().invoke(app, ["--help"]).output  # 80 columns
    commands = re.findall(r"^  (\w[\w-]*) ", output.partition("Commands:")[2], flags=re.M)
    assert [name for name in commands if name in PIPELINE] == PIPELINE
    utilities = [name for name in commands if name not in PIPELINE]
    assert utilities and all(commands.index(name) > commands.index("report") for name in utilities), "utilities last"
    assert "..." not in output.partition("Commands:")[2], "a command's one-line help is cut at 80 columns"


def test_flags_show_no_value_and_report_lists_its_file_options():
    """Boolean options read `--debug`, not `--debug <bool>`; the report's greedy lists are in its --help proper."""
    main = CliRunner().invoke(app, ["--help"]).output
    assert re.search(r"^  --debug +show tracebacks", main, flags=re.M) and "<bool>" not in main
    report = CliRunner().invoke(app, ["report", "--help"], terminal_width=200).output
    for option in ("--evals EVAL.parquet...", "--train-logs TRAIN_LOG.parquet...", "--roles HEATMAP.png..."):
        assert option in report.partition("Options:")[2], option


def test_a_stage_import_leaves_the_garbage_collector_on():
    """Stages are imported with the collector paused (dear.cli._import_stage); it must come back on, error or not."""
    import gc

    from dear import cli

    assert gc.isenabled()
    assert cli._import_stage("report").run
    assert gc.isenabled()
    with pytest.raises(ModuleNotFoundError):
        cli._import_stage("no_such_stage")
    assert gc.isenabled()


def test_every_stage_takes_set():
    for name in PIPELINE:
        output = CliRunner().invoke(app, [name, "--help"], terminal_width=200).output
        assert "--set" in output and "KEY=VALUE" in output, name


@pytest.fixture
def fake(tmp_path):
    make_fake_dataset(tmp_path / "raw", "oxford_pets", n_classes=3, per_class=3)
    return write_params(tmp_path / "params.yaml", root=tmp_path / "raw", datasets=["oxford_pets"], seeds=[1], shots=3,
                        source="coop")


def prepare(params, out, *sets):
    extra = [arg for item in sets for arg in ("--set", item)]
    return CliRunner().invoke(app, ["prepare", "--dataset", "oxford_pets", "--out", str(out), "--params", str(params),
                                    *extra])


def test_set_changes_the_run_and_is_recorded_in_the_provenance(fake, tmp_path):
    plain, changed = tmp_path / "plain", tmp_path / "changed"
    assert prepare(fake, plain).exit_code == 0
    result = prepare(fake, changed, "data.shots=1", "data.seeds=[7]")
    assert result.exit_code == 0, result.output
    assert (changed / "fewshot-seed7.parquet").is_file() and not (changed / "fewshot-seed1.parquet").exists()
    made_by = read_provenance(changed / "manifest.parquet")
    assert made_by["overrides"] == {"data.shots": 1, "data.seeds": [7]}
    assert made_by["params"]["shots"] == 1
    assert "overrides" not in read_provenance(plain / "manifest.parquet")
    assert "shots: 3" in fake.read_text(), "--set never writes the params file"


@pytest.mark.parametrize("item, expected", [
    ("data.shots=many", "(--set data.shots=many): key 'data.shots' must be int"),
    ("data.shotz=1", "(--set data.shotz=1): unknown key 'data.shotz'; remove it or fix its spelling"),
    ("train.recipes.dear.lambda_fus=1e-3", "--set train.recipes.dear.lambda_fus=1e-3: 1e-3 is text in YAML 1.1 "
                                           "(dear, Snakemake) but the number 0.001 in YAML 1.2 (DVC); write 0.001"),
    ("data.skip_bad=yes", "--set data.skip_bad=yes: yes is a boolean in YAML 1.1"),
    ("data.seeds.first=1", "--set data.seeds.first=1: 'data.seeds' is a value, not a section"),
    ("data.shots", "--set data.shots: expected KEY=VALUE"),
    ("data.shots=[1", "--set data.shots=[1, column 3: not valid YAML: expected ',' or ']'"),
])
def test_bad_set_is_one_line_like_a_bad_params_file_and_writes_nothing(fake, tmp_path, item, expected):
    result = prepare(fake, tmp_path / "out", item)
    assert result.exit_code == 1
    assert result.output.count("\n") == 1 and result.output.startswith("error: ")
    assert expected in result.output
    assert not (tmp_path / "out").exists()


def test_a_report_glob_that_matched_nothing_is_a_protocol_that_is_off(tmp_path):
    """The report command globs every protocol's folder; with one off its glob stays unmatched and is dropped."""
    from dear.cli import REPORT_LISTS, _file_lists

    (tmp_path / "eval.parquet").touch()
    lists, _ = _file_lists(["--evals", str(tmp_path / "eval.parquet"), str(tmp_path / "transfer/*/eval/seed*/eval.parquet"),
                         "--train-logs", str(tmp_path / "missing.parquet")], REPORT_LISTS)
    assert lists["evals"] == [tmp_path / "eval.parquet"]
    assert lists["train_logs"] == [tmp_path / "missing.parquet"], "a file named outright is kept (and checked later)"


def test_dear_recipe_shows_every_job_with_the_source_of_every_value(tmp_path):
    """The paper config: every job, every value the authors'; the demo: its changes marked as ours."""
    import json

    result = CliRunner().invoke(app, ["recipe", "--params", str(ROOT / "configs/paper-vitb16.yaml"), "--json"])
    assert result.exit_code == 0, result.output
    jobs = json.loads(result.stdout)
    params = load_params(ROOT / "configs/paper-vitb16.yaml")
    assert len(jobs) == len(params.study.methods) * (len(params.study.base_to_novel) + 1)
    coop = next(j for j in jobs if j["method"] == "coop" and j["dataset"] == "imagenet" and j["protocol"] == "transfer")
    assert coop["settings"]["epochs"] == {"value": 50, "kind": "authors",
                                         "source": "KaiyangZhou/CoOp@ff61507 configs/trainers/CoOp/vit_b16_ep50_ctxv1.yaml"}
    assert coop["prompts"] == ["X X X X golden retriever.", "X X X X sea lion."]
    shown = CliRunner().invoke(app, ["recipe", "--params", str(ROOT / "params.yaml"), "--method", "mmrl",
                                     "--dataset", "world_objects", "--protocol", "base_to_novel"])
    assert shown.exit_code == 0, shown.output
    epochs = next(line for line in shown.stdout.splitlines() if line.strip().startswith("*epochs"))
    assert "ours: train.recipes.mmrl.epochs (authors: 10)" in epochs
    nothing = CliRunner().invoke(app, ["recipe", "--params", str(ROOT / "params.yaml"), "--dataset", "nope"])
    assert nothing.exit_code == 1 and nothing.stderr.count("error:") == 1 and "--dataset nope" in nothing.stderr
