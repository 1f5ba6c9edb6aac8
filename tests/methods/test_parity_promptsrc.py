"""Parity with PromptSRC's code (muzairkhattak/PromptSRC@8be7dcf), written out in the tests.

The project holds none of the authors' code. The references below restate,
step by step and with open_clip's own modules (blocks called as modules, not
`dear.model.internals`), what their code computes: VLPromptLearner and
CustomCLIP (trainers/promptsrc.py), the IVLP blocks and VisionTransformer
(clip/model.py), the loss of PromptSRC.forward_backward and its Gaussian
prompt aggregation (get_gauss, state_dict_weighting, state_dict_add). From
the same parameters on the same batch of a small CLIP the project's model
must give the same training logits, each loss term, the total, the gradient
of every learnable tensor, and the base and novel test logits.
"""

import hashlib
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from dear.compute.device import Precision
from dear.methods.base import in_precision
from dear.errors import DearError
from dear.methods import create
from dear.config.params import load_params
from dear.methods.averaging import gaussian_weights
from tests import fake_run
from tests.floats import assert_same_up_to_rounding
from tests.methods_tools import Backbone, norm, recipe, tokenize
from tests.methods.test_parity import dassl_lr, our_epoch_lrs
from tests.tiny_clip import tiny_clip

BASE = ["sea_lion", "golden_retriever", "red car"]
NOVEL = ["tree", "hot_dog"]
TOL = dict(rtol=1e-4, atol=1e-5)
TINY = dict(vision_depth=3, text_depth=2)  # the tiny CLIP has 3 image and 2 text layers (theirs: 9 of 12)
# sha256 of "\n".join(IMAGENET_TEMPLATES) of trainers/imagenet_templates.py (60 templates)
IMAGENET_TEMPLATES_SHA256 = "dc3398ed3ffc7c259342582bc0f36d7ac66c4dee17981a37b77b0fc9c23d4f72"


# --- their forward ---------------------------------------------------------------------------

def their_text(clip, ctx, text_deep, classnames, n_ctx=4):
    """VLPromptLearner.forward + TextEncoder over ResidualAttentionBlock_IVLP (add_prompt at blocks 1..depth-1)."""
    names = [name.replace("_", " ") for name in classnames]
    tokenized = tokenize([f"a photo of a {name}." for name in names])  # prompt_prefix + " " + name + "."
    embedding = clip.token_embedding(tokenized)
    x = torch.cat([embedding[:, :1], ctx.expand(len(names), -1, -1), embedding[:, 1 + n_ctx:]], 1)
    x = x + clip.positional_embedding
    for i, block in enumerate(clip.transformer.resblocks):
        if 1 <= i <= len(text_deep):  # prefix x[:1], this layer's VPT_shallow, suffix x[1 + n_ctx_text:]
            x = torch.cat([x[:, :1], text_deep[i - 1].expand(x.shape[0], -1, -1), x[:, 1 + n_ctx:]], 1)
        x = block(x, attn_mask=clip.attn_mask)
    return clip.ln_final(x)[torch.arange(x.shape[0]), tokenized.argmax(-1)] @ clip.text_projection


def their_image(clip, vpt, images):
    """VisionTransformer (IVLP): VPT appended after the positional embeddings, before ln_pre; blocks 1..depth-1
    drop the last n_ctx_visual outputs and append their own VPT_shallow."""
    visual = clip.visual
    x = visual.conv1(images)
    x = x.reshape(x.shape[0], x.shape[1], -1).permute(0, 2, 1)
    x = torch.cat([visual.class_embedding + torch.zeros(x.shape[0], 1, x.shape[-1]), x], 1)
    x = x + visual.positional_embedding
    n = vpt.shape[1]
    x = torch.cat([x, vpt[0].expand(x.shape[0], -1, -1)], 1)
    x = visual.ln_pre(x)
    for i, block in enumerate(visual.transformer.resblocks):
        if 1 <= i < vpt.shape[0]:
            x = torch.cat([x[:, : x.shape[1] - n], vpt[i].expand(x.shape[0], -1, -1)], 1)
        x = block(x)
    return visual.ln_post(x[:, 0]) @ visual.proj


