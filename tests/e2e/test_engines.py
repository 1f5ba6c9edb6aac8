"""Two engines, one graph: Snakemake and DVC run the same commands on the same files, for any config."""

import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.engines import BIN, ROOT, covered, dvc_graph, engine_env, make_project, run, snakemake_graph

PAPER = "configs/paper-vitb16.yaml"


def assert_same_graph(snake: dict, dvc: dict) -> None:
    """Same commands, and every path of one engine lies in a path of the other, either way: Snakemake names
    each job's output folder, as input and output, where DVC may name files in it (the digest of roles.parquet,
    the report's metrics and plots), and DVC may name a folder holding Snakemake's (runs/, data/)."""
    assert set(snake) == set(dvc), f"commands differ: only Snakemake {sorted(set(snake) - set(dvc))[:2]}, " \
                                   f"only DVC {sorted(set(dvc) - set(snake))[:2]}"
    for command in snake:
        s, d = snake[command], dvc[command]
        for kind in ("deps", "outs"):
            mine, theirs = getattr(s, kind), getattr(d, kind)
            only_snakemake = sorted(path for path in mine if not any(nested(path, other) for other in theirs))
            only_dvc = sorted(other for other in theirs if not any(nested(path, other) for path in mine))
            assert not only_snakemake, f"{command}: Snakemake {kind} missing from dvc.yaml: {only_snakemake}"
            assert not only_dvc, f"{command}: dvc.yaml {kind} missing from the Snakefile: {only_dvc}"


def nested(a: str, b: str) -> bool:
    """`a` and `b` are the same path, or one lies in the other."""
    return covered(a, {b}) or covered(b, {a})


@pytest.fixture(scope="module")
def project(tmp_path_factory) -> Path:
    return make_project(tmp_path_factory.mktemp("engines") / "project", (ROOT / "params.yaml").read_text())


def test_both_engines_declare_the_same_commands_deps_and_outs(project):
    assert_same_graph(snakemake_graph(project), dvc_graph(project))


def test_the_demo_s_job_headers_are_lines_a_person_reads(project):
    """`snakemake -n` on the demo: no line over 300 characters (folders per job, one input per method for the
    report), and the report's input names each method's folder once."""
    text = run([str(BIN / "snakemake"), "-n", "-F", "--cores", "2"], project).stdout
    long = [line[:120] for line in text.splitlines() if len(line) > 300]
    assert not long, long
    report = text.split("\nrule report:\n")[1].split("\n")[0]
    assert report.count("results/") == len(yaml.safe_load((project / "params.yaml").read_text())["study"]["methods"])


def test_every_stage_depends_on_the_code_it_runs(project):
    """One code file per job, no source file: it lists the stage's module (and the method's) among the files it runs."""
    snakemake_graph(project)  # the Snakefile writes the code files, as DVC's check stage does
    for command, step in dvc_graph(project).items():
        stage, words = command.split()[1], command.split()
        code = [dep for dep in step.deps if dep.startswith(".dear/code/")]
        assert len(code) == 1 and not any(dep.startswith("dear/") for dep in step.deps), (command, step.deps)
        files = yaml.safe_load((project / code[0]).read_text())["files"]
        assert f"dear/stages/{stage}.py" in files, f"{stage} does not list its own module"
        if stage == "collect":  # lists a method's runs, runs no method's module
            assert code[0] == ".dear/code/collect.yaml"
            assert not {f"dear/methods/{name}.py" for name in ("coop", "maple", "mmrl", "dear")} & set(files)
        elif "--method" in words:
            method = words[words.index("--method") + 1]
            assert code[0] == f".dear/code/{stage}-{method}.yaml"
            assert f"dear/methods/{method.removesuffix('_nomask')}.py" in files
            others = {"maple", "cocoop", "promptsrc", "mmrl"} - {method} - ({"mmrl"} if "dear" in method else set())
            assert not {f"dear/methods/{other}.py" for other in others} & set(files), "another method's module"


