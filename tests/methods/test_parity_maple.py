"""Parity with MaPLe's code (muzairkhattak/multimodal-prompt-learning @904dbd7), written out in the tests.

The project holds none of their code. `their_maple` restates, with open_clip's own modules (its blocks called as
modules, not `dear.model.internals`), what their MultiModalPromptLearner, TextEncoder, VisionTransformer_MaPLe and
ResidualAttentionBlock_MaPLe compute (trainers/maple.py, clip/model.py). From the same parameters on the same
batch of a small CLIP whose towers differ in width and depth, the project's model must give the same training
logits, loss, gradient of every learnable tensor, and base and novel test logits. The recipe facts come from
train.py (extend_cfg), configs/trainers/MaPLe/*.yaml and scripts/maple/*.sh.
"""


import open_clip
import pytest
import torch
import torch.nn.functional as F

from dear.compute.device import Precision
from dear.methods.base import in_precision
from dear.errors import DearError
from dear.methods import create
from dear.methods.prompts import context
from dear.config.show import prompts_of
from dear.config.params import load_params
from tests import fake_run
from tests.floats import GRADIENT_ULPS, assert_same_up_to_rounding
from tests.methods_tools import Backbone, norm, recipe, tokenize
from tests.methods.test_parity import dassl_lr, our_epoch_lrs
from tests.tiny_clip import tiny_clip

BASE = ["sea_lion", "golden_retriever", "red car"]
NOVEL = ["tree", "hot_dog"]
TOL = dict(rtol=1e-4, atol=1e-5)
IMAGE_LAYERS, TEXT_LAYERS, IMAGE_WIDTH, TEXT_WIDTH = 4, 3, 64, 48


@pytest.fixture(scope="module")
def clip():
    return tiny_clip(seed=3, layers=IMAGE_LAYERS, text_layers=TEXT_LAYERS, width=IMAGE_WIDTH, text_width=TEXT_WIDTH)


def maple(clip, depth, **changes):
    return create("maple", Backbone(clip), recipe("maple", demo=False, prompt_depth=depth, **changes), seed=5)


# --- their forward, restated -------------------------------------------------------------

def their_maple(clip, parts, classnames, images):
    """CustomCLIP.forward: logit_scale.exp() x cosine of the MaPLe image and text features."""
    ctx, proj, compound_text, compound_projections = parts
    n = ctx.shape[0]
    # MultiModalPromptLearner.forward: SOS, ctx, the suffix of "a photo of a {name}." after position n
    tokenized = tokenize([f"a photo of a {name.replace('_', ' ')}." for name in classnames]).to(ctx.device)
    embedding = clip.token_embedding(tokenized).to(ctx.dtype)  # `.type(dtype)`
    prompts = torch.cat([embedding[:, :1], ctx.expand(len(classnames), -1, -1), embedding[:, 1 + n:]], 1)
    shared_ctx = proj(ctx)
    visual_deep = [layer(prompt) for layer, prompt in zip(compound_projections, compound_text)]
    text = their_text(clip, prompts, tokenized.argmax(-1), compound_text, n)
    image = their_image(clip, images, shared_ctx, visual_deep, n)
    return clip.logit_scale.exp() * norm(image) @ norm(text).t()


def their_text(clip, prompts, eot, deep, n):
    """TextEncoder over ResidualAttentionBlock_MaPLe: blocks after the first replace positions 1..n with the next
    deep prompt while any is left (`counter`)."""
    x = prompts + clip.positional_embedding.to(prompts.dtype)
    counter = 0
    for index, block in enumerate(clip.transformer.resblocks):
        if index > 0 and counter < len(deep):
            x = torch.cat([x[:, :1], deep[counter].to(x.dtype).expand(x.shape[0], -1, -1), x[:, 1 + n:]], 1)
            counter += 1
        x = block(x, attn_mask=clip.attn_mask)
    return clip.ln_final(x)[torch.arange(x.shape[0]), eot] @ clip.text_projection