def their_forward(clip, parts, classnames, images):
    """CustomCLIP.forward: (logits, normalized text features, normalized image features)."""
    ctx, vpt, text_deep = parts
    text, image = norm(their_text(clip, ctx, text_deep, classnames)), norm(their_image(clip, vpt, images))
    return clip.logit_scale.exp() * image @ text.t(), text, image


def their_loss(clip, logits, text, image, images, classnames, labels, templates, weights=(25.0, 10.0)):
    """forward_backward (fp16 branch): CE + L_SCL_logits + 25 L1 text + 10 L1 image, with the frozen CLIP's
    fixed_embeddings (per-template encode_text, cat over templates, mean, then normalized) and zero-shot image
    features of the same images. Returns (ce, kl, text term, image term, total), the terms with their weights."""
    names = [name.replace("_", " ") for name in classnames]
    teacher = [clip.encode_text(tokenize([t.replace("{}", n) for n in names])).unsqueeze(1) for t in templates]
    fixed = norm(torch.cat(teacher, dim=1).mean(dim=1))
    zero_shot = norm(clip.encode_image(images))
    zero_shot_logits = clip.logit_scale.exp() * zero_shot @ fixed.t()
    ce = F.cross_entropy(logits, labels)
    text_term = F.l1_loss(text, fixed, reduction="mean") * weights[0]
    image_term = F.l1_loss(image, zero_shot, reduction="mean") * weights[1]
    kl = F.kl_div(F.log_softmax(logits / 1, dim=1), F.log_softmax(zero_shot_logits / 1, dim=1), reduction="sum",
                  log_target=True) * (1 * 1) / logits.numel()
    return ce, kl, text_term, image_term, ce + (kl + text_term + image_term)


def theirs_from(ours):
    """Their parameters from ours: ctx, [VPT, VPT_shallow of image blocks 1..], [VPT_shallow of text blocks 1..]."""
    return [p.detach().clone().requires_grad_(True) for p in (ours.context, ours.vision_prompts, ours.text_prompts)]


# --- parity on a batch -------------------------------------------------------------------------

def test_promptsrc_matches_their_code_on_a_batch(clip, batch):
    images, labels = batch
    run = recipe("promptsrc", demo=False, **TINY)
    ours = create("promptsrc", Backbone(clip), run, seed=5)
    theirs = theirs_from(ours)
    prefix = ours.image_prefix(images)
    step = ours.step(prefix, labels, BASE, ours.frozen_image(prefix))  # as the trainer calls it
    logits, text, image = their_forward(clip, theirs, BASE, images)
    ce, kl, text_term, image_term, loss = their_loss(clip, logits, text, image, images, BASE, labels,
                                                     run.teacher_templates)
    torch.testing.assert_close(step.logits, logits, **TOL)
    torch.testing.assert_close(step.terms["ce"], ce, **TOL)
    torch.testing.assert_close(step.terms["kl"], kl, **TOL)
    torch.testing.assert_close(25.0 * step.terms["txt"], text_term, **TOL)
    torch.testing.assert_close(10.0 * step.terms["img"], image_term, **TOL)
    torch.testing.assert_close(step.total, loss, **TOL)
    assert min(float(kl.detach()), float(text_term.detach()), float(image_term.detach())) > 0  # every term is in play
    step.total.backward()
    loss.backward()
    for mine, their in zip((ours.context, ours.vision_prompts, ours.text_prompts), theirs):
        scale = float(their.grad.abs().max())  # an element sums terms up to this large: float32 rounds relative to it
        assert scale > 0
        torch.testing.assert_close(mine.grad, their.grad, rtol=1e-4, atol=1e-5 * scale)
    with torch.no_grad():  # test logits: base and novel classes, the same prompts, their class names
        for classes in (BASE, NOVEL):
            mine = ours.logits(ours.encode(ours.image_prefix(images)), classes)[:, 0]
            torch.testing.assert_close(ours.output(mine[:, None], ours.alpha, classes is BASE, "cls"),
                                       their_forward(clip, theirs, classes, images)[0], **TOL)


