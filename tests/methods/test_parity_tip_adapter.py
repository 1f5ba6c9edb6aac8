"""Parity with gaopengcuhk/Tip-Adapter: the cache model, its keys' fine-tuning and the alpha/beta search.

Read at gaopengcuhk/Tip-Adapter@d0e2d6f, their head (main.py, utils.py, datasets/, all eleven configs/*.yaml;
their configs are RN50's, so at ViT-B/16 their values are ours). What their code computes is restated here:
the cache (utils.py build_cache_model: the mean over augment_epoch passes of encode_image, normalized; one-hot
values), the logits (main.py: `100. * f @ clip_weights + ((-1) * (beta - beta * affinity)).exp() @ values *
alpha`), the classifier (utils.py clip_classifier: the prompts' normalized features averaged, normalized), the
search (utils.py search_hp: beta outer, alpha inner, the first strictly best), the fine-tuning (only the keys,
AdamW eps 1e-4, CosineAnnealingLR over all iterations), and every dataset's config values.
"""

import math

import pytest
import torch
import torch.nn.functional as F

from dear.methods import create
from dear.methods import tip_adapter_f as tip
from dear.config.params import load_params
from dear.train.data import Shots
from dear.train.trainer import StepCosine, make_loop, schedule_of
from dear.compute import device as devices
from tests import fake_run
from tests.methods_tools import Backbone, recipe, tokenize
from tests.tiny_clip import tiny_clip

FEWSHOT = fake_run.ROOT / "configs/fewshot-vitb16.yaml"
SHOTS = (1, 2, 4, 8, 16)
# configs/<dataset>.yaml: (search_scale [beta, alpha], init_alpha, train_epoch); every one: lr 0.001,
# augment_epoch 10, search_step [200, 20], init_beta 1
CONFIGS = {"imagenet": ([7, 3], 1.17, 20), "caltech-101": ([12, 5], 3, 20), "oxford_pets": ([7, 3], 1.17, 20),
           "stanford_cars": ([20, 10], 3, 20), "oxford_flowers": ([50, 50], 10, 20), "food-101": ([10, 10], 1.17, 20),
           "fgvc_aircraft": ([30, 30], 5, 20), "sun397": ([12, 10], 1.17, 20), "dtd": ([13, 13], 2, 20),
           "eurosat": ([12, 10], 2, 100), "ucf101": ([7, 3], 3, 20)}
COMMON = {"lr": 1e-3, "augment_epochs": 10, "search_step": [200, 20], "init_beta": 1.0, "batch_size": 256,
          "optimizer": "adamw", "adam_eps": 1e-4, "weight_decay": 1e-2, "schedule": "cosine_steps", "min_lr": 0.0,
          "warmup_epochs": 0, "crop_scale": [0.5, 1.0], "flip_prob": 0.5, "interpolation": "bicubic",
          "precision": "fp16", "drop_last": False, "logit_scale": 100.0, "views": None}
UNREAD = ("momentum", "warmup_lr")  # Dassl's keys their AdamW without warm-up never reads
CONFIG_KEYS = ("search_scale", "init_alpha", "epochs", "lr", "augment_epochs", "search_step", "init_beta")
TEMPLATES = {"imagenet": "itap of a {}.", "caltech-101": "a photo of a {}.", "oxford_pets": "a photo of a {}, a type of pet.",
             "stanford_cars": "a photo of a {}.", "oxford_flowers": "a photo of a {}, a type of flower.",
             "food-101": "a photo of {}, a type of food.", "fgvc_aircraft": "a photo of a {}, a type of aircraft.",
             "sun397": "a photo of a {}.", "dtd": "{} texture.", "eurosat": "a centered satellite photo of {}.",
             "ucf101": "a photo of a person doing {}."}
IMAGENET_ENSEMBLE = ["itap of a {}.", "a bad photo of the {}.", "a origami {}.", "a photo of the large {}.",
                     "a {} in a video game.", "art of the {}.", "a photo of the small {}."]