def their_image(clip, images, shared_ctx, deep, n):
    """VisionTransformer_MaPLe.forward: the shared prompts appended after the patches before ln_pre; blocks after
    the first replace the last n tokens with the next deep prompt while any is left; ln_post of CLS, proj.
    Prompts are cast to the tower's dtype where they enter (their `.half()`, which under PREC fp32 or amp would
    also round them to half: the fp32 runs here do not)."""
    visual = clip.visual
    x = visual.conv1(images.to(visual.conv1.weight.dtype)).flatten(2).transpose(1, 2)  # [B, N, D]
    x = torch.cat([visual.class_embedding.to(x.dtype).expand(x.shape[0], 1, -1), x], 1)
    x = x + visual.positional_embedding.to(x.dtype)
    x = visual.ln_pre(torch.cat([x, shared_ctx.to(x.dtype).expand(x.shape[0], -1, -1)], 1))
    counter = 0
    for index, block in enumerate(visual.transformer.resblocks):
        if index > 0 and counter < len(deep):
            x = torch.cat([x[:, :x.shape[1] - n], deep[counter].to(x.dtype).expand(x.shape[0], -1, -1)], 1)
            counter += 1
        x = block(x)
    return visual.ln_post(x[:, 0]) @ visual.proj


def _linear_copy(layer):
    clone = torch.nn.Linear(layer.in_features, layer.out_features)
    clone.load_state_dict(layer.state_dict())
    return clone


def _leaf(tensor):
    return tensor.detach().clone().requires_grad_(True)


# --- parity ------------------------------------------------------------------------------

@pytest.mark.parametrize("depth", [1, 2, 3])  # shallow MaPLe, deep prompts ending before the last layer, to the last
def test_maple_matches_maples_code_on_a_batch(clip, batch, depth):
    images, labels = batch
    ours = maple(clip, depth)
    theirs = [_leaf(ours.context), _linear_copy(ours.coupling), [_leaf(p) for p in ours.deep_text],
              [_linear_copy(layer) for layer in ours.deep_coupling]]

    step = ours.step(ours.image_prefix(images), labels, BASE)
    expected = their_maple(clip, theirs, BASE, images)
    loss = F.cross_entropy(expected, labels)  # `if self.prompt_learner.training: return F.cross_entropy(logits, label)`
    torch.testing.assert_close(step.logits, expected, **TOL)
    torch.testing.assert_close(step.total, loss, **TOL)
    step.total.backward()
    loss.backward()
    pairs = [(ours.context, theirs[0]), (ours.coupling.weight, theirs[1].weight), (ours.coupling.bias, theirs[1].bias),
             *zip(ours.deep_text, theirs[2]),
             *[(mine.weight, their.weight) for mine, their in zip(ours.deep_coupling, theirs[3])],
             *[(mine.bias, their.bias) for mine, their in zip(ours.deep_coupling, theirs[3])]]
    assert len(pairs) == 3 + 3 * (depth - 1)
    for mine, their in pairs:
        assert mine.grad is not None and mine.grad.abs().sum() > 0
        assert_same_up_to_rounding(mine.grad, their.grad, per_vector=False, ulps=GRADIENT_ULPS)
    with torch.no_grad():  # test: the same forward on the base and on the novel class names
        for classes in (BASE, NOVEL):
            streams = ours.logits(ours.encode(ours.image_prefix(images)), classes)
            torch.testing.assert_close(ours.output(streams, ours.alpha, classes is BASE, "cls"),
                                       their_maple(clip, theirs, classes, images), **TOL)


def test_ln_pre_normalizes_each_token_alone(clip):
    """Why the prompts may join after the frozen prefix: ln_pre(cat[x, v]) = cat[ln_pre(x), ln_pre(v)]."""
    torch.manual_seed(0)
    x, v = torch.randn(3, 17, IMAGE_WIDTH), torch.randn(2, IMAGE_WIDTH)
    ln_pre = clip.visual.ln_pre
    joined = ln_pre(torch.cat([x, v.expand(3, -1, -1)], 1))
    torch.testing.assert_close(joined, torch.cat([ln_pre(x), ln_pre(v).expand(3, -1, -1)], 1))


# --- what learns and how it starts ----------------------------------------------------------

