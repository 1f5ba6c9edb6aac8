"""Both engines run the real graph at test size, and a second run does nothing.

Snakemake runs the whole study (world to report) on a mini study; DVC runs the
world + prepare fan-out. The same inputs give byte-identical manifests whichever
engine made them, a tree either engine built is handed to the other without a
rerun (docs/engines.md), and planning another config leaves the tree alone.
"""

import glob
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests import tiny_study
from tests.engines import BIN, ROOT, dvc_ran, engine_env, handed_to_dvc, make_project, run, snakemake_planned
from tests.wall_clock import comparable, digests_wall_clock

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("pipeline")]


def out_of_date(output: str) -> list[str]:
    return [line.removeprefix("out of date: ") for line in output.splitlines() if line.startswith("out of date: ")]


def mini_study() -> str:
    raw = tiny_study.params()
    raw["data"]["seeds"] = [1]
    raw["data"]["datasets"] = ["world_objects", "world_objects_b", "world_objects_sketch"]
    raw["study"]["methods"] = ["zeroshot", "dear", "maple"]
    raw["train"]["recipes"].setdefault("maple", {})["prompt_depth"] = 2  # the tiny towers' 2 layers
    raw["study"]["base_to_novel"] = ["world_objects"]
    return yaml.safe_dump(raw, sort_keys=False)


@pytest.fixture(scope="module")
def snakemake_project(tmp_path_factory) -> Path:
    project = make_project(tmp_path_factory.mktemp("snakemake") / "project", mini_study())
    run([str(BIN / "snakemake"), "--cores", "2"], project, timeout=900)
    return project


@pytest.fixture(scope="module")
def dvc_project(tmp_path_factory) -> Path:
    project = make_project(tmp_path_factory.mktemp("dvc") / "project", mini_study())
    run([str(BIN / "dvc"), "repro", "prepare"], project, timeout=900)
    return project


def test_snakemake_runs_the_study_and_then_has_nothing_to_do(snakemake_project):
    results = (snakemake_project / "report/results.md").read_text()
    assert "## Base-to-novel" in results and "### world_objects" in results and "| dear |" in results
    assert "## Paired differences" in results and "### Each stream's own accuracy" in results
    assert (snakemake_project / "transfer/dear/eval/seed1/eval.parquet").is_file()
    assert (snakemake_project / "logs/train/dear/world_objects.benchmark.tsv").is_file()  # Snakemake's benchmark:
    again = run([str(BIN / "snakemake"), "--cores", "2"], snakemake_project)
    assert "Nothing to be done" in again.stdout + again.stderr


def test_dvc_runs_the_prepare_fan_out_and_then_has_nothing_to_do(dvc_project):
    for name in yaml.safe_load((dvc_project / "params.yaml").read_text())["data"]["datasets"]:
        assert (dvc_project / f"data/{name}/fewshot-seed1.parquet").is_file()
        # DVC records no time or memory: dear wrote the file Snakemake's benchmark: would have, beside the log
        header = (dvc_project / f"logs/prepare/{name}.benchmark.tsv").read_text().splitlines()[0]
        assert header.startswith("s\th:m:s\tmax_rss\t")
    again = run([str(BIN / "dvc"), "repro", "prepare"], dvc_project)
    assert "didn't change, skipping" in again.stdout and dvc_ran(again.stdout) == {"check"}


def test_both_engines_make_byte_identical_manifests(snakemake_project, dvc_project):
    for manifest in sorted((dvc_project / "data").glob("*/manifest.parquet")):
        twin = snakemake_project / manifest.relative_to(dvc_project)
        assert twin.read_bytes() == manifest.read_bytes(), manifest.parent.name


def _files(project: Path) -> dict[str, tuple[int, int]]:
    """(size, mtime) of every file of the study (the engines' own state folders aside)."""
    return {str(path.relative_to(project)): (path.stat().st_size, path.stat().st_mtime_ns)
            for path in project.rglob("*") if path.is_file() and not {".snakemake", ".dvc"} & set(path.parts)}