@pytest.fixture(scope="module")
def clip():
    return tiny_clip()


def model_with_cache(clip, keys, labels, names, **changes):
    """A Tip-Adapter-F model whose cache holds `keys` [N, 2] (in the first two of E dims) of `labels`."""
    model = create("tip_adapter_f", Backbone(clip), recipe("tip_adapter_f", demo=False, **changes))
    full = torch.zeros(len(keys), model.keys.shape[1])
    full[:, :2] = torch.tensor(keys)
    model.keys = torch.nn.Parameter(full)
    model.cache_labels = torch.tensor(labels)
    model._remember(names)
    return model


def test_the_cache_logits_are_alpha_exp_minus_beta_one_minus_affinity_times_the_values(clip):
    """Keys (1, 0), (0, 1), (0.6, 0.8) of classes 0, 1, 1; f = (0.6, 0.8): affinity 0.6, 0.8, 1.0; beta 2:
    exp(-0.8), exp(-0.4), 1; alpha 3: class 0 gets 3 e^-0.8 = 1.347987, class 1 3 (e^-0.4 + 1) = 5.010960."""
    model = model_with_cache(clip, [[1, 0], [0, 1], [0.6, 0.8]], [0, 1, 1], ["cat", "dog"])
    f = torch.zeros(1, model.keys.shape[1])
    f[0, :2] = torch.tensor([0.6, 0.8])
    cache = model.cache_logits(f, ["cat", "dog"], 3.0, 2.0)
    torch.testing.assert_close(cache, torch.tensor([[1.347987, 5.010960]]), rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(model.cache_logits(f, ["dog", "cat"], 3.0, 2.0), cache[:, [1, 0]])
    assert model.cache_logits(f, ["dog", "wolf"], 3.0, 2.0)[0, 1] == 0  # a class with no cached shot: zero column
    values = F.one_hot(torch.tensor([0, 1, 1])).float()  # their cache_values
    affinity = f @ model.keys.T
    theirs = ((-1) * (2.0 - 2.0 * affinity)).exp() @ values * 3.0
    torch.testing.assert_close(cache, theirs)


def test_tip_logits_add_clips_100_cos_to_the_cache(clip):
    model = model_with_cache(clip, [[1, 0], [0, 1], [0.6, 0.8]], [0, 1, 1], ["cat", "dog"])
    f = F.normalize(torch.randn(4, model.keys.shape[1], generator=torch.Generator().manual_seed(1)), dim=-1)
    text = F.normalize(clip.encode_text(tokenize(["a photo of a cat.", "a photo of a dog."])), dim=-1)
    expected = 100.0 * f @ text.T + model.cache_logits(f, ["cat", "dog"], 1.17, 1.0)
    with torch.no_grad():
        torch.testing.assert_close(model.logits(f[:, None], ["cat", "dog"])[:, 0], expected, rtol=1e-5, atol=1e-4)


def test_imagenets_classifier_averages_its_seven_normalized_prompts(clip):
    run = load_params(FEWSHOT).train.recipe("tip_adapter_f", "imagenet", "few_shot", 4)
    assert [run.template, *run.extra_templates] == IMAGENET_ENSEMBLE
    model = create("tip_adapter_f", Backbone(clip), run)
    names = ["tench", "great_white_shark"]
    with torch.no_grad():
        ours = model.text_features(names)
        per = [F.normalize(clip.encode_text(tokenize([t.format(n.replace("_", " ")) for t in IMAGENET_ENSEMBLE])), dim=-1)
               for n in names]
    theirs = torch.stack([F.normalize(p.mean(0), dim=0) for p in per])
    torch.testing.assert_close(ours, theirs, rtol=1e-5, atol=1e-6)


def test_the_cache_keys_are_the_normalized_mean_embedding_over_the_augment_passes(clip):
    model = create("tip_adapter_f", Backbone(clip), recipe("tip_adapter_f", demo=False, augment_epochs=2))
    views = [torch.randn(3, 3, 32, 32, generator=torch.Generator().manual_seed(p)) for p in range(2)]
    labels = torch.tensor([1, 0, 1])
    batches = [(p, model.image_prefix(views[p][rows]), labels[rows]) for p in range(2) for rows in ([0, 1], [2])]
    model.init_from_passes(iter(batches))
    with torch.no_grad():
        theirs = F.normalize(torch.stack([clip.encode_image(v) for v in views]).mean(0), dim=-1)  # [3, E]
    torch.testing.assert_close(model.keys.detach(), theirs, rtol=1e-5, atol=1e-6)
    assert model.cache_labels.tolist() == [1, 0, 1] and model.init_passes() == 2
    assert [name for name, p in model.named_parameters() if p.requires_grad] == ["keys"]  # nothing else trains


def test_the_keys_train_on_the_cross_entropy_at_init_alpha_and_beta(clip):
    model = model_with_cache(clip, [[1, 0], [0, 1], [0.6, 0.8]], [0, 1, 1], ["cat", "dog"], init_alpha=2.0)
    images = torch.randn(2, 3, 32, 32, generator=torch.Generator().manual_seed(2))
    labels = torch.tensor([1, 0])
    step = model.step(model.image_prefix(images), labels, ["cat", "dog"])
    with torch.no_grad():
        f = F.normalize(clip.encode_image(images), dim=-1)
        text = F.normalize(clip.encode_text(tokenize(["a photo of a cat.", "a photo of a dog."])), dim=-1)
    keys = model.keys.detach().clone().requires_grad_(True)
    values = F.one_hot(torch.tensor([0, 1, 1])).float()
    theirs = 100.0 * f @ text.T + ((-1) * (1.0 - 1.0 * (f @ keys.T))).exp() @ values * 2.0
    loss = F.cross_entropy(theirs, labels)
    (grad,) = torch.autograd.grad(loss, keys)
    torch.testing.assert_close(step.logits, theirs, rtol=1e-5, atol=1e-4)
    torch.testing.assert_close(step.total, loss, rtol=1e-5, atol=1e-5)
    (ours,) = torch.autograd.grad(step.total, model.keys)
    torch.testing.assert_close(ours, grad, rtol=1e-4, atol=1e-6)


def test_the_keys_optimizer_and_schedule_are_main_pys(clip):
    """AdamW(lr, eps=1e-4) (weight decay: torch's 0.01), CosineAnnealingLR(train_epoch * len(loader)) per batch;
    300 shots at batch 256 with drop_last False: 2 batches per epoch, 40 in 20 epochs."""
    run = load_params(FEWSHOT).train.recipe("tip_adapter_f", "dtd", "few_shot", 16)
    model = model_with_cache(clip, [[1, 0]], [0], ["cat"])
    shots = Shots(paths=["x"] * 300, labels=[0] * 300, classnames=["cat"])
    schedule = schedule_of(run, shots, seed=1)
    assert (schedule.steps_per_epoch, schedule.total_steps) == (2, 40)
    loop = make_loop(model, run, schedule, devices.Precision(run.precision, torch.device("cpu")))
    group = loop.optimizer.param_groups[0]
    assert isinstance(loop.optimizer, torch.optim.AdamW) and group["params"] == [model.keys]
    assert (group["eps"], group["weight_decay"], group["betas"]) == (1e-4, 1e-2, (0.9, 0.999))
    param = torch.zeros(1, requires_grad=True)
    optimizer = torch.optim.AdamW([param], lr=1e-3, eps=1e-4)
    theirs = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, 20 * 2)
    expected = []
    for _ in range(40):
        expected.append(theirs.get_last_lr()[0])
        optimizer.step()
        theirs.step()
    factor = StepCosine(40, run.lr, run.min_lr)
    assert [1e-3 * factor(s) for s in range(40)] == pytest.approx(expected, rel=1e-9, abs=1e-15)
    assert expected[-1] > 0 and 1e-3 * factor(40) == pytest.approx(0.0, abs=1e-18)


