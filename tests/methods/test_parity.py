"""Parity with the authors' code: what CoOp's, MMRL's and Dassl's code computes, written out in the tests.

The project holds none of the authors' code. Each reference below restates,
step by step and with open_clip's own modules (its blocks called as modules,
not `dear.model.internals`), what their code does on a batch: CoOp's
PromptLearner and TextEncoder (KaiyangZhou/CoOp trainers/coop.py), MMRL's
representation learner, its towers and MMRL_Loss (yunncheng/MMRL
trainers/mmrl.py, clip/model_mmrl.py). From the same parameters on the same
batch of a small CLIP, the project's model must give the same training
logits, loss, gradient of every learnable tensor, and base and novel test
logits, to float32 tolerance.
"""

import math

import pytest
import torch
import torch.nn.functional as F

from dear.methods import create
from dear.methods.prompts import context
from dear.compute import transforms
from dear.config.params import load_params
from dear.train.data import Schedule
from dear.train.trainer import EpochCosine
from tests import fake_run
from tests.floats import GRADIENT_ULPS, assert_same_up_to_rounding
from tests.methods_tools import Backbone, norm, recipe, tokenize

BASE = ["sea_lion", "golden_retriever", "red car"]
NOVEL = ["tree", "hot_dog"]
TOL = dict(rtol=1e-4, atol=1e-5)


def their_text(clip, embeddings, eot):
    """CoOp's TextEncoder: positions, the transformer under CLIP's causal mask, ln_final, the EOT row, projection."""
    x = embeddings + clip.positional_embedding
    x = clip.transformer(x, attn_mask=clip.attn_mask)
    return clip.ln_final(x)[torch.arange(x.shape[0]), eot] @ clip.text_projection


# --- CoOp --------------------------------------------------------------------------------

def their_coop_logits(clip, ctx, classnames, images):
    """CoOp's PromptLearner ('end' class token) and CustomCLIP.forward."""
    names = [name.replace("_", " ") for name in classnames]
    tokenized = tokenize([f"a photo of a {name}." for name in names])  # prompt_prefix + " " + name + "."
    embedding = clip.token_embedding(tokenized)
    prompts = torch.cat([embedding[:, :1], ctx.unsqueeze(0).expand(len(names), -1, -1), embedding[:, 1 + 4:]], 1)
    text = norm(their_text(clip, prompts, tokenized.argmax(-1)))
    image = norm(clip.encode_image(images))
    return clip.logit_scale.exp() * image @ text.t()


def test_coop_matches_coops_code_on_a_batch(clip, batch):
    images, labels = batch
    ours = create("coop", Backbone(clip), recipe("coop", demo=False))
    ctx0 = clip.token_embedding(tokenize(["a photo of a"]))[0, 1:5].detach()  # ctx_init "a photo of a": 4 vectors
    torch.testing.assert_close(ours.context.detach(), ctx0)
    theirs = ctx0.clone().requires_grad_(True)

    step = ours.step(ours.image_prefix(images), labels, BASE)
    expected = their_coop_logits(clip, theirs, BASE, images)
    loss = F.cross_entropy(expected, labels)
    torch.testing.assert_close(step.logits, expected, **TOL)
    torch.testing.assert_close(step.total, loss, **TOL)
    step.total.backward()
    loss.backward()
    assert_same_up_to_rounding(ours.context.grad, theirs.grad, per_vector=False, ulps=GRADIENT_ULPS)
    with torch.no_grad():  # the novel classes' test logits: the same context, their class names
        novel = ours.logits(ours.encode(ours.image_prefix(images)), NOVEL)[:, 0]
        torch.testing.assert_close(novel, their_coop_logits(clip, theirs, NOVEL, images), **TOL)


def test_coops_prompt_and_token_positions():
    prompt = context("a photo of a", 16, "golden_retriever")
    assert (prompt.text, prompt.learnable, prompt.shown) == ("a photo of a golden retriever.", 4,
                                                             "X X X X golden retriever.")
    ids = tokenize([prompt.text])[0]
    words = tokenize(["a photo of a"])[0]
    assert ids[:5].tolist() == words[:5].tolist()  # [SOT, a, photo, of, a]: positions 1-4 become the context
    assert context("", 16, "dog").shown == " ".join(["X"] * 16) + " dog."


# --- MMRL --------------------------------------------------------------------------------