def test_maples_learnable_parts_and_their_init(clip):
    ours = maple(clip, 3)
    n = 2
    # ctx: the token embeddings of "a photo" (the first n_ctx words of CTX_INIT "a photo of a")
    torch.testing.assert_close(ours.context.detach(), clip.token_embedding(tokenize(["a photo of a"]))[0, 1:1 + n])
    # proj and compound_prompt_projections: text width -> image width, derived from the towers
    assert ours.coupling.weight.shape == (IMAGE_WIDTH, TEXT_WIDTH)
    assert [tuple(p.shape) for p in ours.deep_text] == [(n, TEXT_WIDTH)] * 2  # PROMPT_DEPTH - 1 of them
    first = ours.deep_coupling[0]
    assert len(ours.deep_coupling) == 2 and all(  # _get_clones: copies of one initialized layer
        torch.equal(layer.weight, first.weight) and torch.equal(layer.bias, first.bias) for layer in ours.deep_coupling)
    assert not torch.equal(ours.coupling.weight, first.weight)  # proj is a layer of its own
    deep = torch.cat([p.detach().flatten() for p in ours.deep_text])
    assert abs(float(deep.std()) - 0.02) < 0.006  # nn.init.normal_(single_para, std=0.02)
    trainable = {name for name, p in ours.named_parameters() if p.requires_grad}
    assert {name.split(".")[0] for name in trainable} == {"context", "coupling", "deep_text", "deep_coupling"}
    assert sum(p.numel() for p in ours.parameters() if p.requires_grad) == \
        n * TEXT_WIDTH + 3 * (TEXT_WIDTH * IMAGE_WIDTH + IMAGE_WIDTH) + 2 * n * TEXT_WIDTH


def test_vit_b16_trains_maples_3_55_million_parameters():
    """ViT-B/16 (built on the meta device: shapes only): 2 x 512 + 9 x (512 x 768 + 768) + 8 x 2 x 512."""
    with torch.device("meta"):
        model = open_clip.model.CLIP(**open_clip.get_model_config("ViT-B-16"))
    backbone = Backbone(model)
    backbone.tokenizer = open_clip.get_tokenizer("ViT-B-16")
    ours = create("maple", backbone, recipe("maple", demo=False, prompt_depth=9))
    assert sum(p.numel() for p in ours.parameters() if p.requires_grad) == 3_555_072


def test_fp16_keeps_the_deep_prompts_and_their_couplings_in_fp32(batch):
    """PREC fp16: ctx (the fp16 token embedding's) and proj (`self.proj.half()`) are half; compound_prompts_text and
    compound_prompt_projections are created in fp32 and never converted; each is cast to half where it enters."""
    ours = maple(tiny_clip(seed=3, layers=IMAGE_LAYERS, text_layers=TEXT_LAYERS, text_width=TEXT_WIDTH), 3)
    precision = Precision("fp16", torch.device("cpu"))
    precision.active = True  # as on CUDA; CPU half arithmetic is enough to check the dtypes
    in_precision(ours, precision)
    dtypes = {name: p.dtype for name, p in ours.named_parameters() if p.requires_grad}
    assert {name for name, dtype in dtypes.items() if dtype == torch.float16} == \
        {"context", "coupling.weight", "coupling.bias"}
    assert {dtype for name, dtype in dtypes.items() if name.startswith("deep_")} == {torch.float32}
    images, labels = batch
    step = ours.step(ours.image_prefix(images.half()), labels, BASE)
    step.total.backward()
    assert torch.isfinite(step.total) and all(p.grad is not None for p in ours.parameters() if p.requires_grad)


@pytest.mark.gpu
def test_fp16_on_cuda_matches_maples_fp16_code(batch):
    """PREC fp16 on CUDA, through the trainer's Precision: the same logits and loss as their fp16 arithmetic."""
    from dear.model.internals import half_precision

    device = torch.device("cuda")
    clip = tiny_clip(seed=3, layers=IMAGE_LAYERS, text_layers=TEXT_LAYERS, text_width=TEXT_WIDTH)
    ours = in_precision(maple(clip, 3).to(device), Precision("fp16", device))
    theirs = [_leaf(ours.context), _linear_copy(ours.coupling).to(device).half(),  # ctx fp16, `self.proj.half()`
              [_leaf(p) for p in ours.deep_text], [_linear_copy(layer).to(device) for layer in ours.deep_coupling]]
    images, labels = (t.to(device) for t in batch)
    step = ours.step(ours.image_prefix(images), labels, BASE)
    expected = their_maple(half_precision(clip), theirs, BASE, images)  # CLIP as OpenAI's fp16 build_model
    assert expected.dtype == torch.float16
    torch.testing.assert_close(step.logits, expected.float(), rtol=1e-2, atol=2e-2)
    torch.testing.assert_close(step.total, F.cross_entropy(expected, labels).float(), rtol=1e-2, atol=1e-2)
    step.total.backward()
    assert ours.context.grad.dtype == torch.float16 and ours.deep_text[0].grad.dtype == torch.float32


# --- the prompt ------------------------------------------------------------------------------

