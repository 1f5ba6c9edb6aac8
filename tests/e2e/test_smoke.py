"""The smoke study (`make smoke`): the demo at test size, current with params.yaml, planned whole, honest about itself.

The full run is `make smoke` (CI runs it on a clean clone: .ci/run); here: the config is what
`python -m dear.docs` writes from params.yaml, it passes `dear check`, Snakemake plans every stage
of every protocol for every method of the demo, each study's output root is git-ignored, and a
report of a tiny-backbone run says its numbers mean nothing and states the shots used.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pyarrow as pa
import pytest
import yaml

from dear.config.check import check_file
from dear.docs.smoke import PATH, smoke_text
from dear.runtime.io import write_parquet
from dear.config.params import load_params
from dear.stages.report import notes
from tests.engines import BIN, ROOT, engine_env, make_project


def test_the_smoke_config_is_written_from_params_yaml():
    assert (ROOT / PATH).read_text() == smoke_text(ROOT), "stale: run `python -m dear.docs`"


def test_the_smoke_study_runs_the_demo_s_methods_and_every_protocol():
    smoke, demo = (yaml.safe_load((ROOT / name).read_text()) for name in (PATH, "params.yaml"))
    from dear.docs.smoke import EXTRA_METHODS, METHODS_2026, ROLE_VARIANTS, SMOKE

    methods = ["zeroshot", *EXTRA_METHODS, *demo["study"]["methods"][1:]]  # and lpclip, ..., and the 2026 table's two
    methods[methods.index("mmrl") + 1:methods.index("mmrl") + 1] = list(METHODS_2026)
    for variant in ROLE_VARIANTS:  # ... and each `+roles` variant right after its plain method
        methods.insert(methods.index(variant.removesuffix("+roles")) + 1, variant)
    assert smoke["study"]["methods"] == methods
    sized = [key.split(".")[2:] for key in SMOKE if key.startswith("train.recipes.")]  # the tiny towers' depths, ...
    for recipe in (smoke, demo):
        for method, *path in sized:
            node = recipe["train"]["recipes"][method]
            for part in path[:-1]:
                node = node.get(part, {})
            node.pop(path[-1], None)
    assert smoke["train"] == demo["train"]  # but for the values sized for the tiny backbone (SMOKE)
    transfer = smoke["study"]["transfer"]
    assert smoke["study"]["base_to_novel"] and transfer["cross_dataset"] and transfer["domain_generalization"]
    assert smoke["model"]["arch"] == "dear-world-tiny" and smoke["output_root"] != demo["output_root"]
    assert check_file(ROOT / PATH)[1] == []


def test_the_smoke_study_covers_few_shot_learning_at_two_shot_counts():
    few = load_params(ROOT / PATH).study.few_shot_on
    assert len(few.datasets) == 1 and len(few.shots) == 2


def test_the_demo_s_few_shot_config_is_the_demo_with_its_protocol_alone_and_make_demo_fewshot_runs_it():
    from dear.docs.smoke import DEMO_FEWSHOT_PATH, EXTRA_METHODS, demo_fewshot_text
    from dear.methods import REGISTRY

    assert (ROOT / DEMO_FEWSHOT_PATH).read_text() == demo_fewshot_text(ROOT), "stale: run `python -m dear.docs`"
    few, demo = (yaml.safe_load((ROOT / name).read_text()) for name in (DEMO_FEWSHOT_PATH, "params.yaml"))
    for section in ("world", "backbone", "model", "train", "profile"):  # the demo's world and backbone
        assert few[section] == demo[section], section
    lpclip = ["zeroshot", *EXTRA_METHODS, *demo["study"]["methods"][1:]]  # the demo's methods, the linear probe, ...
    at = lpclip.index("mmrl") + 1
    assert few["study"]["methods"] == [*lpclip[:at], "mmrlpp", "tac", *lpclip[at:]]  # ... MMRL++ and TAC beside MMRL
    assert sorted(few["study"]["methods"]) == sorted(name for name, entry in REGISTRY.items()
                                                     if "few_shot" in entry.protocols and not entry.plain)  # every
    # built-in method (its `+roles` variants: the smoke study and make demo-roles)
    assert few["report"] == demo["report"]  # report.methods: the study's
    assert few["data"]["seeds"] == [1]
    assert few["study"]["few_shot"] == {"datasets": ["world_objects_sketch"], "shots": [1, 4, 16]}
    assert few["study"]["base_to_novel"] == [] and few["study"]["transfer"] is None
    assert "few_shot" not in demo["study"]  # the demo's own study stays as it is
    assert check_file(ROOT / DEMO_FEWSHOT_PATH)[1] == []
    makefile = (ROOT / "Makefile").read_text()
    assert f"--configfile {DEMO_FEWSHOT_PATH}" in makefile.partition("\ndemo-fewshot:")[2].partition("\n\n")[0]
    assert "make demo-fewshot" in (ROOT / "README.md").read_text()


def test_the_2026_demo_config_is_the_demo_with_mmrlpp_and_tac_beside_mmrl_and_make_demo_2026_runs_it():
    from dear.docs.smoke import DEMO_2026_PATH, demo_2026_text

    assert (ROOT / DEMO_2026_PATH).read_text() == demo_2026_text(ROOT), "stale: run `python -m dear.docs`"
    new, demo = (yaml.safe_load((ROOT / name).read_text()) for name in (DEMO_2026_PATH, "params.yaml"))
    methods = list(demo["study"]["methods"])
    methods[methods.index("mmrl") + 1:methods.index("mmrl") + 1] = ["mmrlpp", "tac"]
    assert new["study"] == {**demo["study"], "methods": methods} and new["report"] == demo["report"]  # the study's
    for section in ("world", "backbone", "model", "train", "profile", "evaluate"):  # the demo's, recipes included
        assert new[section] == demo[section], section
    assert new["output_root"] == "demo-2026" and check_file(ROOT / DEMO_2026_PATH)[1] == []
    makefile = (ROOT / "Makefile").read_text()
    assert f"--configfile {DEMO_2026_PATH}" in makefile.partition("\ndemo-2026:")[2].partition("\n\n")[0]
    assert "make demo-2026" in (ROOT / "README.md").read_text()


def test_the_roles_demo_config_runs_each_baseline_beside_its_variant_and_make_demo_roles_runs_it():
    from dear.docs.smoke import DEMO_ROLES_PATH, ROLE_VARIANTS, demo_roles_text
    from dear.methods import entry

    assert (ROOT / DEMO_ROLES_PATH).read_text() == demo_roles_text(ROOT), "stale: run `python -m dear.docs`"
    new, demo = (yaml.safe_load((ROOT / name).read_text()) for name in (DEMO_ROLES_PATH, "params.yaml"))
    methods = new["study"]["methods"]
    for variant in ROLE_VARIANTS:
        assert methods[methods.index(variant) - 1] == entry(variant).plain
    assert {"zeroshot", "dear"} <= set(methods)
    assert {**new["study"], "methods": demo["study"]["methods"]} == demo["study"]  # the demo's protocols
    for section in ("world", "backbone", "model", "train", "profile", "evaluate", "report"):  # recipes, roles
        assert new[section] == demo[section], section
    assert new["output_root"] == "demo-roles" and check_file(ROOT / DEMO_ROLES_PATH)[1] == []
    makefile = (ROOT / "Makefile").read_text()
    assert f"--configfile {DEMO_ROLES_PATH}" in makefile.partition("\ndemo-roles:")[2].partition("\n\n")[0]


def test_every_config_s_output_root_but_the_demo_s_is_git_ignored():
    for config in sorted((ROOT / "configs").glob("*.yaml")):
        root = yaml.safe_load(config.read_text())["output_root"]
        probe = f"{root}/report/results.md"
        ignored = subprocess.run(["git", "check-ignore", "-q", probe], cwd=ROOT).returncode == 0
        assert ignored, f"{probe} ({config.name}'s output) is not git-ignored: add /{root}/ to .gitignore"


def test_make_smoke_runs_the_smoke_config_and_the_readme_names_it_beside_make_demo():
    makefile = (ROOT / "Makefile").read_text()
    assert f"--configfile {PATH}" in makefile.partition("\nsmoke:")[2].partition("\n\n")[0]
    readme = (ROOT / "README.md").read_text()
    assert "make smoke" in readme.partition("## Three commands")[2].partition("\n## ")[0]


@pytest.mark.slow
def test_snakemake_plans_every_stage_of_every_protocol_of_the_smoke_study(tmp_path):
    project = make_project(tmp_path / "project", (ROOT / "params.yaml").read_text())
    result = subprocess.run([str(BIN / "snakemake"), "-n", "--cores", "2", "--configfile", PATH], cwd=project,
                            env=engine_env(), capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    counts = {}
    for line in result.stdout.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[1].isdigit():
            counts[parts[0]] = int(parts[1])
    methods = len(load_params(ROOT / PATH).study.methods)
    assert {rule: counts.get(rule) for rule in ("world", "backbone", "prepare", "profile", "report")} == \
        {"world": 1, "backbone": 1, "prepare": 3, "profile": 1, "report": 1}
    for rule in ("train", "fuse", "evaluate", "train_transfer", "fuse_transfer", "evaluate_transfer", "collect"):
        assert counts.get(rule) == methods, (rule, counts)
    for rule in ("train_fewshot", "fuse_fewshot", "evaluate_fewshot"):  # one dataset, two shot counts
        assert counts.get(rule) == 2 * methods, (rule, counts)


def _train_log(path: Path, shots: list[int]) -> Path:
    path.parent.mkdir(parents=True)
    table = pa.table({"step": pa.array([0], pa.int64()), "loss": pa.array([1.0], pa.float64())})
    write_parquet(path, table, table.schema, {"shots_per_class": shots})
    return path


def test_a_smoke_report_says_its_numbers_mean_nothing_and_every_report_states_the_shots_used(tmp_path):
    smoke, demo = load_params(ROOT / PATH), load_params(ROOT / "params.yaml")
    logs = [_train_log(tmp_path / "a/train_log.parquet", [2, 2]), _train_log(tmp_path / "b/train_log.parquet", [2, 2])]
    said = notes(smoke, logs)
    assert said[0].startswith("**These numbers mean nothing.** This run used `dear-world-tiny`")
    assert said[1] == "Training shots per class: 2 (data.shots: 2)."
    fewer = notes(demo, [_train_log(tmp_path / "c/train_log.parquet", [4, 16]), *logs])
    assert fewer == ["Training shots per class: 2-16 (data.shots: 16); fewer where a dataset has fewer training "
                     "images of a class, so this is not a 16-shot study."]