def their_mmrl(clip, parts, classnames, images, rep_layers, template="a photo of a {}."):
    """MMRL's CustomCLIP.forward: (logits, logits_rep, image_features, text_features), normalized features."""
    bank, r2v, r2t, proj_rep = parts
    n = bank.shape[0]
    visual_tokens = [layer(bank) for layer in r2v]
    text_tokens = [layer(bank) for layer in r2t]
    # image: the rep tokens after CLS from the first REP_LAYER, replaced at every later one
    x = clip.visual._embeds(images)
    counter = 0
    for index, block in enumerate(clip.visual.transformer.resblocks, 1):
        if index in rep_layers:
            rest = x[:, 1:] if index == rep_layers[0] else x[:, 1 + n:]
            x = torch.cat([x[:, :1], visual_tokens[counter].expand(x.shape[0], -1, -1), rest], 1)
            counter += 1
        x = block(x)
    image = clip.visual.ln_post(x[:, 0]) @ clip.visual.proj
    rep = clip.visual.ln_post(x[:, 1:1 + n]).mean(1) @ proj_rep
    # text: inserted after SOT, causal mask over the grown sequence, EOT index + n
    tokenized = tokenize([template.format(name.replace("_", " ")) for name in classnames])
    y = clip.token_embedding(tokenized) + clip.positional_embedding
    mask, counter = clip.attn_mask, 0
    for index, block in enumerate(clip.transformer.resblocks, 1):
        if index in rep_layers:
            rest = y[:, 1:] if index == rep_layers[0] else y[:, 1 + n:]
            y = torch.cat([y[:, :1], text_tokens[counter].expand(y.shape[0], -1, -1), rest], 1)
            counter += 1
        if index >= rep_layers[0]:
            mask = torch.full((y.shape[1], y.shape[1]), float("-inf")).triu_(1)
        y = block(y, attn_mask=mask)
    text = clip.ln_final(y)[torch.arange(y.shape[0]), tokenized.argmax(-1) + n] @ clip.text_projection
    image, rep, text = norm(image), norm(rep), norm(text)
    return 100.0 * image @ text.t(), 100.0 * rep @ text.t(), image, text


def test_mmrl_matches_mmrls_code_on_a_batch(clip, batch):
    images, labels = batch
    run = recipe("mmrl", dataset="oxford_pets", demo=False, start_layer=2)  # tiny CLIP: REP_LAYERS [2, 3] / [2]
    ours = create("mmrl", Backbone(clip), run, seed=5)
    assert (run.reg_weight, run.alpha, run.logit_scale, run.template) == (0.2, 0.7, 100.0, "a photo of a {}, a type of pet.")
    for aligners in (ours.vision_aligners, ours.text_aligners):  # _get_clones: every layer starts equal
        assert all(torch.equal(a.weight, aligners[0].weight) and torch.equal(a.bias, aligners[0].bias)
                   for a in aligners)
    theirs = [ours.bank.detach().clone().requires_grad_(True),
              [_copy(layer) for layer in ours.vision_aligners], [_copy(layer) for layer in ours.text_aligners],
              ours.projection.detach().clone().requires_grad_(True)]
    template = run.template

    prefix = ours.image_prefix(images)
    step = ours.step(prefix, labels, BASE, ours.frozen_image(prefix))
    logits, logits_rep, image, text = their_mmrl(clip, theirs, BASE, images, [2, 3], template)
    loss = their_mmrl_loss(clip, logits, logits_rep, image, text, images, BASE, labels, run, template)
    torch.testing.assert_close(step.logits, 0.7 * logits + 0.3 * logits_rep, **TOL)  # logits_fusion
    torch.testing.assert_close(step.terms["cls"], F.cross_entropy(logits, labels), **TOL)
    torch.testing.assert_close(step.terms["attr"], F.cross_entropy(logits_rep, labels), **TOL)
    torch.testing.assert_close(step.total, loss, **TOL)
    step.total.backward()
    loss.backward()
    torch.testing.assert_close(ours.bank.grad, theirs[0].grad, **TOL)
    torch.testing.assert_close(ours.projection.grad, theirs[3].grad, **TOL)
    for mine, their in [*zip(ours.vision_aligners, theirs[1]), *zip(ours.text_aligners, theirs[2])]:
        assert_same_up_to_rounding(mine.weight.grad, their.weight.grad, per_vector=False, ulps=GRADIENT_ULPS)
        assert_same_up_to_rounding(mine.bias.grad, their.bias.grad, per_vector=False, ulps=GRADIENT_ULPS)
    with torch.no_grad():  # test: base classes fused, novel classes the CLS logits alone (decoupled inference)
        for classes, seen in ((BASE, True), (NOVEL, False)):
            streams = ours.logits(ours.encode(prefix), classes)
            logits, logits_rep, _, _ = their_mmrl(clip, theirs, classes, images, [2, 3], template)
            expected = 0.7 * logits + 0.3 * logits_rep if seen else logits
            torch.testing.assert_close(ours.output(streams, ours.alpha, seen, "fused"), expected, **TOL)