def test_planning_another_config_leaves_the_demo_tree_untouched(snakemake_project):
    before = _files(snakemake_project)
    run([str(BIN / "snakemake"), "-n", "--cores", "1", "--configfile", "configs/paper-vitb16.yaml"], snakemake_project)
    after = _files(snakemake_project)
    # the other config's planner writes its jobs' code and values files under its own root, nothing else
    assert {path for path in after if not path.startswith("paper-vitb16/.dear/")} == set(before), \
        sorted(set(after) ^ set(before))[:5]
    assert {path: after[path] for path in before} == before
    again = run([str(BIN / "snakemake"), "-n", "--cores", "1"], snakemake_project)
    assert "Nothing to be done" in again.stdout + again.stderr


def test_a_changed_section_reruns_its_readers_only_and_a_copied_config_nothing(snakemake_project):
    copy = snakemake_project / "copy.yaml"
    shutil.copy2(snakemake_project / "params.yaml", copy)
    same = run([str(BIN / "snakemake"), "-n", "--cores", "1", "--configfile", copy.name], snakemake_project)
    assert "Nothing to be done" in same.stdout + same.stderr
    (snakemake_project / "overlay.yaml").write_text("report:\n  decimals: 3\n")
    changed = run([str(BIN / "snakemake"), "-n", "--cores", "1", "--configfile", copy.name, "overlay.yaml"],
                  snakemake_project)
    planned = {line.split()[1].rstrip(":") for line in changed.stdout.splitlines() if line.startswith("rule ")}
    assert planned - {"all"} == {"report"}, planned


def test_a_tree_snakemake_built_goes_to_dvc_and_back_without_a_rerun(snakemake_project, tmp_path):
    tree = handed_to_dvc(snakemake_project, tmp_path / "tree")
    repro = run([str(BIN / "dvc"), "repro"], tree)
    assert dvc_ran(repro.stdout) == {"check"}, repro.stdout[-3000:]  # DVC's check stage runs every time
    back = run([str(BIN / "snakemake"), "-n", "--cores", "1"], tree)
    assert "Nothing to be done" in back.stdout + back.stderr, back.stdout[-3000:]


def test_a_tree_dvc_built_goes_to_snakemake_and_back_without_a_rerun(dvc_project):
    datasets = yaml.safe_load((dvc_project / "params.yaml").read_text())["data"]["datasets"]
    targets = [f"data/{name}" for name in datasets]  # prepare's folders
    snakemake = [str(BIN / "snakemake"), "--cores", "1", *targets]
    plan = run([*snakemake, "-n"], dvc_project)
    assert "Nothing to be done" in plan.stdout + plan.stderr, plan.stdout[-3000:]
    run([*snakemake, "--touch", "--forceall"], dvc_project)  # the hand-over: Snakemake records its metadata
    again = run([*snakemake, "-n"], dvc_project)
    assert "Nothing to be done" in again.stdout + again.stderr
    repro = run([str(BIN / "dvc"), "repro", "prepare"], dvc_project)
    assert dvc_ran(repro.stdout) == {"check"}


def test_before_training_every_method_scores_zero_shot_on_the_embedded_sets(snakemake_project):
    """scripts/at_init.py on the study's tree: each method after 0 epochs, fused and evaluated by the stages."""
    out = run([sys.executable, str(ROOT / "scripts/at_init.py"), "--root", ".",
               "--datasets", "world_objects,world_objects_sketch"], snakemake_project).stdout
    rows = [line.strip("| ").split(" | ") for line in out.splitlines() if line.startswith("| world_")]
    gaps = {(row[0], row[1]): float(row[4]) for row in rows if row[1] != "zeroshot"}
    assert len(gaps) == 8 and all(abs(gap) <= 1.0 for gap in gaps.values()), out


def test_validate_profile_shows_where_each_concept_enters_the_embedding(snakemake_project):
    """scripts/validate_profile.py --components on the study's tree: a row per layer's heads and MLP, whole tower."""
    out = run([sys.executable, str(ROOT / "scripts/validate_profile.py"), "--backbone", "backbone", "--world",
               "world", "--roles", "roles/world_objects/roles.parquet", "--split", "val", "--max-images", "40",
               "--random-sets", "2", "--components"], snakemake_project).stdout
    terms = [line.split(" | ")[0].strip("| ") for line in out.split("Each term of the embedding")[1].splitlines()
             if line.startswith("| ") and not line.startswith("| term") and not line.startswith("| ---")]
    depth = json.loads((snakemake_project / "backbone/card.json").read_text())["model_config"]["vision_cfg"]["layers"]
    assert terms == ["embeddings (entering layer 1)"] + [f"L{i} {part}" for i in range(1, depth + 1)
                                                          for part in ("heads", "MLP")], out