def test_without_image_prompts_the_image_side_is_clip(clip, batch):
    """PROMPT_DEPTH_VISION 0: no VPT at all (VPT_shallow False), the image feature is the frozen CLIP's."""
    images, labels = batch
    ours = create("promptsrc", Backbone(clip), recipe("promptsrc", demo=False, vision_depth=0, text_depth=1))
    assert ours.vision_prompts.numel() == 0 and ours.text_prompts.numel() == 0
    with torch.no_grad():
        assert_same_up_to_rounding(ours.encode(ours.image_prefix(images))[:, 0], norm(clip.encode_image(images)))
        step = ours.step(ours.image_prefix(images), labels, BASE)
    assert float(step.terms["img"]) == pytest.approx(0.0, abs=1e-6)


def test_teacher_templates_are_their_60(clip):
    run = recipe("promptsrc", demo=False)
    assert len(run.teacher_templates) == 60
    assert hashlib.sha256("\n".join(run.teacher_templates).encode()).hexdigest() == IMAGENET_TEMPLATES_SHA256


def test_the_teacher_is_the_same_in_chunks_of_any_size(clip, monkeypatch):
    from dear.methods import promptsrc

    whole = create("promptsrc", Backbone(clip), recipe("promptsrc", demo=False, **TINY)).teacher_text(BASE)
    monkeypatch.setattr(promptsrc, "TEACHER_CHUNK", 7)  # 180 prompts: 26 chunks, the last one short
    chunked = create("promptsrc", Backbone(clip), recipe("promptsrc", demo=False, **TINY)).teacher_text(BASE)
    torch.testing.assert_close(chunked, whole, rtol=1e-5, atol=1e-6)


def test_which_tensors_train_and_their_init(clip):
    ours = create("promptsrc", Backbone(clip), recipe("promptsrc", demo=False, **TINY), seed=1)
    trainable = {name: tuple(p.shape) for name, p in ours.named_parameters() if p.requires_grad}
    # theirs: prompt_learner.ctx [4, 64], image_encoder.VPT [4, 64] and VPT_shallow of image blocks 1-2, text block 1
    assert trainable == {"context": (4, 64), "vision_prompts": (3, 4, 64), "text_prompts": (1, 4, 64)}
    ctx0 = clip.token_embedding(tokenize(["a photo of a"]))[0, 1:5].detach()  # CTX_INIT "a photo of a", n_ctx 4
    torch.testing.assert_close(ours.context.detach(), ctx0)
    prompts = torch.cat([ours.vision_prompts.detach().flatten(), ours.text_prompts.detach().flatten()])
    assert abs(float(prompts.std()) - 0.02) < 0.003 and abs(float(prompts.mean())) < 0.003  # nn.init.normal_(std=0.02)
    assert not any(p.requires_grad for p in clip.parameters())


def test_a_depth_past_the_towers_is_one_line_naming_the_key(clip):
    for changes, key in (({"vision_depth": 4, "text_depth": 2}, "vision_depth = 4"),
                         ({"vision_depth": 3, "text_depth": 3}, "text_depth = 3"),
                         ({"vision_depth": 3, "text_depth": 0}, "text_depth = 0")):
        with pytest.raises(DearError, match=key) as error:
            create("promptsrc", Backbone(clip), recipe("promptsrc", demo=False, **changes))
        assert "\n" not in str(error.value) and f"train.recipes.promptsrc.{key.split()[0]}" in str(error.value)
    with pytest.raises(DearError, match="n_ctx <= 4"):  # `if ctx_init and n_ctx <= 4`, else random vectors
        create("promptsrc", Backbone(clip), recipe("promptsrc", demo=False, n_ctx=8, **TINY))


# --- Gaussian prompt aggregation ----------------------------------------------------------------

def their_gauss(epochs, mean, std):
    """PromptSRC.build_model: get_gauss(mean, std) at a = 1..N, divided by the sum."""
    gauss = lambda x: (1 / (std * np.sqrt(2 * np.pi))) * np.exp(-0.5 * ((x - mean) / std) ** 2)  # noqa: E731
    weights = np.array([gauss(a) for a in range(1, epochs + 1)])
    return weights / sum(weights)