def their_mmrl_loss(clip, logits, logits_rep, image, text, images, classnames, labels, run, template):
    """MMRL_Loss: alpha CE + (1 - alpha) CE_rep + REG_WEIGHT (1 - mean cos) for the image and the text features,
    against the zero-shot CLIP's features of the same images and the same hand-written prompts."""
    image_clip = norm(clip.encode_image(images))
    text_clip = norm(clip.encode_text(tokenize([template.format(n.replace("_", " ")) for n in classnames])))
    reg_img = 1 - torch.mean(F.cosine_similarity(image, image_clip, dim=1))
    reg_txt = 1 - torch.mean(F.cosine_similarity(text, text_clip, dim=1))
    return run.alpha * F.cross_entropy(logits, labels) + (1 - run.alpha) * F.cross_entropy(logits_rep, labels) \
        + run.reg_weight * reg_img + run.reg_weight * reg_txt


def _copy(layer):
    clone = torch.nn.Linear(layer.in_features, layer.out_features)
    clone.load_state_dict(layer.state_dict())
    return clone


def test_mmrls_trainable_parts_and_their_init(clip):
    ours = create("mmrl", Backbone(clip), recipe("mmrl", demo=False, start_layer=2), seed=1)
    trainable = sorted(n.split(".")[0] for n, p in ours.named_parameters() if p.requires_grad)
    assert set(trainable) == {"bank", "vision_aligners", "text_aligners", "projection"}
    assert abs(float(ours.bank.detach().std()) - 0.02) < 0.01  # nn.init.normal_(compound_rep_tokens, std=0.02)
    width = ours.projection.shape[0]
    assert abs(float(ours.projection.detach().std()) - width ** -0.5) < 0.3 * width ** -0.5  # scale * randn(width, dim)


# --- Dassl's mechanics ---------------------------------------------------------------------

def dassl_lr(epoch: int, lr: float, epochs: int, warmup: int, warmup_lr: float) -> float:
    """The lr of 1-based epoch `epoch`: ConstantWarmupScheduler over CosineAnnealingLR(T_max=epochs),
    WARMUP_RECOUNT True, stepped once per epoch: the warm-up epochs at warmup_lr, then the cosine from its
    start (epoch warmup+1 at lr), so the last epoch is not at zero."""
    if epoch <= warmup:
        return warmup_lr
    return lr * (1 + math.cos(math.pi * (epoch - warmup - 1) / epochs)) / 2


def our_epoch_lrs(run, steps_per_epoch: int) -> list[float]:
    """The lr our trainer's schedule (EpochCosine) gives the first step of every epoch of a resolved recipe."""
    factor = EpochCosine(steps_per_epoch=steps_per_epoch, epochs=run.epochs, warmup_epochs=run.warmup_epochs,
                         warmup_factor=run.warmup_lr / run.lr)
    return [run.lr * factor(steps_per_epoch * e) for e in range(run.epochs)]


@pytest.mark.parametrize("method,dataset,protocol,expected", [
    ("coop", "oxford_pets", "base_to_novel", (2e-3, 200, 1)),
    ("coop", "imagenet", "base_to_novel", (2e-3, 50, 1)),
    ("mmrl", "eurosat", "base_to_novel", (1e-3, 10, 1)),
    ("mmrl", "imagenet", "base_to_novel", (1e-3, 5, 1)),
    ("mmrl", "imagenet", "transfer", (1e-3, 1, 0)),
])
def test_learning_rate_of_every_epoch_is_dassls(method, dataset, protocol, expected):
    run = load_params(fake_run.ROOT / "configs/paper-vitb16.yaml").train.recipe(method, dataset, protocol)
    assert (run.lr, run.epochs, run.warmup_epochs) == expected
    ours = our_epoch_lrs(run, steps_per_epoch=3)
    assert ours == pytest.approx([dassl_lr(e, run.lr, run.epochs, run.warmup_epochs, run.warmup_lr)
                                  for e in range(1, run.epochs + 1)], rel=1e-12)
    assert ours[-1] > 0
    if run.warmup_epochs:
        assert ours[0] == run.warmup_lr and ours[1] == run.lr


def test_five_epochs_at_3_5e_3_as_recipes_md_lists_them():
    factor = EpochCosine(steps_per_epoch=1, epochs=5, warmup_epochs=1, warmup_factor=1e-5 / 3.5e-3)
    lrs = [3.5e-3 * factor(e) for e in range(5)]
    assert lrs == pytest.approx([1e-5, 3.5e-3, 3.17e-3, 2.29e-3, 1.21e-3], rel=3e-3)  # MaPLe's, to 3 digits