def test_maples_prompt_and_token_positions(clip):
    prompt = context("a photo of a", 2, "golden_retriever")
    assert (prompt.text, prompt.learnable, prompt.shown) == ("a photo of a golden retriever.", 2,
                                                             "X X of a golden retriever.")
    ids = tokenize([prompt.text])[0]
    assert ids[1:3].tolist() == tokenize(["a photo"])[0, 1:3].tolist()  # positions 1-2 become ctx (token_prefix: 0)
    assert ids[3:5].tolist() == tokenize(["of a"])[0, 1:3].tolist()  # token_suffix starts at 1 + n_ctx: "of a"
    run = recipe("maple", demo=False)
    assert prompts_of(run, ["golden_retriever"]) == ["X X of a golden retriever."]  # what `dear recipe` shows
    random = maple(clip, 2, ctx_init="", n_ctx=3)  # CTX_INIT '': N(0, 0.02) vectors and "X X X {class}."
    assert random.prompt_input(["dog"]).tokens[0, 1:4].tolist() == tokenize(["X X X"])[0, 1:4].tolist()


# --- bad recipes -------------------------------------------------------------------------------

@pytest.mark.parametrize("changes,match", [
    ({"prompt_depth": 4}, "prompt_depth = 4 is outside 1..3, the layers of this backbone's shallower tower "
                          r"\(4 image, 3 text\)"),
    ({"prompt_depth": 0}, "prompt_depth = 0"),
    ({"n_ctx": 5}, "n_ctx = 5 must be 1..4 with ctx_init 'a photo of a'"),  # theirs: random vectors past 4 words
    ({"n_ctx": 3, "ctx_init": "a photo"}, "n_ctx = 3 must be 1..2"),  # theirs: the suffix would lose name tokens
    ({"n_ctx": 0, "ctx_init": ""}, "n_ctx = 0 must be at least 1"),
])
def test_a_recipe_maple_cannot_build_is_a_one_line_error(clip, changes, match):
    depth = changes.pop("prompt_depth", 2)
    with pytest.raises(DearError, match=match) as error:
        maple(clip, depth, **changes)
    assert "\n" not in str(error.value) and "train.recipes.maple." in str(error.value)


# --- the recipe: the paper config is their configs ----------------------------------------------

PAPER = fake_run.ROOT / "configs/paper-vitb16.yaml"
DASSL = {"momentum": 0.9, "weight_decay": 5e-4, "crop_scale": [0.08, 1.0], "flip_prob": 0.5, "views": None,
         "min_steps": None}  # Dassl trains exactly its epochs: no minimum of steps on the built-in datasets
EXTEND_CFG = {"n_ctx": 2, "ctx_init": "a photo of a", "precision": "fp16", "prompt_depth": 9}
B2N = {**DASSL, **EXTEND_CFG, "batch_size": 4, "interpolation": "bicubic", "optimizer": "sgd", "lr": 3.5e-3,
       "epochs": 5, "schedule": "cosine", "warmup_epochs": 1, "warmup_lr": 1e-5}  # vit_b16_c2_ep5_batch4_2ctx.yaml
CROSS = {**B2N, "lr": 2.6e-3, "epochs": 2, "prompt_depth": 3}  # vit_b16_c2_ep5_batch4_2ctx_cross_datasets.yaml


def test_the_paper_config_trains_maple_exactly_as_its_authors():
    params = load_params(PAPER)
    jobs = [(d, "base_to_novel") for d in params.study.base_to_novel] + [(params.study.transfer.source, "transfer")]
    assert ("imagenet", "base_to_novel") in jobs  # one config for every dataset, ImageNet included
    for dataset, protocol in jobs:
        run = params.train.recipe("maple", dataset, protocol)
        assert run.values == (CROSS if protocol == "transfer" else B2N), (dataset, protocol)
        assert all(s.kind == "authors" and s.source.startswith("muzairkhattak/multimodal-prompt-learning@904dbd7 ")
                   or key in DASSL for key, s in run.settings.items())


@pytest.mark.parametrize("protocol,expected", [
    ("base_to_novel", [1e-5, 3.5e-3, 3.17e-3, 2.29e-3, 1.21e-3]),  # RECIPES.md's five, to 3 digits
    ("transfer", [1e-5, 2.6e-3]),
])
def test_learning_rate_of_every_epoch_is_maples(protocol, expected):
    run = load_params(PAPER).train.recipe("maple", "imagenet", protocol)
    ours = our_epoch_lrs(run, steps_per_epoch=2)
    assert ours == pytest.approx([dassl_lr(e, run.lr, run.epochs, 1, 1e-5) for e in range(1, run.epochs + 1)],
                                 rel=1e-12)
    assert ours == pytest.approx(expected, rel=3e-3)
