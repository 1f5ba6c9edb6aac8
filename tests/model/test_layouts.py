"""Any CLS-token open_clip ViT with a local weights file: tiny models of several layouts, end to end.

Each layout is an open_clip config JSON (`model.arch`) and a state dict of random weights (`model.pretrained`):
widths, head counts and head widths, patch sizes, depths, QuickGELU or GELU, layer scale, no ln_pre (CLIPA-style
pre-norm variant), a text tower of its own width and depth. `dear check` names every recipe value that names
layers and does not fit (one line per value: what the model has, what to set); once set, `profile`, every
method's `train`, `fuse` and `evaluate` run as commands. Towers DeAR cannot serve are refused in one line.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import yaml
from typer.testing import CliRunner

from dear.config.check import check_file
from dear.cli import app
from dear.methods import names as method_names
from dear.methods.layers import resolve as resolve_layers
from tests.fake_coop import make_fake_dataset, write_params
from tests.fake_run import small_recipes
from tests.model.test_vit_b16 import BANK

pytestmark = pytest.mark.xdist_group("layouts")

LAYER_KEYS = ("prompt_depth", "vision_depth", "text_depth", "start_layer", "text_start_layer")
TEXT = {"context_length": 24, "vocab_size": 49408}
LAYOUTS = {  # name: (open_clip config, what it varies)
    "heads3-patch4": {"embed_dim": 24, "quick_gelu": False,
                      "vision_cfg": {"image_size": 16, "layers": 3, "width": 48, "head_width": 16, "patch_size": 4,
                                     "mlp_ratio": 2.0},
                      "text_cfg": {**TEXT, "width": 32, "heads": 2, "layers": 2}},
    "deep-quickgelu": {"embed_dim": 16, "quick_gelu": True,
                       "vision_cfg": {"image_size": 32, "layers": 5, "width": 32, "head_width": 8, "patch_size": 8},
                       "text_cfg": {**TEXT, "width": 32, "heads": 4, "layers": 3}},
    "layerscale-no-ln-pre": {"embed_dim": 32, "quick_gelu": False,
                             "vision_cfg": {"image_size": 24, "layers": 4, "width": 40, "head_width": 20,
                                            "patch_size": 8, "ls_init_value": 0.1, "no_ln_pre": True,
                                            "norm_kwargs": {"eps": 1e-6}},
                             "text_cfg": {**TEXT, "width": 24, "heads": 3, "layers": 3, "ls_init_value": 0.1}},
}
REFUSED = {  # name: (a change of the first layout, words of the one-line refusal)
    "attentional-pool": ({"attentional_pool": True}, "pools its image tower attentionally"),
    "average-pool": ({"pool_type": "avg"}, "pools its image tower by 'avg', without a CLS token"),
}


def _model_files(root: Path, name: str, config: dict) -> tuple[Path, Path]:
    """(config JSON, random weights) of one layout: a researcher's own CLIP."""
    import open_clip

    arch = root / f"{name}.json"
    arch.write_text(json.dumps(config))
    open_clip.add_model_config(arch)
    torch.manual_seed(0)
    model = open_clip.create_model(name, pretrained=None, force_quick_gelu=config["quick_gelu"])
    weights = root / f"{name}.pt"
    torch.save(model.state_dict(), weights)
    return arch, weights


def _params(root: Path, arch: Path, weights: Path, recipes: dict | None = None) -> Path:
    (root / "bank.tsv").write_text("text\tconcept\n" + "".join(f"{t}\t{c}\n" for t, c in BANK))
    path = write_params(root / "params.yaml", root=root / "datasets", datasets=["oxford_pets"], source="coop",
                        seeds=[1], shots=1, val_shots=1, workers=1)
    raw = yaml.safe_load(path.read_text())
    raw["model"].update(arch=str(arch), pretrained=str(weights), cache_dir=None)
    raw["compute"].update(device="cpu", workers=0)
    raw["profile"].update(split="train", max_images=4, batch_size=4, text_batch_size=16, layers=2, svd_rank=2,
                          texts_per_head=2, text_bank=str(root / "bank.tsv"))
    small_recipes(raw["train"], epochs=1, batch_size=2, warmup_epochs=0, rep_dim=8)
    for block in raw["train"]["recipes"].values():  # the authors' layer values (ViT-B/16's), as a new study has them
        for key in LAYER_KEYS:
            block.pop(key, None)
    for name, values in (recipes or {}).items():
        raw["train"]["recipes"].setdefault(name, {}).update(values)
    raw["study"].update(methods=method_names(), transfer=None)  # base-to-novel: one recipe layer per method
    raw["report"]["methods"] = method_names()
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return path