@pytest.mark.parametrize("n,batch,steps,last", [(304, 32, 9, 32), (320, 32, 10, 32), (20, 32, 1, 20), (7, 4, 1, 4)])
def test_the_last_short_batch_is_dropped_when_the_shots_hold_a_full_batch(n, batch, steps, last):
    """Dassl: drop_last = is_train and len(data_source) >= batch_size."""
    schedule = Schedule(n=n, batch_size=batch, epochs=2, seed=0)
    epoch = list(schedule.batches(0))[:steps]
    assert schedule.steps_per_epoch == steps and len(epoch[-1]) == last
    assert schedule.total_steps == 2 * steps


def test_test_transform_is_short_side_then_centre_crop():
    from PIL import Image

    image = Image.new("RGB", (300, 200))
    image.paste((255, 0, 0), (0, 0, 30, 200))  # a red band at the left edge: cut by the centre crop
    pixels = transforms.test_transform("bicubic", 224, (0, 0, 0), (1, 1, 1))(image)
    assert pixels.shape == (3, 224, 224)  # 200 -> 224 on the short side (336 wide), then 224 from the middle
    assert float(pixels[0, :, :10].max()) == 0.0


# --- the paper config is the authors' recipes ---------------------------------------------

PAPER = fake_run.ROOT / "configs/paper-vitb16.yaml"
MMRL_REG = {"imagenet": 0.5, "caltech-101": 0.5, "oxford_pets": 0.2, "stanford_cars": 7.0, "oxford_flowers": 4.0,
            "food-101": 5.0, "fgvc_aircraft": 6.0, "sun397": 6.0, "dtd": 6.0, "eurosat": 0.01, "ucf101": 3.0}
TEMPLATES = {"oxford_pets": "a photo of a {}, a type of pet.", "oxford_flowers": "a photo of a {}, a type of flower.",
             "fgvc_aircraft": "a photo of a {}, a type of aircraft.", "dtd": "{} texture.",
             "eurosat": "a centered satellite photo of {}.", "food-101": "a photo of {}, a type of food.",
             "ucf101": "a photo of a person doing {}."}


def test_the_paper_config_trains_zeroshot_coop_and_mmrl_exactly_as_their_authors():
    params = load_params(PAPER)
    jobs = [(d, "base_to_novel") for d in params.study.base_to_novel] + [(params.study.transfer.source, "transfer")]
    for method in ("zeroshot", "coop", "mmrl"):
        for dataset, protocol in jobs:
            run = params.train.recipe(method, dataset, protocol)
            ours = {k: s.source for k, s in run.settings.items() if s.kind != "authors"}
            assert not ours, (method, dataset, protocol, ours)
    for dataset, protocol in jobs:
        coop = params.train.recipe("coop", dataset, protocol)
        assert (coop.optimizer, coop.lr, coop.batch_size, coop.warmup_epochs, coop.warmup_lr, coop.ctx_init,
                coop.crop_scale, coop.flip_prob, coop.interpolation, coop.precision, coop.views) == \
            ("sgd", 2e-3, 32, 1, 1e-5, "a photo of a", [0.08, 1.0], 0.5, "bicubic", "fp16", None)
        assert coop.epochs == (50 if dataset == "imagenet" else 200)
        mmrl = params.train.recipe("mmrl", dataset, protocol)
        transfer = protocol == "transfer"
        assert (mmrl.optimizer, mmrl.lr, mmrl.crop_scale, mmrl.tokens, mmrl.start_layer, mmrl.alpha, mmrl.precision,
                mmrl.logit_scale, mmrl.fade_in_epochs) == ("adamw", 1e-3, [0.5, 1.0], 5, 6, 0.7, "amp", 100.0, 0.0)
        assert (mmrl.batch_size, mmrl.epochs, mmrl.warmup_epochs) == \
            ((32, 1, 0) if transfer else (32, 5, 1) if dataset == "imagenet" else (4, 10, 1))
        assert mmrl.reg_weight == (0.2 if transfer else MMRL_REG[dataset])
        assert mmrl.rep_dim == (2048 if dataset == "eurosat" and not transfer else 512)
        template = TEMPLATES.get(dataset, "a photo of a {}.")
        assert mmrl.template == template and params.train.recipe("zeroshot", dataset, protocol).template == template


def test_dear_takes_mmrls_recipe_as_our_choice():
    params = load_params(PAPER)
    for dataset, protocol in (("eurosat", "base_to_novel"), ("imagenet", "transfer")):
        dear, mmrl = (params.train.recipe(m, dataset, protocol) for m in ("dear", "mmrl"))
        for key in ("optimizer", "lr", "epochs", "warmup_epochs", "batch_size", "crop_scale", "reg_weight", "rep_dim",
                    "template", "precision", "alpha"):
            assert dear.get(key) == mmrl.get(key), key
            assert dear.settings[key].kind == "ours" and dear.settings[key].source.startswith("as mmrl:")