def test_another_config_runs_under_its_own_root_with_its_own_values_in_both_engines(project):
    """snakemake --configfile PAPER plans the paper's study, every path under its root; its dvc.yaml agrees."""
    config = yaml.safe_load((ROOT / PAPER).read_text())
    root = config["output_root"]
    paper = snakemake_graph(project, options=["--configfile", PAPER])
    demo = snakemake_graph(project)
    for command, step in paper.items():
        assert f"--params {PAPER} " in command, command
        paths = [token for token in command.split() if "/" in token and not token.startswith(("configs/", "dear/"))]
        assert all(path.startswith(f"{root}/") for path in paths), command
        assert all(path.startswith(f"{root}/") for path in step.outs)
        assert all(path.startswith((f"{root}/", "dear/")) for path in step.deps)
    trained = [command for command in paper if command.startswith("dear train") and "--classes base" in command]
    assert len(trained) == len(config["study"]["methods"]) * len(config["study"]["base_to_novel"])
    assert any("--dataset imagenet " in command for command in paper)
    demo_files = set().union(*(step.outs for step in demo.values()))
    assert not demo_files & set().union(*(step.outs for step in paper.values())), "a path both studies write"

    run([sys.executable, "workflow/scripts/dvc_study.py", PAPER], project)
    assert_same_graph(paper, dvc_graph(project, f"{root}/dvc.yaml"))
    planned = run([str(BIN / "dvc"), "repro", "--dry", f"{root}/dvc.yaml"], project).stdout
    assert planned.count("Running stage") == len(paper) + 1  # and its check stage
    assert not any(command.startswith("dear world ") for command in paper), "real data and weights draw no world"


def test_merged_configs_are_written_for_the_jobs_to_read(project):
    """Several --configfile (or --config) make a config no file holds: it is written under the root, jobs read it."""
    (project / "overlay.yaml").write_text("report:\n  decimals: 3\n")
    plan = snakemake_graph(project, ["report"], ["--configfile", "params.yaml", "overlay.yaml"])
    merged = project / "logs/snakemake-config.yaml"
    assert all(f"--params {merged.relative_to(project)} " in command for command in plan)
    used = yaml.safe_load(merged.read_text())
    assert used["report"]["decimals"] == 3
    assert {key: value for key, value in used.items() if key != "report"} == \
        {key: value for key, value in yaml.safe_load((project / "params.yaml").read_text()).items() if key != "report"}


def test_dvc_plans_every_stage_on_a_fresh_clone(tmp_path, project):
    """`dvc repro --dry` and `dvc exp run --dry` on a fresh git clone: nothing built, every stage planned."""
    origin = tmp_path / "origin"
    make_project(origin, (ROOT / "params.yaml").read_text())
    git = ["git", "-c", "user.name=test", "-c", "user.email=test@example.org"]
    subprocess.run(["rm", "-rf", str(origin / ".dvc")], check=True)
    for command in (["git", "init", "-q"], [str(BIN / "dvc"), "init", "-q"],
                    [str(BIN / "dvc"), "config", "core.analytics", "false"], ["git", "add", "-A"],
                    [*git, "commit", "-qm", "pipeline"]):
        run(command, origin)
    run(["git", "clone", "-q", str(origin), str(tmp_path / "clone")], tmp_path)
    stages = len(dvc_graph(project)) + 1  # and the check stage (dear check --jobs)
    for command in (["repro", "--dry"], ["exp", "run", "--dry"]):
        result = subprocess.run([str(BIN / "dvc"), *command], cwd=tmp_path / "clone", env=engine_env(),
                                capture_output=True, text=True, timeout=300)
        assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
        assert result.stdout.count("Running stage") == stages, command
    short = subprocess.run([sys.executable, str(ROOT / "workflow/scripts/dvc_pending.py")], cwd=tmp_path / "clone",
                           env=engine_env(), capture_output=True, text=True, timeout=300)
    lines = short.stdout.splitlines()  # docs/engines.md: what to run instead of the long `dvc status`
    assert short.returncode == 1 and lines[0] == f"{stages} stage(s) would run:" and len(lines) == stages + 1
    assert "  world: not built yet" in lines, lines[:3]


def test_docs_show_each_configs_output_root_and_the_current_graph(project):
    sys.path.insert(0, str(ROOT / "workflow/scripts"))
    import dag_doc

    table = dict(re.findall(r"^\| `([^`]+)` \| `([^`]+)`", (ROOT / "docs/configs.md").read_text(), flags=re.M))
    configs = ["params.yaml", *(str(path.relative_to(ROOT)) for path in sorted((ROOT / "configs").glob("*.yaml")))]
    assert table == {name: yaml.safe_load((ROOT / name).read_text())["output_root"] for name in configs}
    page = (ROOT / "docs/engines.md").read_text()
    assert dag_doc.shown(page) == dag_doc.block(dag_doc.mermaid(project)), "run: python workflow/scripts/dag_doc.py"
    assert f"where all {len(dvc_graph(project))} stages would run" in page, "docs/engines.md: the demo's stage count"
    assert f'"{len(dvc_graph(project))} stage(s) would run:"' in page


