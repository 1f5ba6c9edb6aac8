"""Parity with MaxZanella/CLIP-LoRA: what its code computes, written out here with open_clip's own modules.

Read at MaxZanella/CLIP-LoRA@358f0d7, their head (run_utils.py, lora.py, main.py, loralib/, datasets/*.py: the
training path is 5f32cce's, see the recipe file). The reference below replaces each adapted block's
nn.MultiheadAttention of a copy of a small CLIP by PlainMultiheadAttentionLoRA's forward, restated: separate
q, k, v linears from the in-projection's rows, each plus scaling · B A x (scaling = alpha / √r), then
scaled_dot_product_attention and the output projection. The project's model (`internals.low_rank_qkv` inside
recomposed blocks) must give the same image and text features, training logits and loss on the same
parameters, to float32 tolerance; and its recipe, placement, schedule and prompt must be theirs.
"""

import copy
import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from dear.methods import clip_lora as ours_module
from dear.methods import create
from dear.config.params import load_params
from dear.train.data import Schedule, Shots
from dear.train.trainer import StepCosine, schedule_of
from tests import fake_run
from tests.methods_tools import Backbone, recipe, tokenize
from tests.tiny_clip import tiny_clip

TOL = dict(rtol=1e-4, atol=1e-5)
FEWSHOT = fake_run.ROOT / "configs/fewshot-vitb16.yaml"
SHOTS = (1, 2, 4, 8, 16)
# run_utils.py get_arguments() defaults and lora.py's optimizer and schedule
AUTHORS = {"rank": 2, "lora_alpha": 1.0, "dropout": 0.25, "encoder": "both", "position": "all",
           "matrices": ["q", "k", "v"], "lr": 2e-4, "iterations_per_shot": 500, "batch_size": 32, "optimizer": "adamw",
           "weight_decay": 1e-2, "schedule": "cosine_steps", "min_lr": 1e-6, "warmup_epochs": 0, "epochs": None,
           "crop_scale": [0.08, 1.0], "flip_prob": 0.5, "interpolation": "bicubic", "logit_scale": 100.0,
           "drop_last": False, "template": "a photo of a {}."}
# loralib/utils.py INDEX_POSITIONS_TEXT (= INDEX_POSITIONS_VISION['ViT-B/16'] for these names), 0-based
INDEX_POSITIONS = {"bottom": [0, 1, 2, 3], "mid": [4, 5, 6, 7], "up": [8, 9, 10, 11], "half-up": [6, 7, 8, 9, 10, 11],
                   "half-bottom": [0, 1, 2, 3, 4, 5], "top3": [9, 10, 11], "all": list(range(12))}