# --- provenance-checked caching: both engines rerun what was made otherwise than the config says -------

COLLECTS = {f"collect@{method}" for method in ("zeroshot", "dear", "maple")}
DOWNSTREAM_OF_BACKBONE = {"backbone", "profile", "report", *COLLECTS,
                          *(f"{stage}@{method}-world_objects" for stage in ("train", "fuse", "evaluate")
                            for method in ("zeroshot", "dear", "maple")),
                          *(f"{stage}_transfer@{method}" for stage in ("train", "fuse", "evaluate")
                            for method in ("zeroshot", "dear", "maple"))}
READERS_OF_DEAR_LR = {"train@dear-world_objects", "fuse@dear-world_objects", "evaluate@dear-world_objects",
                      "train_transfer@dear", "fuse_transfer@dear", "evaluate_transfer@dear", "collect@dear", "report"}


def dvc_plans(snakemake_plans: set[str]) -> set[str]:
    """What DVC's dry run plans where Snakemake plans `snakemake_plans`: every method's collect where some run is
    out of date (DVC's collect reads runs/ and transfer/ whole: folders a fresh clone has, dvc.yaml), and not the
    report, whose input (results/) changes only once a collect has rerun (a real `dvc repro` reruns it then)."""
    runs = {job for job in snakemake_plans if job.split("@")[0] in ("train", "fuse", "evaluate", "train_transfer",
                                                                    "fuse_transfer", "evaluate_transfer")}
    return (snakemake_plans | (COLLECTS if runs else set())) - {"report"}


def hand_made_backbone(tree: Path) -> None:
    """A quick try as docs/stages.md invites: the backbone remade by hand with fewer steps."""
    run(["dear", "backbone", "--params", "params.yaml", "--world", "world", "--out", "backbone",
         "--set", "backbone.steps=20"], tree)


def with_recipe_lr(tree: Path, recipe: str, lr: float) -> None:
    params = tree / "params.yaml"
    raw = yaml.safe_load(params.read_text())
    raw["train"]["recipes"].setdefault(recipe, {})["lr"] = lr
    params.write_text(yaml.safe_dump(raw, sort_keys=False))


def test_snakemake_reruns_a_hand_made_backbone_and_everything_downstream_and_says_why(snakemake_project, tmp_path):
    tree = tmp_path / "tree"
    shutil.copytree(snakemake_project, tree, symlinks=True)
    hand_made_backbone(tree)
    plan = run([str(BIN / "snakemake"), "-n", "--cores", "1"], tree)
    assert snakemake_planned(plan.stdout) == DOWNSTREAM_OF_BACKBONE, plan.stdout[-3000:]
    lines = out_of_date(plan.stdout + plan.stderr)
    assert "backbone: backbone.steps 20 -> 60" in lines
    assert "train@dear-world_objects: its input backbone/card.json changed" in lines  # its card: the old one


def test_snakemake_reruns_a_hand_made_training_run_and_what_reads_it(snakemake_project, tmp_path):
    tree = tmp_path / "tree"
    shutil.copytree(snakemake_project, tree, symlinks=True)
    run(["dear", "train", "--params", "params.yaml", "--method", "dear", "--dataset", "world_objects", "--classes",
         "base", "--backbone", "backbone", "--fewshot", "data/world_objects/fewshot-seed{seed}.parquet", "--roles",
         "roles/world_objects/roles.parquet", "--out", "runs/dear/world_objects/train/seed{seed}",
         "--set", "train.recipes.dear.lr=5.0e-3"], tree)
    plan = run([str(BIN / "snakemake"), "-n", "--cores", "1"], tree)
    assert snakemake_planned(plan.stdout) == {"train@dear-world_objects", "fuse@dear-world_objects",
                                              "evaluate@dear-world_objects", "collect@dear", "report"}, \
        plan.stdout[-3000:]
    lines = out_of_date(plan.stdout + plan.stderr)
    assert "train@dear-world_objects: train.recipes.dear.lr 0.005 -> (not set)" in lines
    assert "fuse@dear-world_objects: its input runs/dear/world_objects/train/seed1/model.pt changed" in lines
    assert not [line for line in lines if "zeroshot" in line]