def test_the_docs_count_the_demo_s_jobs_as_snakemake_plans_them(project):
    jobs = snakemake_graph(project)
    after, grown = {"backbone"}, True  # every output made downstream of the backbone
    while grown:
        found = {out for step in jobs.values() if step.deps & after for out in step.outs} - after
        after, grown = after | found, bool(found)
    after = [step for step in jobs.values() if step.deps & after]
    page = (ROOT / "docs/performance.md").read_text()
    assert f"`make demo` runs {len(jobs)} jobs, {len(after)} of them after the backbone" in page


def test_slurm_logs_of_another_config_must_go_under_its_root(project):
    """The Slurm profile's logs/slurm is the demo's folder: another config stops before its first job."""
    result = subprocess.run([str(BIN / "snakemake"), "--executor", "slurm", "--jobs", "1", "--configfile", PAPER,
                             "--slurm-logdir", "logs/slurm"], cwd=project, env=engine_env(),
                            capture_output=True, text=True, timeout=300)
    assert result.returncode != 0
    assert "add --slurm-logdir paper-vitb16/logs/slurm" in result.stdout + result.stderr
    assert not (project / "logs/slurm").exists() and not (project / "paper-vitb16/logs/slurm").exists()


# --- dry runs that check, one reader, protocols that are off -----------------------------------------