def problems(params: Path) -> list[str]:
    return [finding.text for finding in check_file(params)[1]]


def invoke(params: Path, *args) -> None:
    result = CliRunner().invoke(app, [*(str(a) for a in args), "--params", str(params)])
    assert result.exit_code == 0, f"{args[0]}: {result.output[-3000:]}"


@pytest.mark.parametrize("name", LAYOUTS)
def test_a_model_of_another_layout_runs_every_method_or_says_what_to_set(name, tmp_path):
    config = LAYOUTS[name]
    arch, weights = _model_files(tmp_path, name, config)
    make_fake_dataset(tmp_path / "datasets", "oxford_pets", n_classes=4, per_class=2)
    depth = {"image": config["vision_cfg"]["layers"], "text": config["text_cfg"]["layers"]}
    shallower = min(depth.values())

    # the authors' layer values are ViT-B/16's: one line per value, with what the model has and what to set
    errors = problems(_params(tmp_path, arch, weights))
    layer_lines = sorted(line for line in errors if "does not fit" in line)
    expected = {"train.recipes.maple.prompt_depth: 9": f"set it in 1..{shallower}",
                "train.recipes.promptsrc.vision_depth: 9": f"set it in 0..{depth['image']}",
                "train.recipes.promptsrc.text_depth: 9": f"set it in 1..{depth['text']}",
                "train.recipes.mmrl.start_layer: 6": f"set it in 1..{shallower}, or null",
                "train.recipes.mmrlpp.start_layer: 6": f"set it in 1..{shallower}, or null",
                "train.recipes.tac.vision_depth: 12": f"set it in 1..{depth['image']}",
                "train.recipes.tac.text_depth: 12": f"set it in 1..{depth['text']}"}
    if depth["image"] >= 9 and depth["text"] >= 9:
        expected = {}
    assert len(layer_lines) == len(expected), "\n".join(errors)
    for start, fix in expected.items():
        line = next(line for line in layer_lines if line.startswith(start))
        towers = [f"{depth[t]} {t}" for t in ("image", "text") if t in start or "prompt_depth" in start
                  or "mmrl" in start or (t == "image" and "vision" in start)]
        assert f"does not fit {arch} ({' and '.join(towers)} layers)" in line, line
        assert fix in line and line.count("\n") == 0

    # set as told: every stage runs
    recipes = {"maple": {"prompt_depth": shallower}, "promptsrc": {"vision_depth": depth["image"] - 1,
                                                                   "text_depth": depth["text"]},
               "mmrl": {"start_layer": None}, "mmrlpp": {"start_layer": None},
               "tac": {"vision_depth": depth["image"], "text_depth": depth["text"]}}
    params = _params(tmp_path, arch, weights, recipes)
    assert problems(params) == []
    data, roles, backbone = tmp_path / "data/oxford_pets", tmp_path / "roles", tmp_path / "backbone"
    invoke(params, "backbone", "--out", backbone, "--world", tmp_path / "no-world")
    invoke(params, "prepare", "--dataset", "oxford_pets", "--out", data)
    invoke(params, "profile", "--backbone", backbone, "--manifest", data / "manifest.parquet", "--out", roles)
    heads = config["vision_cfg"]["width"] // config["vision_cfg"]["head_width"]
    import pyarrow.parquet as pq

    table = pq.read_table(roles / "roles.parquet").to_pylist()
    assert [(r["layer"], r["head"]) for r in table] == [(layer, head) for layer in range(depth["image"] - 1,
                                                                                          depth["image"] + 1)
                                                        for head in range(heads)]
    for method in method_names():
        run = tmp_path / "runs" / method
        invoke(params, "train", "--method", method, "--dataset", "oxford_pets", "--seed", 1, "--backbone", backbone,
               "--fewshot", data / "fewshot-seed1.parquet", "--roles", roles / "roles.parquet",
               "--out", run / "train/seed1", "--checkpoint", tmp_path / "ckpt" / method / "ckpt.pt")
    images = tmp_path / "datasets/oxford_pets/images"
    for method in method_names():  # `dear predict` labels new images with any method's model.pt
        invoke(params, "predict", "--model", tmp_path / "runs" / method / "train/seed1/model.pt", "--backbone", backbone,
               "--roles", roles / "roles.parquet", "--images", images, "--out", tmp_path / "predict" / method)
        rows = pq.read_table(tmp_path / "predict" / method / "predictions.parquet").to_pylist()
        assert rows and all(row["error"] is None and len(row["classes"]) == 2 for row in rows), method  # 2 base classes
    for method in ("coop", "dear"):  # a frozen-image method and the token method: fuse and evaluate
        run = tmp_path / "runs" / method
        invoke(params, "fuse", "--model", run / "train/seed1/model.pt", "--fewshot", data / "fewshot-seed1.parquet",
               "--seed", 1, "--backbone", backbone, "--roles", roles / "roles.parquet",
               "--out", run / "fuse/seed1/fusion.json")
        invoke(params, "evaluate", "--model", run / "train/seed1/model.pt", "--fusion", run / "fuse/seed1/fusion.json",
               "--source", data, "--seed", 1, "--backbone", backbone, "--roles", roles / "roles.parquet",
               "--out", run / "eval/seed1")
        metrics = json.loads((run / "eval/seed1/metrics.json").read_text())
        assert set(metrics["base_to_novel"]["oxford_pets"]) == {"base", "novel", "hm"}