def test_the_search_lists_are_search_hps():
    assert tip.grid(7, 200)[:3] == [0.1, 1 * 6.9 / 200 + 0.1, 2 * 6.9 / 200 + 0.1] and len(tip.grid(7, 200)) == 200
    assert tip.grid(3, 20)[-1] == pytest.approx(19 * 2.9 / 20 + 0.1) and tip.grid(3, 20)[-1] < 3
    assert tip.grid(4.1, 4) == pytest.approx([0.1, 1.1, 2.1, 3.1], rel=1e-15)


def test_the_search_keeps_the_first_strictly_best_pair_beta_outer():
    """clip: both samples say class 0; the cache adds beta to sample 1's class 1. Sample 1 is right once
    alpha · beta > 1: over beta, alpha in 0.1, 1.1, 2.1, 3.1 the first such pair (beta outer) is (1.1, 1.1);
    (2.1, 0.1) ... never beat it (a tie is not kept)."""
    clip_logits = torch.tensor([[1.0, 0.0], [1.0, 0.0]])
    cache = lambda beta: torch.tensor([[0.0, 0.0], [0.0, beta]])  # noqa: E731
    found = tip.search(clip_logits, cache, torch.tensor([0, 1]), [4.1, 4.1], [4, 4])
    assert found == pytest.approx({"beta": 1.1, "alpha": 1.1, "accuracy": 100.0}, rel=1e-15)
    none = tip.search(clip_logits, cache, torch.tensor([1, 1]), [1.1, 1.1], [2, 2])  # alpha · beta <= 0.36
    assert none == {"beta": 0.0, "alpha": 0.0, "accuracy": 0.0}  # nothing beats 0%: theirs stays at (0, 0)


