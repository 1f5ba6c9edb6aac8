"""A tiny study of the four `+roles` variants beside their plain methods, run whole through Snakemake.

Every protocol (base-to-novel, cross-dataset and domain generalization, few-shot at one shot count), one seed: each
variant trains with the study's roles table, records it in its recipe, and the report pairs it with its plain
method in "What the roles change" and its figure.
"""

from pathlib import Path

import pytest
import yaml

from dear.methods.trained import read_trained
from tests import tiny_study
from tests.engines import BIN, make_project, run
from tests.fake_run import tiny_depths

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("pipeline")]

VARIANTS = ["maple+roles", "promptsrc+roles", "mmrl+roles", "clip_lora+roles"]


def role_study() -> str:
    raw = tiny_study.params()
    raw["data"].update(seeds=[1], datasets=["world_objects", "world_objects_b", "world_objects_sketch"])
    raw["study"]["methods"] = ["zeroshot", *(name for variant in VARIANTS
                                             for name in (variant.removesuffix("+roles"), variant))]
    raw["study"]["base_to_novel"] = ["world_objects"]
    raw["study"]["few_shot"] = {"datasets": ["world_objects"], "shots": [1]}
    raw["report"].update(methods=None, compare=None)
    tiny_depths(raw["train"])
    raw["train"]["recipes"]["clip_lora"] = {"iterations_per_shot": 4}
    return yaml.safe_dump(raw, sort_keys=False)


@pytest.fixture(scope="module")
def project(tmp_path_factory) -> Path:
    project = make_project(tmp_path_factory.mktemp("roles") / "project", role_study())
    run([str(BIN / "snakemake"), "--cores", "2"], project, timeout=1800)
    return project


def test_every_variant_runs_every_protocol_and_the_report_says_what_the_roles_change(project):
    results = (project / "report/results.md").read_text()
    changes = results.split("## What the roles change")[1].split("\n## ")[0]
    for variant in VARIANTS:
        pair = f"| {variant} − {variant.removesuffix('+roles')} |"
        assert pair in changes.split("Transfer and few-shot")[0], variant  # base-to-novel ΔBase, ΔNovel, ΔHM
        transfer = changes.split("Transfer and few-shot")[1]
        for protocol in ("Cross-dataset from world_objects", "Domain generalization from world_objects", "few-shot"):
            assert any(line.startswith(pair) and protocol in line
                       for line in transfer.splitlines()), (variant, protocol)
    assert (project / "report/roles_change.png").read_bytes().startswith(b"\x89PNG")
    for variant in VARIANTS:
        for folder in (f"runs/{variant}/world_objects", f"transfer/{variant}",
                       f"fewshot/{variant}/world_objects/shots1"):
            recipe = read_trained(project / folder / "train/seed1/model.pt")["recipe"]
            assert recipe["settings"]["roles_table"]["value"] == "roles/world_objects/roles.parquet", folder
            assert recipe["settings"]["mixed_heads"]["source"].startswith("SPEC §5")
