"""Parity of CoCoOp and KgCoOp with their authors' code and configs, written out in the tests.

The project holds none of their code. The references below restate, with
open_clip's own modules, what their code computes on a batch:
- CoCoOp (KaiyangZhou/CoOp trainers/cocoop.py): PromptLearner (context from
  "a photo of a", meta_net Linear(vis_dim, vis_dim // 16) -> ReLU ->
  Linear(vis_dim // 16, ctx_dim) with vis_dim = visual.output_dim and ctx_dim =
  ln_final's width, its output added to every context vector per image) and
  CustomCLIP.forward (a text pass per image, CE in training, the same logits
  at test);
- KgCoOp (htyao89/KgCoOp KgCoOp/trainers/kgcoop.py): CoOp's prompt, the frozen
  CLIP's features of CUSTOM_TEMPLATES[dataset], CustomCLIP.forward returning
  (logits, 1 - mean cos) and forward_backward's CE + W * score.
From the same parameters on the same batch of a small CLIP (text width 64,
embedding width 32: the meta-net's widths must come from the right one) the
project's models give the same training logits, loss, gradients and test
logits; the paper config's recipes are their configs; the prompts are theirs.
"""

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from dear.methods import create
from dear.config.show import prompts_of
from dear.config.params import load_params
from tests import fake_run
from tests.floats import GRADIENT_ULPS, assert_same_up_to_rounding
from tests.methods_tools import Backbone, norm, recipe, tokenize
from tests.methods.test_parity import BASE, NOVEL, TOL, dassl_lr, our_epoch_lrs, their_text
from tests.tiny_clip import tiny_clip

PAPER = fake_run.ROOT / "configs/paper-vitb16.yaml"
DATASETS = ["imagenet", "caltech-101", "oxford_pets", "stanford_cars", "oxford_flowers", "food-101", "fgvc_aircraft",
            "sun397", "dtd", "eurosat", "ucf101"]
# KgCoOp's CUSTOM_TEMPLATES, keyed by this project's dataset names (theirs: Dassl's dataset class names)
KGCOOP_TEMPLATES = {"oxford_pets": "a photo of a {}, a type of pet.", "oxford_flowers": "a photo of a {}, a type of flower.",
                    "fgvc_aircraft": "a photo of a {}, a type of aircraft.",
                    "dtd": "a photo of a {}, a type of texture.", "eurosat": "a centered satellite photo of {}.",
                    "stanford_cars": "a photo of a {}.", "food-101": "a photo of {}, a type of food.",
                    "sun397": "a photo of a {}.", "caltech-101": "a photo of a {}.",
                    "ucf101": "a photo of a person doing {}.", "imagenet": "a photo of a {}."}


def coop_prompts(clip, ctx, classnames):
    """CoOp's PromptLearner ('end'): [SOS], the context [C, M, D] (or [M, D]), then "{name}." and [EOS]."""
    names = [name.replace("_", " ") for name in classnames]
    tokenized = tokenize([f"a photo of a {name}." for name in names])  # prompt_prefix + " " + name + "."
    embedding = clip.token_embedding(tokenized)
    ctx = ctx.expand(len(names), -1, -1)
    return torch.cat([embedding[:, :1], ctx, embedding[:, 1 + ctx.shape[1]:]], 1), tokenized


def start_context(clip):
    """ctx_init "a photo of a": the token embeddings of its 4 words."""
    return clip.token_embedding(tokenize(["a photo of a"]))[0, 1:5].detach()