@pytest.mark.parametrize("name", LAYOUTS)
def test_the_layer_rules_of_check_and_recipe_are_the_methods_own(name, tmp_path):
    """`dear.methods.layers` (check, recipe) resolves each layer key as the method builds it, on every layout."""
    from dear.methods import create
    from dear.methods.recipe import resolve
    from dear.model.masks import HeadRole
    from tests.methods_tools import Backbone

    config = LAYOUTS[name]
    arch, weights = _model_files(tmp_path, name, config)
    from dear.model.clip import create_model

    clip = create_model(str(arch), str(weights), quick_gelu=config["quick_gelu"])
    depth = {"image": config["vision_cfg"]["layers"], "text": config["text_cfg"]["layers"]}
    changes = {"maple": {"prompt_depth": 2}, "promptsrc": {"vision_depth": 1, "text_depth": 2},
               "mmrl": {"start_layer": None}, "mmrlpp": {"start_layer": None},
               "tac": {"vision_depth": 2, "text_depth": 1}, "dear": {"start_layer": None, "text_start_layer": None}}
    image, text = depth["image"], depth["text"]
    built = {"maple": lambda m: {("prompt_depth", "image"): range(1, m.depth + 1),
                                 ("prompt_depth", "text"): range(1, m.depth + 1)},
             "promptsrc": lambda m: {("vision_depth", "image"): range(1, m.vision_depth + 1),
                                     ("text_depth", "text"): range(1, m.text_depth + 1)},
             "mmrl": lambda m: {("start_layer", "image"): range(m.start, image + 1),
                                ("start_layer", "text"): range(m.text_start, text + 1)},
             "mmrlpp": lambda m: {("start_layer", "image"): range(m.start, image + 1),
                                  ("start_layer", "text"): range(m.text_start, text + 1)},
             "tac": lambda m: {("vision_depth", "image"): range(1, m.vision_depth + 1),
                               ("text_depth", "text"): range(1, m.text_depth + 1)},
             "dear": lambda m: {("start_layer", "image"): range(m.start, image + 1),
                                ("text_start_layer", "text"): range(m.text_start, text + 1)}}
    roles = [HeadRole(image, 0, "mixed", None)]
    for method, values in changes.items():
        recipe = resolve({"all": {"rep_dim": 8}, method: values}, method, "oxford_pets", "base_to_novel")
        model = create(method, Backbone(clip), recipe, roles)
        resolved = {layer.key: layer for layer in resolve_layers(method, recipe.values, depth)}
        for (key, tower), layers in built[method](model).items():
            assert resolved[key].problem is None and resolved[key].layers[tower] == layers, (method, key, tower)