def test_the_search_on_validation_features_sets_the_models_alpha_and_beta(clip):
    """search_validation: search_hp over 100 f W^T and the cache's logits of the validation features, its choice
    the model's alpha and beta from then on."""
    model = model_with_cache(clip, [[1, 0], [0, 1]], [0, 1], ["cat", "dog"], search_scale=[30.0, 30.0],
                             search_step=[6, 6])
    f = F.normalize(torch.randn(6, model.keys.shape[1], generator=torch.Generator().manual_seed(3)), dim=-1)
    f[:3, 0] += 2.0
    f[3:, 1] += 2.0
    f = F.normalize(f, dim=-1)  # three images near the cat's key, three near the dog's
    labels = [0, 0, 0, 1, 1, 1]
    with torch.no_grad():
        text = F.normalize(clip.encode_text(tokenize(["a photo of a cat.", "a photo of a dog."])), dim=-1)
    values = F.one_hot(torch.tensor([0, 1])).float()
    theirs = tip.search(100.0 * f @ text.T, lambda beta: ((-1) * (beta - beta * (f @ model.keys.detach().T))).exp()
                        @ values, torch.tensor(labels), [30.0, 30.0], [6, 6])
    found = model.search_validation(f[:, None], labels, ["cat", "dog"])
    assert found == pytest.approx(theirs, rel=1e-6)
    assert (float(model.cache_beta), float(model.cache_alpha)) == pytest.approx((found["beta"], found["alpha"]))
    assert found["accuracy"] > 50.0


@pytest.mark.parametrize("shots", SHOTS)
def test_the_few_shot_config_trains_tip_adapter_f_with_each_datasets_config(shots):
    params = load_params(FEWSHOT)
    assert "tip_adapter_f" in params.study.methods
    for dataset in params.study.few_shot.datasets:
        run = params.train.recipe("tip_adapter_f", dataset, "few_shot", shots)
        scale, alpha, epochs = CONFIGS[dataset]
        assert (run.search_scale, run.init_alpha, run.epochs) == (scale, alpha, epochs), dataset
        assert {key: run.get(key) for key in COMMON} == COMMON, dataset
        assert run.template == TEMPLATES[dataset], dataset
        for key, setting in run.settings.items():  # their configs' values: chosen at RN50, ours at ViT-B/16
            rn50 = key in CONFIG_KEYS
            assert setting.kind == ("ours" if rn50 else "authors"), (dataset, key)
            assert setting.source.startswith("gaopengcuhk/Tip-Adapter@d0e2d6f ") or key in UNREAD, (dataset, key)
            assert not rn50 or ("backbone: 'RN50'" in setting.source and "configs/" in setting.source), (dataset, key)
        assert run.extra_templates == (IMAGENET_ENSEMBLE[1:] if dataset == "imagenet" else [])


