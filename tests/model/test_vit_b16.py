"""The real architecture end to end: open_clip's ViT-B-16 with random weights from a local file, on CPU.

Every stage runs as its `dear` command (backbone, prepare, profile, train,
fuse, evaluate, report) on a tiny CoOp-layout dataset (4 classes, 2 images
per class and split, resized to 224 px by the model's transform), with the
smallest settings that still exercise each stage: 4 profiled images, rank
2, 2 texts per head, one training step. Checked: the weights file is used
in place (path + sha256 in the card, no copy) and that hash follows every
output; roles for the 48 heads of layers 9-12; the adapted model's shapes;
every output loads. Per-stage wall times are printed (`pytest -s`).
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pandas as pd
import pytest
import torch
import yaml
from typer.testing import CliRunner

from dear.cli import app
from dear.runtime.io import DIGESTS, read_parquet, read_provenance, sha256_file
from dear.scoring.results import OUTPUT
from dear.stages.profile import ROLES_SCHEMA
from tests.fake_coop import make_fake_dataset, write_params
from tests.fake_run import small_recipes

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("vitb16")]

BANK = [("a red object", "color"), ("a blue object", "color"), ("a round shape", "shape"),
        ("a square shape", "shape"), ("a striped texture", "texture"), ("a smooth texture", "texture"),
        ("a photo of a dog", "object"), ("a photo of a car", "object"), ("on the left", "position"),
        ("on the right", "position"), ("a beach scene", "scene"), ("a pencil sketch", "style")]


@pytest.fixture(scope="module")
def study(tmp_path_factory) -> dict:
    """Run every stage once; returns the folders, the weights file and each stage's wall time."""
    root = tmp_path_factory.mktemp("vitb16")
    weights = root / "weights" / "vit-b-16-random.pt"
    weights.parent.mkdir()
    import open_clip

    torch.manual_seed(0)
    torch.save(open_clip.create_model("ViT-B-16", pretrained=None).state_dict(), weights)
    make_fake_dataset(root / "datasets", "oxford_pets", n_classes=4, per_class=2)
    params = _params(root, weights)
    data, roles, run = root / "data" / "oxford_pets", root / "roles", root / "runs" / "dear" / "oxford_pets"
    commands = {
        "backbone": ["backbone", "--out", root / "backbone", "--world", root / "no-world"],
        "prepare": ["prepare", "--dataset", "oxford_pets", "--out", data],
        "profile": ["profile", "--backbone", root / "backbone", "--manifest", data / "manifest.parquet", "--out", roles],
        "train": ["train", "--method", "dear", "--dataset", "oxford_pets", "--seed", "1", "--backbone", root / "backbone",
                  "--fewshot", data / "fewshot-seed1.parquet", "--roles", roles / "roles.parquet",
                  "--out", run / "train/seed1", "--checkpoint", root / "ckpt" / "ckpt.pt"],
        "fuse": ["fuse", "--model", run / "train/seed1/model.pt", "--fewshot", data / "fewshot-seed1.parquet",
                 "--seed", "1", "--backbone", root / "backbone", "--roles", roles / "roles.parquet",
                 "--out", run / "fuse/seed1/fusion.json"],
        "evaluate": ["evaluate", "--model", run / "train/seed1/model.pt", "--fusion", run / "fuse/seed1/fusion.json",
                     "--source", data, "--seed", "1", "--backbone", root / "backbone", "--roles", roles / "roles.parquet",
                     "--out", run / "eval/seed1"],
        "report": ["report", "--out", root / "report", "--evals", run / "eval/seed1/eval.parquet",
                   "--train-logs", run / "train/seed1/train_log.parquet"],
    }
    seconds = {}
    for stage, args in commands.items():
        began = time.perf_counter()
        result = CliRunner().invoke(app, [str(arg) for arg in args] + ["--params", str(params)])
        seconds[stage] = time.perf_counter() - began
        assert result.exit_code == 0, f"{stage}: {result.output[-3000:]}"
    print("\nViT-B-16 stage wall times (s): " + ", ".join(f"{k} {v:.1f}" for k, v in seconds.items()))
    return {"root": root, "weights": weights, "params": params, "data": data, "roles": roles, "run": run}


