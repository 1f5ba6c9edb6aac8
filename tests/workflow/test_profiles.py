"""The Snakemake profiles: local plans the study; Slurm asks for GPUs where needed and grows with `attempt`.

Runs on the real Slurm are in tests/cluster (`make test-cluster`).
"""

import pytest
import yaml

from tests.engines import BIN, ROOT, make_project, run

PROFILES = ROOT / "workflow" / "profiles"
GPU_STAGES = {"backbone", "profile", "train", "train_transfer", "train_fewshot", "fuse", "fuse_transfer",
              "fuse_fewshot", "evaluate", "evaluate_transfer", "evaluate_fewshot"}
LOCAL_RULES = {"all"}  # rules without a command: Snakemake runs them itself


def load(name: str) -> dict:
    return yaml.safe_load((PROFILES / name / "config.yaml").read_text())


def evaluate(expression, attempt: int) -> int:
    return eval(str(expression), {"attempt": attempt})  # the expressions Snakemake evaluates per attempt


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    return make_project(tmp_path_factory.mktemp("profiles") / "project", (ROOT / "params.yaml").read_text())


def test_local_profile_plans_the_study(project):
    result = run([str(BIN / "snakemake"), "--profile", "workflow/profiles/local", "--dry-run"], project)
    assert "Job stats:" in result.stdout


def test_both_profiles_give_exactly_the_gpu_stages_a_gpu():
    for name in ("local", "slurm"):
        with_gpu = {rule for rule, res in load(name)["set-resources"].items() if res.get("gpu")}
        assert with_gpu == GPU_STAGES, name
        assert all(load(name)["set-resources"][rule]["gpu"] == 1 for rule in GPU_STAGES)


def test_slurm_profile_retries_with_more_memory_and_time_and_hard_codes_no_placement():
    profile = load("slurm")
    assert profile["executor"] == "slurm" and profile["retries"] >= 1
    assert "default-resources" not in profile, "--default-resources slurm_partition=... would silently replace it"
    for rule, resources in profile["set-resources"].items():
        for key in ("mem_mb", "runtime"):
            assert evaluate(resources[key], 2) == 2 * evaluate(resources[key], 1) > 0, rule
        assert not {"slurm_partition", "slurm_account"} & set(resources), "placement belongs to the command line"


def test_every_rule_that_runs_a_command_has_slurm_resources(project):
    # the smoke config: every protocol on, few-shot learning too, so every rule exists
    listing = run([str(BIN / "snakemake"), "--list-rules", "--configfile", "configs/smoke.yaml"], project).stdout
    rules = {line.split()[0] for line in listing.splitlines() if line.strip()} - LOCAL_RULES
    missing = rules - set(load("slurm")["set-resources"])
    assert not missing, f"add {sorted(missing)} to set-resources of workflow/profiles/slurm/config.yaml"