@pytest.mark.parametrize("epochs,mean,std", [(20, 15, 1), (20, 6, 10), (5, 2.5, 0.7)])
def test_gpa_weights_per_epoch_are_theirs(epochs, mean, std):
    assert gaussian_weights(epochs, mean, std) == pytest.approx(list(their_gauss(epochs, mean, std)), rel=1e-12)


def test_gpa_weights_on_a_hand_computed_case():
    a = math.exp(-0.5) / (1 + 2 * math.exp(-0.5))  # epochs 1, 3 one std from the mean 2
    assert gaussian_weights(3, 2.0, 1.0) == pytest.approx([a, 1 - 2 * a, a], rel=1e-12)
    assert gaussian_weights(2, 1.0, 1e-3) == pytest.approx([1.0, 0.0])  # no 0/0 where every density underflows


def test_gpa_of_a_run_with_other_epochs_is_the_same_gaussian_over_training(clip):
    """mean and std are stated for gpa_epochs (theirs: 20, the config's MAX_EPOCH): equal epochs, their values."""
    authors = create("promptsrc", Backbone(clip), recipe("promptsrc", demo=False, **TINY))
    assert authors.epoch_weights() == pytest.approx(list(their_gauss(20, 15, 1)), rel=1e-12)
    short = create("promptsrc", Backbone(clip), recipe("promptsrc", demo=False, epochs=4, **TINY))
    assert short.epoch_weights() == gaussian_weights(4, 15 * 4 / 20, 1 * 4 / 20)


def test_the_aggregate_is_the_weighted_sum_of_the_epochs_tensors(clip):
    ours = create("promptsrc", Backbone(clip), recipe("promptsrc", demo=False, epochs=3, gpa_epochs=3, gpa_mean=2.0,
                                                      gpa_std=1.0, **TINY))
    a = math.exp(-0.5) / (1 + 2 * math.exp(-0.5))
    for epoch, value in ((1, 1.0), (2, 0.0), (3, 10.0)):  # by hand: a x 1 + (1 - 2a) x 0 + a x 10 = 11 a
        with torch.no_grad():
            ours.context.fill_(value)
        ours.on_epoch_end(epoch, 3)
    torch.testing.assert_close(ours.context.detach(), torch.full_like(ours.context, 11 * a))

    torch.manual_seed(0)  # their state_dict_weighting / state_dict_add on random tensors: the same floats
    snapshots = [{name: torch.randn_like(p) for name, p in ours.named_parameters() if p.requires_grad}
                 for _ in range(3)]
    previous = None
    for snapshot, weight in zip(snapshots, their_gauss(3, 2.0, 1.0)):
        weighted = {key: value * weight for key, value in snapshot.items()}
        previous = weighted if previous is None else {key: previous[key] + weighted[key] for key in weighted}
    fresh = create("promptsrc", Backbone(clip), recipe("promptsrc", demo=False, epochs=3, gpa_epochs=3, gpa_mean=2.0,
                                                       gpa_std=1.0, **TINY))
    for epoch, snapshot in enumerate(snapshots, 1):
        with torch.no_grad():
            for name, p in fresh.named_parameters():
                if p.requires_grad:
                    p.copy_(snapshot[name])
        fresh.on_epoch_end(epoch, 3)
    for name, p in fresh.named_parameters():
        if p.requires_grad:
            torch.testing.assert_close(p.detach(), previous[name], rtol=1e-6, atol=1e-7)
    with pytest.raises(DearError, match="epochs"):
        fresh.on_epoch_end(1, 5)


# --- the paper config is their recipe -------------------------------------------------------------

PAPER = fake_run.ROOT / "configs/paper-vitb16.yaml"
DASSL = {"momentum": 0.9, "weight_decay": 5e-4, "crop_scale": [0.08, 1.0], "flip_prob": 0.5, "views": None,
         "min_steps": None}  # Dassl trains exactly its epochs: no minimum of steps on the built-in datasets