class ReferenceLoRAAttention(nn.Module):
    """PlainMultiheadAttentionLoRA's forward (batch-first), restated: q_proj, k_proj, v_proj copied from the
    in-projection's rows, LinearLoRA's `original_output + (x @ (B @ A).T) * scaling` on the listed ones."""

    def __init__(self, attn: nn.MultiheadAttention, update):
        super().__init__()
        self.attn, self.update, self.heads = attn, update, attn.num_heads

    def forward(self, query, key, value, need_weights=False, attn_mask=None, **kwargs):
        D = self.attn.embed_dim
        outputs = []
        for index, m in enumerate("qkv"):
            w = self.attn.in_proj_weight[index * D:(index + 1) * D]
            b = self.attn.in_proj_bias[index * D:(index + 1) * D]
            out = query @ w.T + b
            if m in self.update.matrices:
                out = out + (query @ (self.update.b[m] @ self.update.a[m]).T) * self.update.scaling
            outputs.append(out.view(*query.shape[:2], self.heads, D // self.heads).transpose(1, 2))
        mask = None if attn_mask is None else attn_mask.to(query.dtype)
        heads = F.scaled_dot_product_attention(*outputs, attn_mask=mask)  # [B, H, T, d]
        return self.attn.out_proj(heads.transpose(1, 2).reshape(query.shape)), None


def reference_clip(clip, model):
    """A copy of `clip` whose adapted blocks run ReferenceLoRAAttention with the model's (shared) updates."""
    twin = copy.deepcopy(clip)
    for blocks, chosen, updates in ((twin.transformer.resblocks, model.text_layers, model.text_updates),
                                    (twin.visual.transformer.resblocks, model.image_layers, model.image_updates)):
        for layer, update in zip(chosen, updates):
            blocks[layer - 1].attn = ReferenceLoRAAttention(blocks[layer - 1].attn, update)
    return twin.eval()


def trained_model(clip, seed=1, **changes):
    model = create("clip_lora", Backbone(clip), recipe("clip_lora", demo=False, **changes), seed=seed)
    with torch.no_grad():
        for index, b in enumerate(p for name, p in model.named_parameters() if ".b." in name):
            b.normal_(0, 0.05, generator=torch.Generator().manual_seed(index))  # B away from zero, as after training
    return model


@pytest.fixture(scope="module")
def clip():
    return tiny_clip()


def test_lora_sits_on_q_k_v_of_every_layer_of_both_towers_scaled_alpha_over_sqrt_r(clip):
    model = create("clip_lora", Backbone(clip), recipe("clip_lora", demo=False))
    assert model.text_layers == [1, 2] and model.image_layers == [1, 2, 3] and model.frozen_depth == 0
    assert all(update.matrices == ("q", "k", "v") for update in [*model.text_updates, *model.image_updates])
    assert all(update.scaling == pytest.approx(1 / math.sqrt(2), rel=1e-12)  # lora_alpha / math.sqrt(r), not / r
               for update in [*model.text_updates, *model.image_updates])
    trainable = {name: p.shape for name, p in model.named_parameters() if p.requires_grad}
    assert len(trainable) == (2 + 3) * 3 * 2 and not any(name.startswith("clip.") for name in trainable)
    assert {shape for name, shape in trainable.items() if ".a." in name} == {(2, 64)}  # A [r, D]
    assert {shape for name, shape in trainable.items() if ".b." in name} == {(64, 2)}  # B [D, r], zero at start
    assert all(float(p.detach().abs().max()) == 0.0 for name, p in model.named_parameters() if ".b." in name)
    text_only = create("clip_lora", Backbone(clip), recipe("clip_lora", demo=False, encoder="text", matrices=["v"]))
    assert text_only.image_layers == [] and text_only.frozen_depth == 3 and text_only.text_updates[0].matrices == ("v",)


@pytest.mark.parametrize("position", sorted(INDEX_POSITIONS))
def test_positions_are_loralibs_on_a_12_layer_tower(position):
    assert ours_module.layers(position, 12) == [i + 1 for i in INDEX_POSITIONS[position]]


def test_a_position_of_the_12_layer_sets_on_another_depth_is_an_error(clip):
    from dear.errors import DearError

    assert ours_module.layers("all", 3) == [1, 2, 3]
    with pytest.raises(DearError, match="12-layer tower"):
        create("clip_lora", Backbone(clip), recipe("clip_lora", demo=False, position="up"))


def test_image_and_text_features_are_clip_loras_forward(clip):
    model = trained_model(clip).eval()
    twin = reference_clip(clip, model)
    images = torch.randn(3, 3, 32, 32, generator=torch.Generator().manual_seed(4))
    names = ["sea_lion", "red car", "tree"]
    with torch.no_grad():
        ours_image = model.encode(model.image_prefix(images))[:, 0]
        ours_text = model.text_features(names)
        theirs_image = F.normalize(twin.encode_image(images), dim=-1)
        theirs_text = F.normalize(twin.encode_text(tokenize([f"a photo of a {n.replace('_', ' ')}." for n in names])),
                                  dim=-1)
        untouched = F.normalize(clip.encode_image(images), dim=-1)
    torch.testing.assert_close(ours_image, theirs_image, **TOL)
    torch.testing.assert_close(ours_text, theirs_text, **TOL)
    assert not torch.allclose(ours_image, untouched, atol=1e-3)  # the updates act


def test_training_logits_loss_and_gradients_are_clip_loras(clip):
    """lora.py's step without dropout: 100 · cos(image, text) of the text recomputed with LoRA, cross-entropy."""
    model = trained_model(clip, dropout=0.0).train()
    twin = reference_clip(clip, model)
    images = torch.randn(4, 3, 32, 32, generator=torch.Generator().manual_seed(5))
    labels = torch.tensor([0, 2, 1, 2])
    names = ["dog", "cat", "tree"]
    step = model.step(model.image_prefix(images), labels, names)
    ours_grads = torch.autograd.grad(step.total, [p for p in model.parameters() if p.requires_grad])
    image = F.normalize(twin.encode_image(images), dim=-1)
    text = F.normalize(twin.encode_text(tokenize([f"a photo of a {n}." for n in names])), dim=-1)
    logits = 100 * image @ text.t()
    loss = F.cross_entropy(logits, labels)
    theirs_grads = torch.autograd.grad(loss, [p for p in model.parameters() if p.requires_grad])
    torch.testing.assert_close(step.logits, logits, **TOL)
    torch.testing.assert_close(step.total, loss, **TOL)
    for ours, theirs in zip(ours_grads, theirs_grads):
        torch.testing.assert_close(ours, theirs, rtol=1e-3, atol=1e-6)


def test_dropout_is_on_while_training_only(clip):
    model = trained_model(clip)
    assert {d.p for u in model.image_updates for d in u.dropout.values()} == {0.25}
    images = torch.randn(2, 3, 32, 32, generator=torch.Generator().manual_seed(6))
    prefix = model.image_prefix(images)
    model.train()
    torch.manual_seed(0)
    first = model.encode(prefix)
    assert not torch.allclose(first, model.encode(prefix))  # fresh masks each call
    model.eval()
    torch.testing.assert_close(model.encode(prefix), model.encode(prefix), rtol=0, atol=0)


@pytest.mark.parametrize("shots", SHOTS)
def test_learning_rate_of_every_iteration_is_cosine_annealing_over_n_iters_times_shots(shots):
    """lora.py: CosineAnnealingLR(optimizer, total_iters = n_iters * shots, eta_min=1e-6), stepped per batch."""
    run = load_params(FEWSHOT).train.recipe("clip_lora", "dtd", "few_shot", shots)
    classes = 3
    schedule = schedule_of(run, Shots(paths=["x"] * (shots * classes), labels=[i % classes for i in range(shots * classes)],
                                      classnames=["a", "b", "c"]), seed=1)
    total = 500 * shots
    assert schedule.total_steps == total and schedule.steps_per_epoch == -(-(shots * classes) // 32)
    factor = StepCosine(schedule.total_steps, run.lr, run.min_lr)
    param = torch.zeros(1, requires_grad=True)
    optimizer = torch.optim.AdamW([param], lr=2e-4, weight_decay=1e-2, betas=(0.9, 0.999))
    theirs = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, total, eta_min=1e-6)
    expected = []
    for _ in range(total):
        expected.append(theirs.get_last_lr()[0])
        optimizer.step()
        theirs.step()
    assert [run.lr * factor(step) for step in range(total)] == pytest.approx(expected, rel=1e-9, abs=1e-15)


def test_a_run_stops_mid_epoch_and_keeps_the_last_short_batch():
    """`while count_iters < total_iters` over a shuffled loader with drop_last=False: 10 shots at batch 4 give
    batches of 4, 4, 2 per epoch; 5 steps end inside the second epoch."""
    schedule = Schedule(n=10, batch_size=4, epochs=2, seed=0, drop_last=False, steps=5)
    batches = list(schedule.batches(0))
    assert [len(b) for b in batches] == [4, 4, 2, 4, 4] and [b[0][0] for b in batches] == [0, 0, 0, 1, 1]
    assert Schedule(n=10, batch_size=4, epochs=2, seed=0).steps_per_epoch == 2  # Dassl's rule stays the default


@pytest.mark.parametrize("shots", SHOTS)
def test_the_few_shot_config_trains_clip_lora_with_its_one_recipe(shots):
    params = load_params(FEWSHOT)
    assert "clip_lora" in params.study.methods
    for dataset in params.study.few_shot.datasets:
        run = params.train.recipe("clip_lora", dataset, "few_shot", shots)
        assert {key: run.get(key) for key in AUTHORS} == AUTHORS, dataset
        assert run.precision == "amp" and run.settings["precision"].kind == "ours"
        others = [key for key, s in run.settings.items() if s.kind != "authors"]
        assert others == ["precision"], others  # every other value is theirs (Dassl's unread keys: their defaults)
        unread = ("momentum", "warmup_lr")  # Dassl's keys their AdamW without warm-up never reads
        assert all(s.source.startswith("MaxZanella/CLIP-LoRA@358f0d7 ") for k, s in run.settings.items()
                   if k not in unread and k != "precision"), dataset


def test_the_prompt_is_a_photo_of_a_name_with_spaces(clip):
    model = create("clip_lora", Backbone(clip), recipe("clip_lora", demo=False))
    texts = model.prompt_input(["golden_retriever"], model.recipe.template).tokens
    assert torch.equal(texts[0], tokenize(["a photo of a golden retriever."])[0, :texts.shape[1]])


def test_dear_train_runs_n_iters_times_shots_steps_and_the_model_evaluates(tmp_path):
    """16 base shots (4 per class) at the small params' batch 4: iterations_per_shot 3 -> 12 steps, 3 epochs of 4,
    the lr of every step torch's cosine to 1e-6; the saved model scores base and novel classes."""
    import pyarrow.parquet as pq

    from dear.model.clip import load_backbone
    from dear.methods.trained import load_trained
    from dear.stages import train as stage

    fake_run.backbone(tmp_path / "backbone")
    fake_run.fewshot(tmp_path / "fewshot.parquet", tmp_path / "images")
    params = fake_run.params_file(tmp_path / "params.yaml", recipe={"iterations_per_shot": 3})
    inputs = stage.Inputs(method="clip_lora", dataset="toy", seed=1, backbone=tmp_path / "backbone",
                          fewshot=tmp_path / "fewshot.parquet", roles=None)
    stage.run(load_params(params), inputs, stage.Outputs(folder=tmp_path / "run", checkpoint=tmp_path / "run.ckpt"))
    log = pq.read_table(tmp_path / "run" / "train_log.parquet").to_pylist()
    assert [row["epoch"] for row in log] == [0] * 4 + [1] * 4 + [2] * 4
    assert [row["lr"] for row in log] == pytest.approx([1e-6 + (2e-4 - 1e-6) * (1 + math.cos(math.pi * s / 12)) / 2
                                                        for s in range(12)])
    model = load_trained(tmp_path / "run" / "model.pt", load_backbone(tmp_path / "backbone"), None, load_params(params))
    with torch.no_grad():
        logits = model.logits(model.encode(model.image_prefix(torch.randn(2, 3, 32, 32))), fake_run.CLASSNAMES)
    assert logits.shape == (2, 1, 8) and torch.isfinite(logits).all()
    assert any(float(p.detach().abs().max()) > 0 for name, p in model.named_parameters() if ".b." in name)