def _params(root: Path, weights: Path) -> Path:
    (root / "bank.tsv").write_text("text\tconcept\n" + "".join(f"{t}\t{c}\n" for t, c in BANK))
    path = write_params(root / "params.yaml", root=root / "datasets", datasets=["oxford_pets"], source="coop",
                        seeds=[1], shots=1, val_shots=1, workers=1)
    raw = yaml.safe_load(path.read_text())
    raw["model"].update(arch="ViT-B-16", pretrained=str(weights), cache_dir=None)
    raw["compute"].update(device="cpu", workers=0)
    raw["backbone"]["sanity"]["enabled"] = False
    raw["profile"].update(split="train", max_images=4, batch_size=4, text_batch_size=16, layers=4, svd_rank=2,
                          texts_per_head=2, text_bank=str(root / "bank.tsv"))
    small_recipes(raw["train"], epochs=1, batch_size=2, warmup_epochs=0)
    raw["study"]["methods"] = ["dear"]
    raw["report"]["methods"] = ["dear"]
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return path


def test_the_weights_file_is_used_in_place_and_its_hash_follows_every_output(study):
    weights, sha = study["weights"], sha256_file(study["weights"])
    card = json.loads((study["root"] / "backbone/card.json").read_text())
    assert card["arch"] == "ViT-B-16" and card["weights"] == {"path": str(weights), "sha256": sha, "copied_here": False}
    assert card["sha256"] == sha and sorted(p.name for p in (study["root"] / "backbone").iterdir() if p.name != DIGESTS) == ["card.json"]
    assert 149_000_000 < card["parameters"] < 150_000_000
    assert read_parquet(study["roles"] / "roles.parquet", ROLES_SCHEMA)["model_sha256"].unique().to_pylist() == [sha]
    from dear.methods.trained import read_trained

    assert read_trained(study["run"] / "train/seed1/model.pt")["backbone_sha256"] == sha


def test_roles_cover_the_48_heads_of_layers_9_to_12(study):
    roles = read_parquet(study["roles"] / "roles.parquet", ROLES_SCHEMA).to_pylist()
    assert [(r["layer"], r["head"]) for r in roles] == [(layer, head) for layer in range(9, 13) for head in range(12)]
    assert {r["role"] for r in roles} <= {"attribute", "generalization", "mixed"} and all(r["n_images"] == 4 for r in roles)
    assert read_provenance(study["roles"] / "roles.parquet")["params"]["layers"] == 4


def test_every_output_loads_with_the_adapted_models_shapes(study):
    from dear.model.clip import load_backbone
    from dear.methods.trained import load_trained
    from dear.config.params import load_params

    backbone = load_backbone(study["root"] / "backbone")
    adapted = load_trained(study["run"] / "train/seed1/model.pt", backbone, study["roles"] / "roles.parquet",
                           load_params(study["params"]))
    with torch.no_grad():
        features = adapted.encode(adapted.image_prefix(torch.zeros(1, 3, 224, 224)))
        text = adapted.text_features(["dog", "cat"])
    assert tuple(features.shape) == (1, 6, 512) and tuple(text.shape) == (2, 512)  # CLS + 5 attribute streams
    fusion = json.loads((study["run"] / "fuse/seed1/fusion.json").read_text())
    assert len(fusion["alpha"]) == 6 and abs(sum(fusion["alpha"]) - 1.0) < 1e-5
    evals = read_parquet(study["run"] / "eval/seed1/eval.parquet").to_pandas()
    output = evals[evals.stream == OUTPUT]
    assert set(output.split) == {"base", "novel"} and output.total.sum() == 8  # 4 classes x 2 test images
    assert set(evals.stream) == {OUTPUT, "fused", "cls", "color", "shape", "texture", "object", "position"}
    metrics = json.loads((study["run"] / "eval/seed1/metrics.json").read_text())
    assert set(metrics["base_to_novel"]["oxford_pets"]) == {"base", "novel", "hm"}
    table = pd.read_csv(study["root"] / "report/results.csv")
    hm = table[(table.dataset == "oxford_pets") & (table.method == "dear") & (table.metric == "hm")]
    assert len(hm) == 1 and hm["mean"].iloc[0] == pytest.approx(metrics["base_to_novel"]["oxford_pets"]["hm"], abs=1e-3)
