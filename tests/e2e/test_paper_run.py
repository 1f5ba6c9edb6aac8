"""A run of the paper config (configs/paper-vitb16.yaml) on the tiny CoOp-layout fixture: its report sets the
published numbers beside ours, with their sources.

The config is the paper's in everything the published numbers depend on (ViT-B-16, model.pretrained: openai,
data.source: coop, 16 shots), shrunk elsewhere to run on CPU in a test: one dataset (oxford_pets, 4 classes of
16 images per split), one seed, zero-shot CLIP only. The 'openai' weights are random ViT-B-16 weights put where
`dear fetch-weights` would have put OpenAI's (open_clip's Hugging Face cache), so the numbers are chance-level: the
test checks what the report puts beside what, not the values.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
import torch
import yaml
from typer.testing import CliRunner

from dear.cli import app
from tests.fake_coop import make_fake_dataset

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("vitb16")]

ROOT = Path(__file__).resolve().parents[2]
REVISION = "0" * 40


def plant_openai_weights(cache: Path) -> None:
    """Random ViT-B-16 weights as open_clip's cache holds the 'openai' tag's file."""
    import open_clip

    repo = cache / "models--timm--vit_base_patch16_clip_224.openai"
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(REVISION)
    target = repo / "snapshots" / REVISION / "open_clip_pytorch_model.bin"
    target.parent.mkdir(parents=True)
    torch.manual_seed(0)
    torch.save(open_clip.create_model("ViT-B-16", pretrained=None, force_quick_gelu=True).state_dict(), target)


def paper_params(root: Path) -> Path:
    raw = yaml.safe_load((ROOT / "configs/paper-vitb16.yaml").read_text())
    raw["output_root"] = str(root)
    raw["model"]["cache_dir"] = str(root / "cache")
    raw["data"].update(root=str(root / "datasets"), datasets=["oxford_pets"], seeds=[1], val_shots=1, workers=1)
    raw["study"].update(methods=["zeroshot"], base_to_novel=["oxford_pets"],
                        transfer={"source": "oxford_pets", "cross_dataset": [], "domain_generalization": []})
    raw["profile"]["dataset"] = "oxford_pets"
    raw["compute"].update(device="cpu", precision="fp32", workers=0)
    raw["evaluate"]["batch_size"] = 32
    raw["report"].update(methods=["zeroshot"], compare="zeroshot", bootstrap_resamples=200)
    path = root / "paper.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return path


@pytest.fixture(scope="module")
def report(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("paper")
    plant_openai_weights(root / "cache")
    make_fake_dataset(root / "datasets", "oxford_pets", n_classes=4, per_class=16)
    params = paper_params(root)
    data, run = root / "data/oxford_pets", root / "runs/zeroshot/oxford_pets"
    commands = [
        ["backbone", "--out", root / "backbone", "--world", root / "no-world"],
        ["prepare", "--dataset", "oxford_pets", "--out", data],
        ["train", "--method", "zeroshot", "--dataset", "oxford_pets", "--backbone", root / "backbone",
         "--fewshot", data / "fewshot-seed{seed}.parquet", "--out", run / "train/seed{seed}"],
        ["fuse", "--model", run / "train/seed{seed}/model.pt", "--fewshot", data / "fewshot-seed{seed}.parquet",
         "--backbone", root / "backbone", "--out", run / "fuse/seed{seed}/fusion.json"],
        ["evaluate", "--model", run / "train/seed{seed}/model.pt", "--fusion", run / "fuse/seed{seed}/fusion.json",
         "--source", data, "--data", root / "data", "--backbone", root / "backbone", "--out", run / "eval/seed{seed}"],
        ["report", "--out", root / "report", "--evals", run / "eval/seed1/eval.parquet"],
    ]
    for args in commands:
        result = CliRunner().invoke(app, [str(arg) for arg in args] + ["--params", str(params)])
        assert result.exit_code == 0, f"{args[0]}: {result.output[-3000:]}"
    return root / "report"


def test_the_paper_configs_report_sets_published_numbers_beside_ours_with_sources(report):
    markdown = (report / "results.md").read_text()
    measured, block = markdown.split("## Published numbers beside ours")
    assert "91.17" not in measured and "CoCoOp paper" not in measured
    assert "Comparable in setting" in block
    published = pd.read_csv(report / "published.csv")
    assert list(published["metric"]) == ["base", "novel", "hm"]
    assert set(published["method"]) == {"zeroshot"} and set(published["dataset"]) == {"oxford_pets"}
    assert list(published["published"]) == [91.17, 97.26, 94.12]  # CLIP on OxfordPets (RECIPES §8)
    assert set(published["published_source"]) == {"CoCoOp paper (CVPR 2022), base-to-novel table"}
    ours = pd.read_csv(report / "results.csv")
    base = ours[(ours["dataset"] == "oxford_pets") & (ours["metric"] == "base")]["mean"].iloc[0]
    assert published["ours"].iloc[0] == pytest.approx(base) and published["difference"].iloc[0] == pytest.approx(
        base - 91.17)
    assert published["inside"].isna().all()  # one seed: no interval for the published value to lie in
    assert "| zeroshot | oxford_pets | Base | 91.17 |" in block and "| — | CoCoOp paper (CVPR 2022)" in block