def moved(ours, scale=0.05, seed=11):
    """Move the learnable tensors off their init (same change on both sides) so no term is trivially zero."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for param in ours.parameters():
            if param.requires_grad:
                param.add_(scale * torch.randn(param.shape, generator=generator))


def learnable_grads(model):
    return {name: param.grad for name, param in model.named_parameters() if param.requires_grad}


# --- CoCoOp ------------------------------------------------------------------------------

def their_meta_net(clip):
    vis_dim, ctx_dim = clip.visual.output_dim, clip.ln_final.weight.shape[0]
    return nn.Sequential(nn.Linear(vis_dim, vis_dim // 16), nn.ReLU(inplace=True), nn.Linear(vis_dim // 16, ctx_dim))


def their_cocoop_logits(clip, ctx, meta_net, classnames, images):
    """CoCoOp's CustomCLIP.forward: the normalized image feature, its meta-net shift on every context vector,
    then one text pass per image over all classes."""
    image = norm(clip.encode_image(images))
    shifted = ctx[None] + meta_net(image)[:, None]  # [B, n_ctx, ctx_dim]
    logits = []
    for ctx_i, image_i in zip(shifted, image):
        prompts, tokenized = coop_prompts(clip, ctx_i, classnames)
        text = norm(their_text(clip, prompts, tokenized.argmax(-1)))
        logits.append(clip.logit_scale.exp() * image_i @ text.t())
    return torch.stack(logits)


def test_cocoop_matches_cocoops_code_on_a_batch(clip, batch):
    images, labels = batch
    ours = create("cocoop", Backbone(clip), recipe("cocoop", demo=False), seed=2)
    torch.testing.assert_close(ours.context.detach(), start_context(clip))
    moved(ours)
    theirs = ours.context.detach().clone().requires_grad_(True)
    meta_net = their_meta_net(clip)
    meta_net.load_state_dict({k.replace("linear1", "0").replace("linear2", "2"): v
                              for k, v in ours.meta_net.state_dict().items()})  # fails unless the widths are theirs

    step = ours.step(ours.image_prefix(images), labels, BASE)
    expected = their_cocoop_logits(clip, theirs, meta_net, BASE, images)
    loss = F.cross_entropy(expected, labels)
    torch.testing.assert_close(step.logits, expected, **TOL)
    torch.testing.assert_close(step.total, loss, **TOL)
    step.total.backward()
    loss.backward()
    grads = learnable_grads(ours)
    assert set(grads) == {"context", *(f"meta_net.linear{i}.{p}" for i in (1, 2) for p in ("weight", "bias"))}
    torch.testing.assert_close(grads["context"], theirs.grad, **TOL)
    for index, layer in ((1, meta_net[0]), (2, meta_net[2])):
        torch.testing.assert_close(grads[f"meta_net.linear{index}.weight"], layer.weight.grad, **TOL)
        torch.testing.assert_close(grads[f"meta_net.linear{index}.bias"], layer.bias.grad, **TOL)
    with torch.no_grad():  # test: the same forward, on the base classes and on the novel ones
        for classes in (BASE, NOVEL):
            torch.testing.assert_close(ours.logits(ours.encode(ours.image_prefix(images)), classes)[:, 0],
                                       their_cocoop_logits(clip, theirs, meta_net, classes, images), **TOL)


def test_cocoops_meta_net_widths_come_from_the_embedding_and_the_text_width(clip):
    """vis_dim = visual.output_dim (32 here), ctx_dim = ln_final's width (64): 32 -> 2 -> 64."""
    ours = create("cocoop", Backbone(clip), recipe("cocoop", demo=False))
    assert (ours.meta_net.linear1.in_features, ours.meta_net.linear1.out_features) == (32, 32 // 16)
    assert (ours.meta_net.linear2.in_features, ours.meta_net.linear2.out_features) == (2, 64)
    assert isinstance(ours.meta_net.relu, nn.ReLU)


def test_cocoop_scores_many_images_in_chunks_as_in_one_pass(clip, monkeypatch):
    ours = create("cocoop", Backbone(clip), recipe("cocoop", demo=False))
    moved(ours)
    torch.manual_seed(0)
    features = F.normalize(torch.randn(7, 1, 32), dim=-1)
    with torch.no_grad():
        whole = ours.logits(features, NOVEL)
        passes = []
        run_text = ours._conditioned_logits
        monkeypatch.setattr(ours, "_conditioned_logits", lambda image, prompt: passes.append(len(image)) or
                            run_text(image, prompt))
        monkeypatch.setattr(ours, "PROMPTS_PER_PASS", 5)  # 2 classes: 2 images per text pass
        chunked = ours.logits(features, NOVEL)
    assert whole.shape == (7, 1, 2) and passes == [2, 2, 2, 1]
    torch.testing.assert_close(chunked, whole, rtol=1e-5, atol=1e-5)


def test_cocoop_runs_prompts_of_similar_length_together_as_one_pass_would(clip):
    """Groups cut after their own last end-of-text: the same logits as one pass padded to the longest prompt."""
    ours = create("cocoop", Backbone(clip), recipe("cocoop", demo=False))
    moved(ours)
    names = ["a rather long and unusual class name", "tree", "hot_dog", "sea_lion with a hat", "dog", "red car"]
    restore, groups = ours._prompt_groups(names)
    ends = [int(group.pool.max()) + 1 for group in groups]
    assert [len(group.pool) for group in groups] == [2, 2, 2] and ends == sorted(ends) and ends[0] < ends[-1]
    assert all(group.tokens.shape[1] == end for group, end in zip(groups, ends))
    features = F.normalize(torch.randn(3, 1, 32), dim=-1)
    with torch.no_grad():
        grouped = ours.logits(features, names)
        ours.LENGTH_GROUPS = 1
        ours._cache.clear()
        single = ours.logits(features, names)
    assert ours._prompt_groups(names)[1][0].tokens.shape[1] == ends[-1]
    torch.testing.assert_close(grouped, single, rtol=1e-5, atol=1e-5)


def test_cocoop_in_fp16_is_their_half_meta_net_and_context():
    """PREC fp16: CLIP as OpenAI's convert_weights, `meta_net.half()`, the context in half (their CLIP's dtype); the
    fp32 image feature is read in the meta-net's dtype. Run on the CPU with the CUDA path forced, fp16 tolerance."""
    from dear.compute.device import Precision
    from dear.methods.base import in_precision

    model = create("cocoop", Backbone(tiny_clip(seed=3)), recipe("cocoop", demo=False))  # prepare converts its CLIP
    images, labels = torch.randn(2, 3, 32, 32), torch.tensor([0, 2])
    with torch.no_grad():
        reference = model.logits(model.encode(model.image_prefix(images)), BASE)
    precision = Precision("fp16", torch.device("cpu"))
    precision.active = True  # as on CUDA
    in_precision(model, precision)
    assert {p.dtype for p in model.parameters() if p.requires_grad} == {torch.float16}
    with torch.no_grad():
        half = model.logits(model.encode(model.image_prefix(images)).float(), BASE)
    torch.testing.assert_close(half, reference, rtol=0, atol=0.05)
    step = model.step(model.image_prefix(images), labels, BASE)
    step.total.backward()
    assert all(p.grad.dtype == torch.float16 and torch.isfinite(p.grad).all()
               for p in model.parameters() if p.requires_grad)


def test_cocoop_has_no_image_independent_class_features(clip):
    from dear.errors import DearError

    with pytest.raises(DearError, match="depend on the image"):
        create("cocoop", Backbone(clip), recipe("cocoop", demo=False)).text_features(BASE)


# --- KgCoOp ------------------------------------------------------------------------------

def their_kgcoop(clip, ctx, classnames, images, template):
    """KgCoOp's CustomCLIP.forward: (CoOp's logits, 1 - mean cos to the frozen CLIP's features of the template)."""
    with torch.no_grad():  # PromptLearner.__init__: a freshly loaded CLIP's encode_text, normalized
        old = norm(clip.encode_text(tokenize([template.format(c.replace("_", " ")) for c in classnames])))
    prompts, tokenized = coop_prompts(clip, ctx, classnames)
    text = norm(their_text(clip, prompts, tokenized.argmax(-1)))
    image = norm(clip.encode_image(images))
    logits = clip.logit_scale.exp() * image @ text.t()
    score = 1.0 - torch.mean(F.cosine_similarity(text, norm(old), dim=1, eps=1e-07))
    return logits, score


def test_kgcoop_matches_kgcoops_code_on_a_batch(clip, batch):
    images, labels = batch
    run = recipe("kgcoop", dataset="dtd", demo=False)
    assert (run.kg_weight, run.template) == (8.0, KGCOOP_TEMPLATES["dtd"])
    ours = create("kgcoop", Backbone(clip), run)
    torch.testing.assert_close(ours.context.detach(), start_context(clip))
    moved(ours)
    theirs = ours.context.detach().clone().requires_grad_(True)

    step = ours.step(ours.image_prefix(images), labels, BASE)
    logits, score = their_kgcoop(clip, theirs, BASE, images, KGCOOP_TEMPLATES["dtd"])
    loss = F.cross_entropy(logits, labels) + 8.0 * score  # forward_backward: CE + self.w * score
    torch.testing.assert_close(step.logits, logits, **TOL)
    torch.testing.assert_close(step.terms["ce"], F.cross_entropy(logits, labels), **TOL)
    torch.testing.assert_close(step.terms["kg"], score, **TOL)
    assert float(score.detach()) > 1e-4
    torch.testing.assert_close(step.total, loss, **TOL)
    step.total.backward()
    loss.backward()
    assert list(learnable_grads(ours)) == ["context"]
    assert_same_up_to_rounding(ours.context.grad, theirs.grad, per_vector=False, ulps=GRADIENT_ULPS)
    with torch.no_grad():  # model_inference: the logits alone, on the base classes and on the novel ones
        for classes in (BASE, NOVEL):
            torch.testing.assert_close(ours.logits(ours.encode(ours.image_prefix(images)), classes)[:, 0],
                                       their_kgcoop(clip, theirs, classes, images, KGCOOP_TEMPLATES["dtd"])[0], **TOL)


def test_trainable_parameters(clip):
    counts = {name: sum(p.numel() for p in create(name, Backbone(clip), recipe(name, demo=False)).parameters()
                        if p.requires_grad) for name in ("coop", "cocoop", "kgcoop")}
    # context 4 x 64; CoCoOp's meta-net 32 -> 2 -> 64 (ViT-B/16: 512 -> 32 -> 512, 33,312 besides 2,048)
    assert counts == {"coop": 4 * 64, "cocoop": 4 * 64 + (32 * 2 + 2) + (2 * 64 + 64), "kgcoop": 4 * 64}


# --- the paper config is their configs ------------------------------------------------------

def jobs():
    return [(d, "base_to_novel") for d in DATASETS] + [("imagenet", "transfer")]


def test_the_paper_config_trains_cocoop_as_its_config():
    params = load_params(PAPER)
    assert list(params.study.base_to_novel) == DATASETS and params.study.transfer.source == "imagenet"
    for dataset, protocol in jobs():
        run = params.train.recipe("cocoop", dataset, protocol)
        assert all(s.kind == "authors" for s in run.settings.values()), (dataset, protocol)
        assert run.values == {"optimizer": "sgd", "lr": 2e-3, "momentum": 0.9, "weight_decay": 5e-4,
                              "schedule": "cosine", "epochs": 10, "warmup_epochs": 1, "warmup_lr": 1e-5,
                              "batch_size": 1, "crop_scale": [0.08, 1.0], "flip_prob": 0.5,
                              "interpolation": "bicubic", "precision": "fp16", "views": None, "min_steps": None,
                              "ctx_init": "a photo of a", "n_ctx": 4}
    assert "xd_train.sh" in params.train.recipe("cocoop", "imagenet", "transfer").settings["epochs"].source


def test_the_paper_config_trains_kgcoop_as_its_config_and_script():
    params = load_params(PAPER)
    for dataset, protocol in jobs():
        run = params.train.recipe("kgcoop", dataset, protocol)
        transfer = protocol == "transfer"
        assert run.values == {"optimizer": "sgd", "lr": 2e-3, "momentum": 0.9, "weight_decay": 5e-4,
                              "schedule": "cosine", "epochs": 25 if transfer else 100, "warmup_epochs": 1,
                              "warmup_lr": 1e-5, "batch_size": 128, "crop_scale": [0.08, 1.0], "flip_prob": 0.5,
                              "interpolation": "bicubic", "precision": "fp16", "views": None, "min_steps": None,
                              "ctx_init": "a photo of a", "n_ctx": 4, "template": KGCOOP_TEMPLATES[dataset],
                              "kg_weight": 8.0}, (dataset, protocol)
        ours = {key for key, s in run.settings.items() if s.kind != "authors"}
        assert ours == ({"epochs"} if transfer else set())  # the transfer epochs: issue #8, no config
        assert "base2new_train.sh" in run.settings["kg_weight"].source
    zeroshot = params.train.recipe("zeroshot", "dtd", "base_to_novel").template
    assert (zeroshot, params.train.recipe("kgcoop", "dtd", "base_to_novel").template) == \
        ("{} texture.", "a photo of a {}, a type of texture.")  # KgCoOp's own template, not zsclip.py's


@pytest.mark.parametrize("method,protocol,expected", [("cocoop", "base_to_novel", (2e-3, 10, 1)),
                                                      ("cocoop", "transfer", (2e-3, 10, 1)),
                                                      ("kgcoop", "base_to_novel", (2e-3, 100, 1)),
                                                      ("kgcoop", "transfer", (2e-3, 25, 1))])
def test_learning_rate_of_every_epoch_is_dassls(method, protocol, expected):
    run = load_params(PAPER).train.recipe(method, "imagenet", protocol)
    assert (run.lr, run.epochs, run.warmup_epochs) == expected
    ours = our_epoch_lrs(run, steps_per_epoch=2)
    assert ours == pytest.approx([dassl_lr(e, run.lr, run.epochs, run.warmup_epochs, run.warmup_lr)
                                  for e in range(1, run.epochs + 1)], rel=1e-12)
    assert ours[0] == 1e-5 and ours[1] == 2e-3 and ours[-1] > 0


@pytest.mark.parametrize("method", ["cocoop", "kgcoop"])
def test_prompts_are_coops_context_before_the_name(clip, method):
    run = load_params(PAPER).train.recipe(method, "oxford_pets", "base_to_novel")
    assert prompts_of(run, ["golden_retriever", "sea_lion"]) == ["X X X X golden retriever.", "X X X X sea lion."]
    model = create(method, Backbone(clip), recipe(method, dataset="oxford_pets", demo=False))
    tokens = model.prompt_input(["golden_retriever"]).tokens[0]
    assert tokens.tolist() == tokenize(["a photo of a golden retriever."])[0, : len(tokens)].tolist()


# --- through `dear train` -----------------------------------------------------------------

@pytest.mark.parametrize("method,terms", [("cocoop", ["ce"]), ("kgcoop", ["ce", "kg"])])
def test_they_train_through_dear_train_and_load(tmp_path, method, terms):
    import pyarrow.parquet as pq

    from dear.model.clip import load_backbone
    from dear.methods.trained import load_trained
    from dear.stages import train as stage

    fake_run.backbone(tmp_path / "backbone")
    fake_run.fewshot(tmp_path / "fewshot.parquet", tmp_path / "images")
    params = load_params(fake_run.params_file(tmp_path / "params.yaml"))  # batch 4, 2 epochs: 8 steps
    inputs = stage.Inputs(method=method, dataset="toy", seed=1, backbone=tmp_path / "backbone",
                          fewshot=tmp_path / "fewshot.parquet", roles=None)
    stage.run(params, inputs, stage.Outputs(folder=tmp_path / "run", checkpoint=tmp_path / "ckpt.pt"))
    log = pq.read_table(tmp_path / "run/train_log.parquet").to_pylist()
    assert [row["step"] for row in log] == list(range(8)) and [row["lr"] for row in log[:4]] == [1e-5] * 4
    weight = params.train.recipe(method, "toy", "base_to_novel").get("kg_weight", 0.0)
    assert all(row["loss"] == pytest.approx(row["loss_ce"] + weight * row.get("loss_kg", 0.0)) for row in log)
    assert [key.removeprefix("loss_") for key in log[0] if key.startswith("loss_")] == terms
    backbone = load_backbone(tmp_path / "backbone")
    model = load_trained(tmp_path / "run/model.pt", backbone, None, params)
    with torch.no_grad():
        logits = model.logits(model.encode(model.image_prefix(torch.randn(3, 3, 32, 32))), fake_run.CLASSNAMES)
    assert logits.shape == (3, 1, len(fake_run.CLASSNAMES)) and torch.isfinite(logits).all()