@pytest.mark.parametrize("name", REFUSED)
def test_towers_dear_cannot_serve_are_refused_in_one_line(name, tmp_path):
    change, words = REFUSED[name]
    config = json.loads(json.dumps(LAYOUTS["heads3-patch4"]))
    config["vision_cfg"].update(change)
    arch, weights = _model_files(tmp_path, name, config)
    lines = [line for line in problems(_params(tmp_path, arch, weights)) if line.startswith("model.arch")]
    assert len(lines) == 1 and words in lines[0] and "use a CLS-token open_clip ViT" in lines[0], lines
    from dear import api
    from dear.errors import DearError

    with pytest.raises(DearError, match="not supported|DeAR reads the CLS token"):
        api.load_clip(str(arch), weights)


def test_dear_recipe_shows_the_layers_each_value_resolves_to(tmp_path):
    config = LAYOUTS["deep-quickgelu"]  # 5 image layers, 3 text layers
    arch, weights = _model_files(tmp_path, "deep-quickgelu", config)
    params = _params(tmp_path, arch, weights, {"maple": {"prompt_depth": 2}})
    result = CliRunner().invoke(app, ["recipe", "--params", str(params), "--method", "dear"])
    assert result.exit_code == 0, result.output
    assert (f"layers on {arch}: start_layer null -> image layers 4-5 of 5; "
            "text_start_layer null -> text layers 3 of 3") not in result.output  # one layer reads 'layer 3'
    assert (f"layers on {arch}: start_layer null -> image layers 4-5 of 5; "
            "text_start_layer null -> text layer 3 of 3") in result.output
    result = CliRunner().invoke(app, ["recipe", "--params", str(params), "--json"])
    rows = {row["method"]: row["layers"] for row in json.loads(result.output)}
    assert rows["maple"]["prompt_depth"] == {"value": 2, "problem": None, "layers": {"image": [1, 2], "text": [1, 2]}}
    assert rows["mmrl"]["start_layer"]["problem"].startswith("does not fit this model (5 image and 3 text layers); "
                                                             "set it in 1..3, or null")
    assert rows["coop"] == {}


@pytest.mark.parametrize("name", LAYOUTS)
def test_the_library_serves_every_layout(name, tmp_path):
    """dear.api on one's own CLIP: roles, masks and attribute tokens trained a step in one's own loop."""
    from dear import api

    config = LAYOUTS[name]
    arch, weights = _model_files(tmp_path, name, config)
    model, tokenizer, preprocess = api.load_clip(str(arch), weights, quick_gelu=config["quick_gelu"])
    size, patch = config["vision_cfg"]["image_size"], config["vision_cfg"]["patch_size"]
    images = torch.randn(12, 3, size, size)
    roles = api.head_roles(model, tokenizer, images, BANK, api.RoleSettings(layers=2))
    heads = config["vision_cfg"]["width"] // config["vision_cfg"]["head_width"]
    assert roles.num_rows == 2 * heads
    masks = api.role_masks(model, roles)
    tokens = 1 + (size // patch) ** 2 + len(api.CORE_CONCEPTS)
    assert all(mask.shape == (heads, tokens, tokens) for mask in masks.values())
    adapted = api.attribute_tokens(model, tokenizer, roles, recipe={"rep_dim": 8})
    optimizer = torch.optim.SGD(adapted.learnable_parameters(), lr=0.1)
    before = [p.detach().clone() for p in adapted.learnable_parameters()]
    loss = adapted.loss(images[:4], torch.tensor([0, 1, 2, 0]), ["cat", "dog", "bird"])
    loss.backward()
    optimizer.step()
    assert any(not torch.equal(a, b) for a, b in zip(before, adapted.learnable_parameters()))
    assert adapted(images[:2], ["cat", "dog", "bird"]).shape == (2, 3)