def test_a_changed_key_reruns_only_the_jobs_that_read_it_in_both_engines_naming_it(snakemake_project, tmp_path):
    """Raising DeAR's learning rate (train.recipes.dear.lr): zeroshot never reads it, dear does (both protocols)."""
    tree = handed_to_dvc(snakemake_project, tmp_path / "tree")
    with_recipe_lr(tree, "dear", 2.0e-3)
    plan = run([str(BIN / "snakemake"), "-n", "--cores", "1"], tree)
    assert snakemake_planned(plan.stdout) == READERS_OF_DEAR_LR, plan.stdout[-3000:]
    lines = ["train@dear-world_objects: train.recipes.dear.lr (not set) -> 0.002",
             "train_transfer@dear: train.recipes.dear.lr (not set) -> 0.002"]
    assert sorted(out_of_date(plan.stdout + plan.stderr)) == lines

    check = run([str(BIN / "dvc"), "repro", "check"], tree)  # what `dvc repro` runs first
    assert out_of_date(check.stdout + check.stderr) == lines
    status = run([str(BIN / "dvc"), "status"], tree).stdout
    changed = re.findall(r"^(\S+):\n\tchanged deps:\n\t\t\.dear/jobs/\S+:\n\t\t\t(?:new|modified):\s+(\S+)$", status,
                         re.M)
    assert changed == [("train@dear-world_objects", "train.recipes.dear.lr"),
                       ("train_transfer@dear", "train.recipes.dear.lr")], status
    dry = run([str(BIN / "dvc"), "repro", "--dry"], tree).stdout
    assert dvc_ran(dry) == dvc_plans(READERS_OF_DEAR_LR) | {"check"}, dry[-3000:]


def test_dvc_plans_a_hand_made_backbone_and_everything_downstream_and_says_why(snakemake_project, tmp_path):
    tree = handed_to_dvc(snakemake_project, tmp_path / "tree")
    hand_made_backbone(tree)
    status = run([str(BIN / "dvc"), "status"], tree).stdout
    assert "backbone:\n\tchanged outs:\n\t\tmodified:           backbone" in status, status
    # every stage reading the backbone's digest; collect reads runs/ and transfer/, changed once they rerun
    assert set(re.findall(r"^(\S+):$", status, re.M)) == DOWNSTREAM_OF_BACKBONE - {"report", *COLLECTS} | {"check"}, \
        status
    check = run([str(BIN / "dvc"), "repro", "check"], tree)
    assert out_of_date(check.stdout + check.stderr)[0] == "backbone: backbone.steps 20 -> 60"
    assert dvc_ran(run([str(BIN / "dvc"), "repro", "--dry"], tree).stdout) == dvc_plans(DOWNSTREAM_OF_BACKBONE) | {"check"}


def test_dvc_reruns_a_foreign_output_it_was_told_to_accept(snakemake_project, tmp_path):
    """`dvc commit -f` of a hand-made backbone records it as up to date; the check stage still finds it."""
    tree = handed_to_dvc(snakemake_project, tmp_path / "tree")
    hand_made_backbone(tree)
    run([str(BIN / "dvc"), "commit", "-f"], tree)
    assert dvc_ran(run([str(BIN / "dvc"), "repro", "--dry"], tree).stdout) == {"check"}  # DVC alone: up to date
    check = run([str(BIN / "dvc"), "repro", "check"], tree)
    assert out_of_date(check.stdout + check.stderr)[0] == "backbone: backbone.steps 20 -> 60"
    assert dvc_ran(run([str(BIN / "dvc"), "repro", "--dry"], tree).stdout) == dvc_plans(DOWNSTREAM_OF_BACKBONE) | {"check"}


# --- the grain of code provenance: a job reruns when the modules it runs change, and only then ----------

EVERY_JOB = DOWNSTREAM_OF_BACKBONE | {"world", *(f"prepare@{name}" for name in
                                                ("world_objects", "world_objects_b", "world_objects_sketch"))}
TRAINED = {job for job in DOWNSTREAM_OF_BACKBONE if job.split("@")[0] in
           ("train", "fuse", "evaluate", "train_transfer", "fuse_transfer", "evaluate_transfer", "collect")} | {"report"}
MAPLE = {"train@maple-world_objects", "fuse@maple-world_objects", "evaluate@maple-world_objects",
         "train_transfer@maple", "fuse_transfer@maple", "evaluate_transfer@maple", "collect@maple", "report"}