def test_a_dataset_without_their_config_takes_imagenets_as_our_choice():
    run = load_params(FEWSHOT).train.recipe("tip_adapter_f", "world_objects", "few_shot", 4)
    assert (run.search_scale, run.init_alpha, run.epochs) == ([7.0, 3.0], 1.17, 20)
    assert all(run.settings[key].kind == "ours" for key in ("search_scale", "init_alpha", "epochs", "template"))
    assert math.isclose(run.lr, 1e-3) and "backbone: 'RN50'" in run.settings["lr"].source  # their configs' lr


# --- through `dear train` --------------------------------------------------------------------

@pytest.fixture(scope="module")
def world(tmp_path_factory):
    from types import SimpleNamespace

    root = tmp_path_factory.mktemp("tip_world")
    fake_run.backbone(root / "backbone")
    fake_run.fewshot(root / "fewshot.parquet", root / "images")
    fake_run.params_file(root / "params.yaml", recipe={"augment_epochs": 2, "search_step": [20, 5]})
    return SimpleNamespace(root=root, backbone=root / "backbone", fewshot=root / "fewshot.parquet",
                           params=root / "params.yaml")


def train_tip(world, out, checkpoint):
    from dear.stages import train as stage

    inputs = stage.Inputs(method="tip_adapter_f", dataset="toy", seed=1, backbone=world.backbone,
                          fewshot=world.fewshot, roles=None)
    stage.run(load_params(world.params), inputs, stage.Outputs(folder=out, checkpoint=checkpoint))
    return out


def test_dear_train_builds_the_cache_trains_the_keys_per_step_and_searches_after(world, tmp_path):
    import pyarrow.parquet as pq

    from dear.model.clip import load_backbone
    from dear.methods.trained import load_trained

    out = train_tip(world, tmp_path / "run", tmp_path / "run.ckpt")
    log = pq.read_table(out / "train_log.parquet").to_pylist()
    assert len(log) == 2 * 4  # 16 base shots at batch 4 (the small params), 2 epochs
    assert [row["lr"] for row in log] == pytest.approx([1e-3 * (1 + math.cos(math.pi * s / 8)) / 2 for s in range(8)])
    model = load_trained(out / "model.pt", load_backbone(world.backbone))
    assert model.keys.shape[0] == 16 and model._names == fake_run.CLASSNAMES[:4]
    assert (float(model.cache_beta), float(model.cache_alpha)) != (1.0, 1.17)  # searched: grids from 0.1
    assert any(float(model.cache_beta) == pytest.approx(beta) for beta in tip.grid(7, 20))
    assert any(float(model.cache_alpha) == pytest.approx(alpha) for alpha in tip.grid(3, 5))


def test_a_resumed_run_rebuilds_the_same_cache_and_ends_with_the_same_bytes(world, tmp_path, monkeypatch):
    from dear.errors import DearError
    from dear.train import checkpoint as ckpt_module

    reference = train_tip(world, tmp_path / "reference", tmp_path / "reference.ckpt")
    monkeypatch.setattr(ckpt_module.torch, "save", fake_run.save_that_fills_the_disk(torch.save))
    with pytest.raises(DearError, match="disk is full"):
        train_tip(world, tmp_path / "run", tmp_path / "run.ckpt")
    monkeypatch.undo()
    assert torch.load(tmp_path / "run.ckpt", weights_only=True)["step"] == 2
    train_tip(world, tmp_path / "run", tmp_path / "run.ckpt")
    assert (tmp_path / "run" / "model.pt").read_bytes() == (reference / "model.pt").read_bytes()
