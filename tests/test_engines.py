"""Two engines, one graph: Snakemake and DVC run the same commands on the same files."""

from pathlib import Path

from tests.engines import ROOT, covered, dvc_graph, make_project, snakemake_graph


def test_both_engines_declare_the_same_commands_deps_and_outs(tmp_path):
    project = make_project(tmp_path / "project", (ROOT / "params.yaml").read_text())
    snake, dvc = snakemake_graph(project), dvc_graph(project)
    assert set(snake) == set(dvc), "commands differ between Snakefile and dvc.yaml"
    for command in snake:
        s, d = snake[command], dvc[command]
        for kind in ("deps", "outs"):
            mine, theirs = getattr(s, kind), getattr(d, kind)
            only_snakemake = sorted(path for path in mine if not covered(path, theirs))
            only_dvc = sorted(other for other in theirs if not any(covered(path, {other}) for path in mine))
            assert not only_snakemake, f"{command}: Snakemake {kind} missing from dvc.yaml: {only_snakemake}"
            assert not only_dvc, f"{command}: dvc.yaml {kind} missing from the Snakefile: {only_dvc}"


def test_every_stage_depends_on_the_code_it_runs(tmp_path):
    project = make_project(tmp_path / "project", (ROOT / "params.yaml").read_text())
    for command, step in dvc_graph(project).items():
        stage = command.split()[1]
        assert f"dear/stages/{stage}.py" in step.deps, f"{stage} does not list its own module"
        assert "dear/cli.py" in step.deps