def replace(tree: Path, module: str, old: str, new: str) -> None:
    """Edit the tree's copy of the package (the real tree is never touched)."""
    path = tree / "dear" / module
    text = path.read_text()
    assert old in text, f"{module}: {old!r} not found"
    path.write_text(text.replace(old, new, 1))


def add_a_method_and_a_dataset(tree: Path) -> None:
    methods = tree / "dear/methods"
    (methods / "newmethod.py").write_text((methods / "kgcoop.py").read_text().replace('"kgcoop"', '"newmethod"'))
    (methods / "recipes/newmethod.yaml").write_text((methods / "recipes/kgcoop.yaml").read_text())
    replace(tree, "methods/__init__.py", "REGISTRY: dict[str, Entry] = {\n",
            'REGISTRY: dict[str, Entry] = {\n    "newmethod": Entry("newmethod", "newmethod", "a new method"),\n')
    replace(tree, "data/coop.py", "SPECS: dict[str, DatasetSpec] = {\n",
            'SPECS: dict[str, DatasetSpec] = {\n    "new_dataset": _json("new", "images", "split_new.json", "new", 10),\n')


def edit_comments_docstrings_and_help(tree: Path) -> None:
    for module in ("train/trainer.py", "methods/maple.py", "stages/world.py", "data/coop.py", "runtime/io.py"):
        path = tree / "dear" / module
        text = path.read_text()
        body = text.split('"""', 2)  # the module's docstring, then a comment on every def
        path.write_text(f'{body[0]}"""A docstring said otherwise.\n\n{body[1]}"""{body[2]}'.replace(
            "\ndef ", "\n# a comment\ndef "))
    replace(tree, "stages/world.py", "def run(params: Params, inputs: Inputs, outputs: Outputs) -> None:\n",
            'def run(params: Params, inputs: Inputs, outputs: Outputs) -> None:\n    """A new docstring."""\n')
    replace(tree, "config/params.py", 'description="L-BFGS iterations', 'description="the L-BFGS iterations')


MAPLE_LINE = "train@maple-world_objects: the code of `dear train` changed: dear/methods/maple.py"
TRAINER_LINE = "train@zeroshot-world_objects: the code of `dear train` changed: dear/train/trainer.py"
WORLD_LINE = "world: the code of `dear world` changed: dear/stages/world.py"
# a new world: the dry run plans what reads the world's digest, which collect and the report do not
WORLD_UNREAD = {"report", *COLLECTS}
GRAIN = {  # what changes: (the edit, the jobs both engines rerun, a line Snakemake's plan prints)
    # (DVC's dry run plans every method's collect where some run is out of date, and not the report:
    # `dvc_plans`; a real `dvc repro` reruns what reads an output once that output changed)
    "a new method module and a new dataset entry": (add_a_method_and_a_dataset, set(), None),
    "comments, docstrings and help texts": (edit_comments_docstrings_and_help, set(), None),
    "one line of MaPLe's model": (lambda tree: replace(tree, "methods/maple.py", "return 0  # the coupled",
                                                       "return int(0)  # the coupled"), MAPLE, MAPLE_LINE),
    "one line of the trainer": (lambda tree: replace(tree, "train/trainer.py", "return 1.0 if fade_steps == 0",
                                                     "return float(1.0) if fade_steps == 0"), TRAINED, TRAINER_LINE),
    "one line of the world stage": (lambda tree: replace(tree, "stages/world.py", "world_data.check(world)\n",
                                                         "world_data.check(world)\n    world = world\n"), EVERY_JOB,
                                    WORLD_LINE),
}


def planned_with(tree: Path, command: list[str]) -> str:
    """`command` run in `tree` with the tree's own copy of the package first on the path (its code is planned)."""
    result = subprocess.run(command, cwd=tree, env=dict(engine_env(), PYTHONPATH=str(tree)), capture_output=True,
                            text=True, timeout=600)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return result.stdout + result.stderr