THEIRS = {  # train.py extend_cfg, then configs/trainers/PromptSRC/<file>.yaml, over Dassl's defaults
    "base_to_novel": {**DASSL, "batch_size": 4, "interpolation": "bicubic", "optimizer": "sgd", "lr": 0.0025,
                      "epochs": 20, "schedule": "cosine", "warmup_epochs": 1, "warmup_lr": 1e-5, "n_ctx_vision": 4,
                      "n_ctx": 4, "ctx_init": "a photo of a", "precision": "fp16", "vision_depth": 9, "text_depth": 9,
                      "text_loss_weight": 25.0, "image_loss_weight": 10.0, "logits_loss_weight": 1.0,
                      "gpa_mean": 15.0, "gpa_std": 1.0, "gpa_epochs": 20},
}
THEIRS["transfer"] = {**THEIRS["base_to_novel"], "vision_depth": 3, "text_depth": 3, "gpa_mean": 6.0, "gpa_std": 10.0}


def test_the_paper_config_trains_promptsrc_exactly_as_their_config():
    params = load_params(PAPER)
    assert params.train.recipes == {}
    jobs = [(d, "base_to_novel") for d in params.study.base_to_novel] + [(params.study.transfer.source, "transfer")]
    for dataset, protocol in jobs:
        run = params.train.recipe("promptsrc", dataset, protocol)
        values = {key: value for key, value in run.values.items() if key != "teacher_templates"}
        assert values == THEIRS[protocol], (dataset, protocol)
        assert hashlib.sha256("\n".join(run.teacher_templates).encode()).hexdigest() == IMAGENET_TEMPLATES_SHA256
        assert all(s.kind == "authors" for s in run.settings.values()), (dataset, protocol)


@pytest.mark.parametrize("protocol", ["base_to_novel", "transfer"])
def test_learning_rate_of_every_epoch_is_dassls(protocol):
    run = load_params(PAPER).train.recipe("promptsrc", "imagenet", protocol)
    ours = our_epoch_lrs(run, steps_per_epoch=3)
    assert ours == pytest.approx([dassl_lr(e, 0.0025, 20, 1, 1e-5) for e in range(1, 21)], rel=1e-12)
    assert ours[:2] == [1e-5, 0.0025] and ours[-1] == pytest.approx(0.0025 * (1 + math.cos(math.pi * 18 / 20)) / 2)


# --- precision ---------------------------------------------------------------------------------

def test_fp16_keeps_the_prompts_in_fp32_and_the_context_in_half():
    """Theirs under PREC fp16: ctx is made in CLIP's dtype (half); VPT and VPT_shallow are fp32 parameters
    cast with .half() where they enter a tower. Run on the CPU with the CUDA path forced, as test_precision."""
    clip = tiny_clip()
    model = create("promptsrc", Backbone(clip), recipe("promptsrc", demo=False, **TINY))
    precision = Precision("fp16", torch.device("cpu"))
    precision.active = True
    in_precision(model, precision)
    assert model.context.dtype == torch.float16
    assert model.vision_prompts.dtype == torch.float32 and model.text_prompts.dtype == torch.float32
    images, labels = torch.randn(2, 3, 32, 32), torch.tensor([0, 2])
    step = model.step(model.image_prefix(images), labels, BASE)
    step.total.backward()
    assert model.context.grad.dtype == torch.float16 and model.vision_prompts.grad.dtype == torch.float32
    assert all(torch.isfinite(p.grad).all() for p in (model.context, model.vision_prompts, model.text_prompts))
    assert model.teacher_text(BASE).dtype == torch.float32  # their fixed_embeddings: an fp32 CLIP's
    assert clip.visual.conv1.weight.dtype == torch.float16  # the fp32 teacher was a copy


# --- the trainer hook: GPA in a real run, and a resumed run ends with the same bytes ---------------

@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """A two-epoch run on the random dear-world-tiny backbone (2 image, 2 text layers): GPA weights 1/2, 1/2."""
    root = tmp_path_factory.mktemp("world")
    fake_run.backbone(root / "backbone")
    fake_run.fewshot(root / "fewshot.parquet", root / "images")
    fake_run.params_file(root / "params.yaml", recipe={"vision_depth": 2, "text_depth": 2})
    return root


def train_promptsrc(world, out):
    from dear.stages import train as stage

    inputs = stage.Inputs(method="promptsrc", dataset="toy", seed=1, backbone=world / "backbone",
                          fewshot=world / "fewshot.parquet", roles=None)
    stage.run(load_params(world / "params.yaml"), inputs, stage.Outputs(out, out.parent / f"{out.name}.ckpt"))
    return out