def plan(project: Path, *options: str, dry: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run([str(BIN / "snakemake"), *(["-n"] if dry else []), "--cores", "1", *options], cwd=project,
                          env=engine_env(), capture_output=True, text=True, timeout=300)


def test_a_dry_run_stops_on_a_config_problem_with_the_lines_of_dear_check(tmp_path):
    raw = yaml.safe_load((ROOT / "params.yaml").read_text())
    raw["study"]["base_to_novel"] = ["world_objects", "oxford_pet"]
    raw["profile"]["svd_rank"] = 3000
    project = make_project(tmp_path / "project", yaml.safe_dump(raw, sort_keys=False))
    result = plan(project)
    assert result.returncode == 1 and "Job stats" not in result.stdout
    checked = run([str(BIN / "dear"), "check"], project) if False else subprocess.run(
        [str(BIN / "dear"), "check"], cwd=project, env=engine_env(), capture_output=True, text=True)
    expected = [line for line in checked.stderr.splitlines() if line.startswith("error: ")]
    assert len(expected) == 3, checked.stderr  # the dataset the study uses, and svd_rank against images and width
    assert [line for line in result.stderr.splitlines() if line.startswith("error: ")] == expected
    assert "params.yaml: 3 problem(s); nothing was planned" in result.stderr


def test_a_dry_run_of_the_paper_config_reports_its_placeholder_root_and_the_real_run_stops(project):
    dry = plan(project, "--configfile", PAPER)
    assert dry.returncode == 0, dry.stderr[-2000:]
    warnings = [line for line in dry.stderr.splitlines() if line.startswith("warning: ")]
    assert warnings[0].startswith("warning: data.root: /path/to/coop-datasets not found"), dry.stderr[-2000:]
    assert warnings[-1] == (f"warning: {PAPER}: the real run stops here before any job on 3 problem(s) of this "
                            "machine above")  # data.root, the weights, TAC's class descriptions
    real = plan(project, "--configfile", PAPER, dry=False)
    assert real.returncode == 1 and "error: data.root: /path/to/coop-datasets not found" in real.stderr
    assert "no job was started" in real.stderr and not (project / "paper-vitb16/backbone").exists()


def test_a_key_given_twice_fails_with_the_same_line_in_every_reader(tmp_path):
    text = (ROOT / "params.yaml").read_text().replace("  shots: 16", "  shots: 16\n  shots: 4", 1)
    project = make_project(tmp_path / "project", text)
    line = f"error: params.yaml, line {text.splitlines().index('  shots: 4') + 1}: key 'data.shots' is given twice"
    readers = {
        "dear check": [str(BIN / "dear"), "check"],
        "snakemake -n": [str(BIN / "snakemake"), "-n", "--cores", "1"],
        "DVC's check stage": [str(BIN / "dear"), "check", "--params", "params.yaml", "--jobs", ".dear/jobs"],
    }
    for name, command in readers.items():
        result = subprocess.run(command, cwd=project, env=engine_env(), capture_output=True, text=True, timeout=300)
        assert result.returncode != 0, name
        said = [out for out in (result.stdout + result.stderr).splitlines() if out.startswith("error: params.yaml")]
        assert said and said[0].startswith(line), (name, result.stdout[-1000:] + result.stderr[-1000:])
    itself = subprocess.run([str(BIN / "dvc"), "repro", "--dry"], cwd=project, env=engine_env(), capture_output=True,
                            text=True)  # DVC reads params.yaml itself too, and refuses it in its own words
    assert itself.returncode != 0 and "found duplicate key" in itself.stderr + itself.stdout
    (project / "other.yaml").write_text(text.replace('output_root: "."', "output_root: other"))
    helper = subprocess.run([sys.executable, "workflow/scripts/dvc_study.py", "other.yaml"], cwd=project,
                            env=engine_env(), capture_output=True, text=True)
    assert helper.returncode == 1 and helper.stderr.startswith(line.replace("params.yaml", "other.yaml"))


def study_config(tmp_path: Path, name: str, change) -> str:
    """A variant of the paper config (real data and weights: no world to draw) under its own root."""
    raw = yaml.safe_load((ROOT / PAPER).read_text())
    raw["output_root"] = name
    change(raw)
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return path


@pytest.mark.parametrize("name, change, stages", [
    ("no-transfer", lambda raw: raw["study"].update(transfer=None), {"backbone", "prepare", "profile", "train", "fuse",
                                                                    "evaluate", "collect", "report"}),
    ("transfer-disabled", lambda raw: raw["study"]["transfer"].update(enabled=False),
     {"backbone", "prepare", "profile", "train", "fuse", "evaluate", "collect", "report"}),
    ("transfer-only", lambda raw: raw["study"].update(base_to_novel=[]),
     {"backbone", "prepare", "profile", "train_transfer", "fuse_transfer", "evaluate_transfer", "collect", "report"}),
    ("few-shot-only", lambda raw: raw["study"].update(base_to_novel=[], transfer=None,
                                                      few_shot={"datasets": ["dtd", "eurosat"], "shots": [1, 4]}),
     {"backbone", "prepare", "profile", "train_fewshot", "fuse_fewshot", "evaluate_fewshot", "collect", "report"}),
    ("few-shot-disabled", lambda raw: raw["study"].update(
        transfer=None, few_shot={"enabled": False, "datasets": ["dtd"], "shots": [1, 4]}),
     {"backbone", "prepare", "profile", "train", "fuse", "evaluate", "collect", "report"}),
])
def test_a_protocol_that_is_off_makes_no_job_in_either_engine(project, tmp_path, name, change, stages):
    config = study_config(project, name, change)
    relative = str(config.relative_to(project))
    snake = snakemake_graph(project, options=["--configfile", relative])
    run([sys.executable, "workflow/scripts/dvc_study.py", relative], project)
    assert_same_graph(snake, dvc_graph(project, f"{name}/dvc.yaml"))
    planned = run([str(BIN / "dvc"), "repro", "--dry", f"{name}/dvc.yaml"], project).stdout
    ran = {stage.split("@")[0].split(":")[-1] for stage in re.findall(r"Running stage '([^']+)'", planned)}
    assert ran == stages | {"check"}, ran  # and no world: real data and real weights read none
    few = (yaml.safe_load(config.read_text())["study"].get("few_shot") or {})
    if few.get("enabled", True) and few:  # one job per method x dataset x shot count, in both engines
        trained = [c for c in snake if c.startswith("dear train") and "--shots " in c]
        methods = yaml.safe_load(config.read_text())["study"]["methods"]
        assert len(trained) == len(methods) * len(few["datasets"]) * len(few["shots"])
        assert any(f"--fewshot {name}/data/eurosat/fewshot-shots4-seed{{seed}}.parquet" in c for c in trained)


def test_role_variants_read_the_study_s_roles_table_in_both_engines(project):
    """`maple+roles` and the other variants are jobs of their own in both engines (a `+` in a name is no regex's
    and no DVC stage's problem), each depending on the roles table of `dear profile`, as DeAR's do."""
    config = "configs/demo-roles.yaml"
    root = yaml.safe_load((ROOT / config).read_text())["output_root"]
    snake = snakemake_graph(project, options=["--configfile", config])
    run([sys.executable, "workflow/scripts/dvc_study.py", config], project)
    assert_same_graph(snake, dvc_graph(project, f"{root}/dvc.yaml"))
    trained = {command.split("--method ")[1].split()[0]: step for command, step in snake.items()
               if command.startswith("dear train")}
    assert {"maple+roles", "promptsrc+roles", "mmrl+roles", "clip_lora+roles"} <= set(trained)
    for method in ("maple+roles", "clip_lora+roles", "dear"):
        assert any(dep.startswith(f"{root}/roles/") for dep in trained[method].deps), method