@pytest.mark.parametrize("change", list(GRAIN))
def test_a_code_change_reruns_exactly_the_jobs_that_run_it_in_both_engines(snakemake_project, tmp_path, change):
    """Both engines read the same code files (.dear/code/): a change replans the jobs whose modules it touched
    (and what reads their outputs), and a change no job runs replans nothing."""
    edit, expected, line = GRAIN[change]
    tree = handed_to_dvc(snakemake_project, tmp_path / "tree")
    edit(tree)
    plan = planned_with(tree, [str(BIN / "snakemake"), "-n", "--cores", "1"])
    assert snakemake_planned(plan) == expected, plan[-3000:]
    assert line in out_of_date(plan) if line else "Nothing to be done" in plan, plan[-3000:]
    planned_with(tree, [str(BIN / "dvc"), "repro", "check"])  # writes the code files DVC reads, as `dvc repro` does
    dry = planned_with(tree, [str(BIN / "dvc"), "repro", "--dry"])
    assert dvc_ran(dry) == dvc_plans(expected) - (WORLD_UNREAD if line == WORLD_LINE else set()) | {"check"}, \
        dry[-3000:]


RECORDER = """
import json, sys
from pathlib import Path

import dear.cli as cli

package, ran, out = str(Path(cli.__file__).parent), set(), Path(sys.argv[1])


def record(frame, event, arg):  # (the command's function importing the stage, its log handler: not the stage's)
    if event == "call" and frame.f_code.co_filename.startswith(package) and frame.f_code not in DRIVER:
        ran.add(frame.f_code.co_filename[len(package) - 4:])


def watched(call):
    def inner(*args, **kwargs):
        sys.setprofile(record)
        try:
            return call(*args, **kwargs)
        finally:
            sys.setprofile(None)
            out.write_text(json.dumps(sorted(ran)))
    return inner


def import_stage(name, original=cli._import_stage):
    stage = watched(original)(name)
    stage.run = watched(stage.run)
    return stage


DRIVER = {cli._import_stage.__code__, *(f.__code__ for f in (cli._Stderr.stream.fget, cli._Stderr.stream.fset) if f)}
cli._import_stage = import_stage
sys.argv = ["dear", *sys.argv[2:]]
cli.main()
"""
WATCHED = {"world": "world", "backbone": "backbone", "prepare": "prepare@world_objects", "profile": "profile",
           "train": "train@maple-world_objects", "fuse": "fuse@maple-world_objects",
           "evaluate": "evaluate@maple-world_objects", "collect": "collect@maple", "report": "report"}


def test_every_module_a_stage_runs_is_in_its_code(snakemake_project, tmp_path):
    """Each stage run for real, profiled from its import to the end of its `run`: every package file whose code
    ran is in the job's code (dear.pipeline.jobs.code), but the params schema, whose values each output records."""
    from dear.pipeline import codegraph, jobs
    from dear.config.params import load_params

    tree = tmp_path / "tree"
    shutil.copytree(snakemake_project, tree, symlinks=True)
    (tree / "recorder.py").write_text(RECORDER)
    study = {job.name: job for job in jobs.jobs(load_params(tree / "params.yaml"))}
    commands = {}
    for block in run([str(BIN / "snakemake"), "-n", "-p", "-F", "--cores", "1"], tree).stdout.split("\nrule ")[1:]:
        rule = block.split(":", 1)[0].strip()
        found = re.search(r"wildcards: (.*)", block)
        items = dict(item.split("=", 1) for item in found.group(1).split(", ")) if found else {}
        name = rule + (f"@{'-'.join(items[key] for key in ('method', 'dataset') if key in items)}" if items else "")
        shell = re.search(r"Shell command: (dear \w+ .*)", block)
        if name in WATCHED.values() and shell:
            commands[name] = shell.group(1).split()
    values = {f"{module.replace('.', '/')}.py" for module in codegraph.VALUES}  # dear/config/params.py
    for stage, name in WATCHED.items():
        record = tmp_path / f"{stage}.json"
        words = [match for word in commands[name][1:]  # the shell's globs (the report's), a literal where none match
                 for match in (sorted(glob.glob(word, root_dir=tree)) if "*" in word else []) or [word]]
        run([sys.executable, "recorder.py", str(record), *words], tree, timeout=600)
        ran = set(json.loads(record.read_text()))
        assert f"dear/stages/{stage}.py" in ran, (stage, sorted(ran))
        missing = ran - set(jobs.job_code(study[name]).files) - values
        assert not missing, f"{name} ran {sorted(missing)}, which its code (dear.pipeline.jobs.code) does not list"