@pytest.fixture(scope="module")
def reference(world, tmp_path_factory):
    """An uninterrupted run, and the learnable tensors at the end of each epoch, before GPA reads them."""
    from dear.methods.promptsrc import PromptSRC

    snapshots, original = [], PromptSRC.on_epoch_end

    def recording(model, epoch, epochs):
        snapshots.append({name: p.detach().clone() for name, p in model.named_parameters() if p.requires_grad})
        original(model, epoch, epochs)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(PromptSRC, "on_epoch_end", recording)
        out = train_promptsrc(world, tmp_path_factory.mktemp("reference") / "run")
    return out, snapshots


def test_a_run_logs_each_term_and_ends_with_the_gaussian_aggregate(reference):
    import pyarrow.parquet as pq
    from dear.methods.trained import read_trained

    out, snapshots = reference
    log = pq.read_table(out / "train_log.parquet").to_pylist()
    assert [row["epoch"] for row in log] == [0] * 4 + [1] * 4
    assert all(row["loss"] == pytest.approx(row["loss_ce"] + 25 * row["loss_txt"] + 10 * row["loss_img"]
                                            + row["loss_kl"]) for row in log)
    state = read_trained(out / "model.pt")["state"]
    assert len(snapshots) == 2
    for name in ("context", "vision_prompts", "text_prompts"):  # 2 epochs: mean 15 x 2/20 = 1.5, std 0.1: 1/2, 1/2
        torch.testing.assert_close(state[name], 0.5 * snapshots[0][name] + 0.5 * snapshots[1][name])
        assert not torch.equal(state[name], snapshots[1][name])  # the evaluated model is not the last epoch's


def test_a_resumed_run_ends_with_the_same_bytes(world, reference, tmp_path, monkeypatch):
    """Killed in epoch 2 (the last checkpoint after epoch 1's aggregation step), then rerun: the same model.pt."""
    from dear.train import trainer

    calls, step_of_batch = [], trainer.step_of_batch

    def poisoned(*args, **kwargs):
        result = step_of_batch(*args, **kwargs)
        calls.append(1)
        if len(calls) == 8:  # step 7: the checkpoint of step 6 is the last good one
            result.total = result.total * float("nan")
        return result

    monkeypatch.setattr(trainer, "step_of_batch", poisoned)
    with pytest.raises(DearError, match="step 7: the loss is not finite"):
        train_promptsrc(world, tmp_path / "run")
    saved = torch.load(tmp_path / "run.ckpt", weights_only=True)
    assert saved["step"] == 6 and float(saved["model"]["gpa.context"].abs().sum()) > 0  # epoch 1 is in the sum
    monkeypatch.setattr(trainer, "step_of_batch", step_of_batch)
    train_promptsrc(world, tmp_path / "run")
    assert (tmp_path / "run" / "model.pt").read_bytes() == (reference[0] / "model.pt").read_bytes()


@pytest.mark.gpu
def test_promptsrc_trains_in_fp16_on_cuda(tmp_path):
    """Their precision (PREC fp16) on CUDA: a finite loss at every step, prompts kept fp32, the context half."""
    import pyarrow.parquet as pq
    from dear.stages import train as stage

    fake_run.backbone(tmp_path / "backbone")
    fewshot = fake_run.fewshot(tmp_path / "fewshot.parquet", tmp_path / "images")
    params = fake_run.params_file(tmp_path / "params.yaml", recipe={"vision_depth": 2, "text_depth": 2},
                                  compute={"device": "cuda"})
    raw = load_params(params, ["train.recipes.promptsrc.precision=fp16"])
    stage.run(raw, stage.Inputs("promptsrc", "toy", 1, tmp_path / "backbone", fewshot, None),
              stage.Outputs(tmp_path / "run", None))
    losses = pq.read_table(tmp_path / "run" / "train_log.parquet")["loss"].to_pylist()
    assert losses and all(math.isfinite(loss) for loss in losses)
    from dear.methods.trained import read_trained

    state = read_trained(tmp_path / "run" / "model.pt")["state"]
    assert state["context"].dtype == torch.float16 and state["vision_prompts"].dtype == torch.float32
