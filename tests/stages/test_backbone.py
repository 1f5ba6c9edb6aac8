"""The backbone stage: tiny training helps, weights round-trip exactly, bad weights fail cleanly."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import yaml
from typer.testing import CliRunner

from dear.cli import app
from dear.data import world as world_data
from dear.errors import DearError
from dear.runtime.io import DIGESTS
from dear.model import clip
from dear.model.pretrain import pretrain
from dear.model.sanity import world_zero_shot
from dear.config.params import load_params
from dear.stages import backbone as backbone_stage
from dear.stages import world as world_stage

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.xdist_group("backbone")


@pytest.fixture(scope="module")
def params():
    return world_data.tiny(load_params(ROOT / "params.yaml"))


@pytest.fixture(scope="module")
def built(params, tmp_path_factory) -> tuple[Path, Path, Path]:
    """(params file, world folder, backbone folder) of the tiny setting, made through the CLI."""
    root = tmp_path_factory.mktemp("tiny")
    raw = yaml.safe_load((ROOT / "params.yaml").read_text())
    raw.update(world_data.tiny_params())
    params_file = root / "params.yaml"
    params_file.write_text(yaml.safe_dump(raw))
    runner = CliRunner()
    for args in (["world", "--out", str(root / "world")],
                 ["backbone", "--world", str(root / "world"), "--out", str(root / "backbone")]):
        result = runner.invoke(app, [*args, "--params", str(params_file)])
        assert result.exit_code == 0, result.output
    return params_file, root / "world", root / "backbone"


def test_tiny_training_beats_random_init(params, built):
    _, world, folder = built
    card = json.loads((folder / "card.json").read_text())
    torch.manual_seed(params.backbone.seed)
    random_model = clip.create_model("dear-world-tiny", None).eval()
    world_card = json.loads((world / "card.json").read_text())
    before = world_zero_shot(random_model, clip.tokenizer("dear-world-tiny"), clip.eval_transform(random_model),
                             world, world_card, 256)
    after = card["sanity"]
    assert after["world_objects"]["top1"] >= before["world_objects"]["top1"] + 0.15
    assert after["world_objects"]["top1"] >= 2 * after["world_objects"]["chance"]
    assert after["world_colors"]["top1"] >= after["world_colors"]["chance"] + 0.25
    assert card["sha256"] and card["parameters"] == sum(p.numel() for p in random_model.parameters())
    assert card["training"]["steps"] == params.backbone.steps


def test_loaded_backbone_reproduces_encode_image(params, tmp_path):
    tiny = params.backbone.model_copy(update={"steps": 3})
    models = []
    for _ in range(2):   # training is deterministic for a seed on CPU
        torch.manual_seed(0)
        models.append(clip.create_model("dear-world-tiny", None))
        pretrain(models[-1], clip.tokenizer("dear-world-tiny"), params.world, tiny, set())
    model = models[0]
    assert backbone_stage.state_dict_bytes(models[0]) == backbone_stage.state_dict_bytes(models[1])
    (tmp_path / "model.pt").write_bytes(backbone_stage.state_dict_bytes(model))
    (tmp_path / "card.json").write_text(json.dumps({"arch": "dear-world-tiny"}))
    loaded = clip.load_backbone(tmp_path)
    pixels = torch.randn(4, 3, 32, 32)
    with torch.no_grad():
        assert torch.equal(model.eval().encode_image(pixels), loaded.model.encode_image(pixels))
    assert not loaded.model.training and loaded.tokenizer(["a photo of a thing."]).shape == (1, 24)


def test_pretraining_starts_from_the_configured_temperature(params):
    steps = params.backbone.model_copy(update={"steps": 1, "lr": 1.0e-6})
    for tau in (0.07, 0.03):
        torch.manual_seed(0)
        model = clip.create_model("dear-world-tiny", None)
        pretrain(model, clip.tokenizer("dear-world-tiny"), params.world,
                 steps.model_copy(update={"init_temperature": tau}), set())
        assert abs(1.0 / model.logit_scale.exp().item() - tau) < 1.0e-4  # one step at lr 1e-6 barely moves it


@pytest.mark.slow
def test_vit_b16_without_weights_loads_from_a_local_file(tmp_path):
    torch.manual_seed(0)
    original = clip.create_model("ViT-B-16", None)
    path = tmp_path / "vit-b-16.pt"
    torch.save(original.state_dict(), path)
    loaded = clip.create_model("ViT-B-16", str(path))
    for key, value in original.state_dict().items():
        assert torch.equal(value, loaded.state_dict()[key]), key


def _run_backbone(built, tmp_path, **model):
    params_file, world, _ = built
    raw = yaml.safe_load(params_file.read_text())
    raw["model"].update(model)
    bad_params = tmp_path / "params.yaml"
    bad_params.write_text(yaml.safe_dump(raw))
    out = tmp_path / "backbone"
    result = CliRunner().invoke(app, ["backbone", "--params", str(bad_params), "--world", str(world), "--out", str(out)])
    return result, out


def test_corrupt_weights_fail_in_one_line(built, tmp_path):
    corrupt = tmp_path / "corrupt.pt"
    corrupt.write_bytes(b"\x00not a torch file" * 100)
    result, out = _run_backbone(built, tmp_path, pretrained=str(corrupt))
    assert result.exit_code == 1
    assert result.output.strip().count("\n") == 0 and str(corrupt) in result.output and "dear-world-tiny" in result.output
    assert not out.exists()


def test_wrong_architecture_fails_in_one_line(built, tmp_path):
    _, _, folder = built
    result, out = _run_backbone(built, tmp_path, arch="dear-world", pretrained=str(folder / "model.pt"))
    assert result.exit_code == 1
    line = result.output.strip()
    assert line.count("\n") == 0 and str(folder / "model.pt") in line and "dear-world" in line and "wrong-shape" in line
    assert not out.exists()


def test_a_second_load_is_a_copy_of_the_first(built):
    """Every seed of a job loads the backbone: later loads copy the first model, and a changed copy stays its own."""
    _, _, folder = built
    first, second = clip.load_backbone(folder), clip.load_backbone(folder)
    assert first.model is not second.model and first.card == second.card and first.card is not second.card
    for (name, a), b in zip(first.model.state_dict().items(), second.model.state_dict().values()):
        assert torch.equal(a, b), name
    with torch.no_grad():
        next(first.model.parameters()).add_(1.0)
    assert torch.equal(next(clip.load_backbone(folder).model.parameters()), next(second.model.parameters()))


def test_a_weights_file_is_used_in_place_and_checked_by_every_later_load(built, tmp_path):
    """Real weights are hashed where they lie: the card names the file, no model.pt is written, a changed file is refused."""
    _, _, folder = built
    weights = tmp_path / "weights" / "tiny.pt"
    weights.parent.mkdir()
    weights.write_bytes((folder / "model.pt").read_bytes())
    params_file, world, _ = built
    raw = yaml.safe_load(params_file.read_text())
    raw["model"]["pretrained"] = str(weights)
    raw["backbone"]["sanity"]["enabled"] = False
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(raw))
    out = tmp_path / "backbone"
    result = CliRunner().invoke(app, ["backbone", "--params", str(tmp_path / "params.yaml"),
                                      "--world", str(tmp_path / "no-world"), "--out", str(out)])
    assert result.exit_code == 0, result.output
    card = json.loads((out / "card.json").read_text())
    assert card["weights"] == {"path": str(weights), "sha256": card["sha256"], "copied_here": False}
    assert card["sha256"] == json.loads((folder / "card.json").read_text())["sha256"] and card["sanity"] is None
    assert sorted(p.name for p in out.iterdir() if p.name != DIGESTS) == ["card.json"]  # .digest: dear/pipeline/digest.py
    loaded = clip.load_backbone(out)
    assert all(torch.equal(v, loaded.model.state_dict()[k]) for k, v in clip.load_backbone(folder).model.state_dict().items())
    with open(weights, "r+b") as handle:  # one byte changed behind the pipeline's back
        handle.seek(-1, 2)
        last = handle.read(1)
        handle.seek(-1, 2)
        handle.write(bytes([last[0] ^ 1]))
    with pytest.raises(DearError, match=r"tiny.pt: sha256 differs from the one .*card.json recorded"):
        clip.load_backbone(out)
    weights.unlink()
    with pytest.raises(DearError, match=r"tiny.pt: the backbone's weights file is missing"):
        clip.load_backbone(out)


def test_unknown_tag_fails_in_one_line():
    with pytest.raises(DearError, match="has no weights 'nonsense'"):
        clip.create_model("dear-world-tiny", "nonsense")


def test_corpus_augmentation_is_seeded_per_step_and_off_when_asked(params):
    from dear.model.pretrain import augmentation, augmented
    from dear.config.params import Augmentation

    pixels = torch.rand(4, 3, 32, 32)
    augment = augmentation(Augmentation(crop_scale=[0.5, 1.0], flip_prob=0.5, interpolation="bicubic"), 32)
    first, again = augmented(pixels, augment, 0, 7), augmented(pixels, augment, 0, 7)
    assert first.shape == pixels.shape and torch.equal(first, again)
    assert not torch.equal(first, augmented(pixels, augment, 0, 8)) and not torch.equal(first, pixels)
    assert 0.0 <= float(first.min()) and float(first.max()) <= 1.0
    off = augmentation(Augmentation(crop_scale=[1.0, 1.0], flip_prob=0.0, interpolation="bicubic"), 32)
    assert off is None and augmented(pixels, off, 0, 7) is pixels


def test_the_world_sanity_check_is_for_the_embedded_backbone_and_names_its_key(built, tmp_path, monkeypatch):
    """backbone.sanity.enabled: auto scores only the embedded backbone on the world; by hand, one's own weights need
    no world, and a check asked for without one says which key turns it off."""
    from dear.config.params import sanity_on, world_needed

    params_file, _, folder = built
    monkeypatch.chdir(tmp_path)  # --world's default, world/, is not there
    weights = tmp_path / "own.pt"
    weights.write_bytes((folder / "model.pt").read_bytes())
    raw = yaml.safe_load(params_file.read_text())
    raw["model"]["pretrained"] = str(weights)
    raw["data"]["source"] = "coop"
    for enabled, code in (("auto", 0), (True, 1)):
        raw["backbone"]["sanity"]["enabled"] = enabled
        path = tmp_path / f"{enabled}.yaml"
        path.write_text(yaml.safe_dump(raw))
        assert sanity_on(load_params(path)) is (enabled is True) and world_needed(load_params(path)) is (enabled is True)
        out = tmp_path / f"backbone-{enabled}"
        result = CliRunner().invoke(app, ["backbone", "--params", str(path), "--out", str(out)])  # --world: world
        assert result.exit_code == code, result.output
    assert json.loads((tmp_path / "backbone-auto/card.json").read_text())["sanity"] is None
    line = result.stderr.strip()
    assert line.count("\n") == 0 and "world/card.json: not found" in line and "backbone.sanity.enabled: true" in line
    assert "run `dear world` first" in line and "or set backbone.sanity.enabled: false" in line
    raw["model"]["pretrained"], raw["backbone"]["sanity"]["enabled"] = "embedded", "auto"
    (tmp_path / "embedded.yaml").write_text(yaml.safe_dump(raw))
    assert sanity_on(load_params(tmp_path / "embedded.yaml"))