# --- experiments that compare -------------------------------------------------------------------------

def test_dvc_experiments_show_and_compare_metrics_and_plots_of_main_and_each_experiment(snakemake_project, tmp_path):
    """Two experiments on the study's tree (in git, handed to DVC): every revision has its metrics and plots."""
    tree = tmp_path / "tree"
    shutil.copytree(snakemake_project, tree, symlinks=True)
    shutil.copy2(ROOT / ".gitignore", tree / ".gitignore")
    shutil.rmtree(tree / ".dvc")
    git = ["git", "-c", "user.name=test", "-c", "user.email=test@example.org"]
    for command in (["git", "init", "-q", "-b", "main"], [str(BIN / "dvc"), "init", "-q"],
                    [str(BIN / "dvc"), "config", "core.analytics", "false"], [str(BIN / "dvc"), "repro", "check"],
                    [str(BIN / "dvc"), "commit", "-f"], ["git", "add", "-A"], [*git, "commit", "-qm", "the study"]):
        run(command, tree)
    dvc = lambda *args: run([str(BIN / "dvc"), *args], tree).stdout  # noqa: E731
    dvc("exp", "run", "-n", "three-decimals", "-S", "report.decimals=3")
    dvc("exp", "run", "-n", "no-domains", "-S", "report.decimals=2", "-S", "study.transfer.domain_generalization=[]")

    shown = json.loads(dvc("exp", "show", "--json"))
    revisions = {entry.get("name") or entry["rev"]: entry for entry in shown}
    revisions.update({rev["name"]: rev for entry in shown for exp in entry.get("experiments") or []
                      for rev in exp["revs"]})
    assert set(revisions) == {"workspace", "main", "three-decimals", "no-domains"}, set(revisions)
    for name, entry in revisions.items():
        metrics = entry["data"]["metrics"]["report/metrics.json"]["data"]
        assert metrics["base_to_novel"]["dear"]["hm"] is not None, name
    assert "domain_generalization" not in revisions["no-domains"]["data"]["metrics"]["report/metrics.json"]["data"]

    changed = json.loads(dvc("exp", "diff", "three-decimals", "no-domains", "--json"))
    assert any(key.startswith("domain_generalization.dear.") for key in changed["metrics"]["report/metrics.json"])
    assert changed["params"]["params.yaml"]["report.decimals"] == {"old": 3, "new": 2, "diff": -1}
    assert "domain_generalization.dear.world_objects.average" in dvc("metrics", "diff", "main", "no-domains")
    plots = json.loads(dvc("plots", "diff", "main", "three-decimals", "no-domains", "--json"))["data"]
    assert plots["hm"][0]["revisions"] == ["main", "three-decimals", "no-domains"]


def test_a_job_through_the_warm_server_writes_the_bytes_it_writes_without_it(snakemake_project, tmp_path):
    """The study above ran its jobs through warm servers (tests/conftest.py leaves them on, as a user has them); the
    same chain for dear on world_objects, run with DEAR_SERVER=off (every job its own process), writes the same bytes:
    world, backbone, data, roles, the trained models, their fusion and evaluation (dear/server/)."""
    plain = make_project(tmp_path / "plain", (snakemake_project / "params.yaml").read_text())
    target = "runs/dear/world_objects/eval"
    run([str(BIN / "snakemake"), "--cores", "2", target], plain, timeout=900, env={"DEAR_SERVER": "off"})
    compared = 0
    for folder in ("world", "backbone", "data/world_objects", "roles/world_objects", "runs/dear/world_objects"):
        for path in sorted((plain / folder).rglob("*")):
            if path.is_file() and not path.is_symlink() and not digests_wall_clock(path):
                twin = snakemake_project / path.relative_to(plain)
                assert comparable(twin) == comparable(path), path.relative_to(plain)
                compared += 1
    assert compared >= 10
    # the served jobs recorded their own processes beside Snakemake's benchmark of their client
    from dear.pipeline.runrecord import read_benchmarks

    served = read_benchmarks(snakemake_project / "logs").set_index("job").loc["train/dear/world_objects"]
    assert (snakemake_project / "logs/train/dear/world_objects.served.tsv").is_file()
    assert not (plain / "logs/train/dear/world_objects.served.tsv").exists()
    assert served.max_rss_mb > 100  # torch and the model: a job's tree, not a 20 MB client
