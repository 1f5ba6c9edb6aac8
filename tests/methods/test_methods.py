"""The methods' models: equivalence with open_clip, head isolation under the role mask, text tokens, CoOp, fusion."""

import pytest
import torch
import torch.nn.functional as F

from dear.errors import DearError
from dear.methods import REGISTRY, names
from dear.model import internals
from dear.methods.trained import load_trained, save_trained
from tests import fake_run
from tests.floats import assert_same_up_to_rounding
from tests.methods_tools import (CLASSES, CONCEPTS, MIXED_ROLES, TEMPLATE, Backbone, build, layer_roles,
                                 tokenize)
from tests.tiny_clip import tiny_clip


@pytest.fixture(scope="module")
def clip():
    return tiny_clip()


@pytest.fixture(scope="module")
def images():
    torch.manual_seed(1)
    return torch.randn(2, 3, 32, 32)


def reference_text(clip, names=CLASSES, template=TEMPLATE):
    return F.normalize(clip.encode_text(tokenize([template.format(n) for n in names])), dim=-1)


def features(model, images):
    return model.encode(model.image_prefix(images))


def test_every_registered_method_builds_and_has_a_recipe(clip):
    assert names()[:3] == ["zeroshot", "linear_probe", "coop"] and set(names()) == set(REGISTRY)
    for name in names():
        model = build(clip, name, MIXED_ROLES)
        assert model.name == name and model.recipe.method == name


@pytest.mark.parametrize("start", [1, 2, 3])
def test_zero_tokens_reproduce_encode_image_and_encode_text(clip, images, start):
    model = build(clip, "dear", MIXED_ROLES, attribute_tokens=0, text_tokens=0, start_layer=start,
                  text_start_layer=min(start, 2))
    with torch.no_grad():
        image, text = features(model, images), model.text_features(CLASSES)
    assert image.shape == (2, 1, 32)
    assert_same_up_to_rounding(image[:, 0], F.normalize(clip.encode_image(images), dim=-1))
    assert_same_up_to_rounding(text, reference_text(clip))


def test_zeroshot_is_clip_with_the_hand_written_prompt_and_spaces_for_underscores(clip, images):
    model = build(clip, "zeroshot")
    with torch.no_grad():
        text = model.text_features(["sea_lion", "dog"])
        logits = model.logits(features(model, images), ["sea_lion", "dog"])[:, 0]
    expected = reference_text(clip, ["sea lion", "dog"])
    assert_same_up_to_rounding(text, expected)
    image = F.normalize(clip.encode_image(images), dim=-1)
    torch.testing.assert_close(logits, clip.logit_scale.exp() * image @ expected.T, rtol=1e-5, atol=1e-5)
    assert not model.trains


def test_all_generalization_heads_keep_the_cls_feature_exact(clip, images):
    """With every head Generalization, CLS and patches never read a token: f_0 is the frozen model's."""
    model = build(clip, "dear", layer_roles([("generalization", "other")] * 4), start_layer=1)
    prefix = model.image_prefix(images)
    reference = F.normalize(clip.encode_image(images), dim=-1)
    assert_same_up_to_rounding(model.encode(prefix)[:, 0], reference)
    assert_same_up_to_rounding(model.frozen_image(prefix), reference)
    unmasked = build(clip, "dear_nomask", start_layer=1)
    assert not torch.allclose(features(unmasked, images)[:, 0], reference, atol=1e-4)


def first_layer_heads(model, x, mask):
    block = model.vision.blocks[model.start - 1]
    return internals.head_outputs(block, x, mask)[:, :, : x.shape[1] - 5]  # [B, H, 1+N, d] image rows only


def test_generalization_head_ignores_changed_attribute_tokens(clip, images):
    model = build(clip, "dear", MIXED_ROLES, start_layer=2)
    x, mask = model.first_token_layer(images)
    before = first_layer_heads(model, x, mask)
    with torch.no_grad():
        model.bank.add_(torch.randn_like(model.bank))
    x2, _ = model.first_token_layer(images)
    assert not torch.allclose(x[:, -5:], x2[:, -5:])
    after = first_layer_heads(model, x2, mask)
    torch.testing.assert_close(after[:, 2], before[:, 2])  # generalization head: unchanged
    for head in (0, 1, 3):  # attribute (color, object) and mixed heads see the new tokens
        assert not torch.allclose(after[:, head], before[:, head])


@pytest.mark.parametrize("token", range(5))
def test_attribute_head_reads_only_its_concept_token_and_mixed_reads_all(clip, images, token):
    model = build(clip, "dear", MIXED_ROLES, start_layer=2)
    x, mask = model.first_token_layer(images)
    y = x.clone()
    y[:, x.shape[1] - 5 + token] += torch.randn(x.shape[-1])
    before, after = first_layer_heads(model, x, mask), first_layer_heads(model, y, mask)
    changed = [not torch.allclose(after[:, h], before[:, h]) for h in range(4)]
    assert changed == [token == CONCEPTS.index("color"), token == CONCEPTS.index("object"), False, True]


def test_text_tokens_keep_causality_and_move_the_pooling_index(clip):
    """A class's feature does not depend on which other (longer) names share its batch."""
    model = build(clip, "dear_nomask", text_start_layer=1)
    with torch.no_grad():
        alone = model.text_features(["dog"])
        together = model.text_features(["dog", "a rather long and unusual class name"])
        frozen = model.frozen_text(["dog"])
    assert_same_up_to_rounding(together[:1], alone)  # other padding, other product shapes
    assert_same_up_to_rounding(frozen, reference_text(clip, ["dog"]))
    assert not torch.allclose(alone, frozen, atol=1e-4)


@pytest.mark.parametrize("dataset", ["world_objects", "world_colors"])
def test_coop_starts_as_a_photo_of_a_name_on_every_dataset(clip, dataset):
    """CoOp's base-to-novel prompt: 4 context vectors from "a photo of a", "{name}." after them, whatever the
    dataset's own hand-written prompt (world_colors: "a photo of a thing on a {} background.")."""
    from dear.methods import create
    from tests.methods_tools import recipe

    model = create("coop", Backbone(clip), recipe("coop", dataset=dataset))
    assert [n for n, p in model.named_parameters() if p.requires_grad] == ["context"]
    assert model.context.shape == (4, 64)
    with torch.no_grad():
        text = model.text_features(["sea_lion", "tree"])
    assert_same_up_to_rounding(text, reference_text(clip, ["sea lion", "tree"]))


def test_coop_random_context_is_coops_few_shot_prompt(clip):
    """ctx_init '': n_ctx vectors N(0, 0.02) before the name and CoOp's '.'."""
    model = build(clip, "coop", ctx_init="", n_ctx=8)
    assert model.context.shape == (8, 64) and 0.01 < float(model.context.detach().std()) < 0.03
    with torch.no_grad():
        model.context.copy_(internals.text_token_embeddings(clip, tokenize(["a photo of a"]))[0, 1:5].repeat(2, 1))
        text = model.text_features(CLASSES)
    twice = F.normalize(clip.encode_text(tokenize([f"a photo of a a photo of a {n}." for n in CLASSES])), dim=-1)
    assert_same_up_to_rounding(text, twice)


def test_fusion_starts_at_init_cls_and_fuses_streams(clip, images):
    model = build(clip, "dear_nomask")
    alpha = model.alpha
    torch.testing.assert_close(alpha, torch.tensor([0.7] + [0.06] * 5))
    with torch.no_grad():
        image = features(model, images)
        logits = model.logits(image, CLASSES)
        text = model.text_features(CLASSES)
    assert logits.shape == (2, 6, 3)
    torch.testing.assert_close(logits, internals.logit_scale(clip) * torch.einsum("bke,ce->bkc", image, text))
    fused = model.output(logits, alpha, seen=True, novel="cls")
    torch.testing.assert_close(fused, (logits * alpha[None, :, None]).sum(1))
    torch.testing.assert_close(model.output(logits, alpha, seen=False, novel="cls"), logits[:, 0])
    torch.testing.assert_close(model.output(logits, alpha, seen=False, novel="fused"), fused)


@pytest.mark.parametrize("name", ["mmrl", "dear_nomask", "dear"])
def test_faded_out_tokens_leave_the_untouched_model(clip, images, name):
    """fade 0 (before training): CLS and text are the frozen model's and every token stream is the CLS feature."""
    model = build(clip, name, MIXED_ROLES, start_layer=1)
    with torch.no_grad():
        full = features(model, images), model.text_features(CLASSES)
        model.fade = 0.0
        image, text = features(model, images), model.text_features(CLASSES)
        model.fade = 0.5
        halfway = features(model, images)
    reference = F.normalize(clip.encode_image(images), dim=-1)
    for stream in range(image.shape[1]):
        assert_same_up_to_rounding(image[:, stream], reference)
    assert_same_up_to_rounding(text, reference_text(clip))
    assert not torch.allclose(full[0][:, 0], reference, atol=1e-3) and not torch.allclose(full[1], text, atol=1e-3)
    assert not torch.allclose(halfway, full[0], atol=1e-3) and not torch.allclose(halfway[:, 0], reference, atol=1e-3)


def test_fade_travels_with_the_trained_state(clip):
    model = build(clip, "dear_nomask")
    model.fade = 0.25
    state = model.trainable_state()
    assert float(state["fade"]) == 0.25 and "fade" not in build(clip, "coop").trainable_state()
    again = build(clip, "dear_nomask")
    again.load_trainable(state, "test")
    assert float(again.fade) == 0.25
    state.pop("fade")  # a model.pt from before the fade-in: tokens at full weight
    again.load_trainable(state, "test")
    assert float(again.fade) == 1.0


def test_frozen_layers_run_without_autograd(clip, images):
    model = build(clip, "dear", MIXED_ROLES, start_layer=3).train()
    seen = {}
    hooks = [block.mlp.register_forward_hook(lambda m, i, o, k=k: seen.setdefault(k, o.requires_grad))
             for k, block in enumerate(model.vision.blocks)]
    prefix = model.image_prefix(images)
    image, frozen = model.encode(prefix), model.frozen_image(prefix)
    for hook in hooks:
        hook.remove()
    assert seen == {0: False, 1: False, 2: True}
    assert image.requires_grad and not frozen.requires_grad


@pytest.mark.parametrize("name", ["dear_nomask", "coop"])
def test_prompts_are_tokenized_once_per_class_list(clip, name):
    counted = []

    def counting(texts):
        counted.append(len(texts))
        return tokenize(texts)

    from dear.methods import create
    from tests.methods_tools import recipe

    backbone = Backbone(clip)
    backbone.tokenizer = counting
    model = create(name, backbone, recipe(name))
    counted.clear()  # CoOp tokenizes its context words once to initialize the context
    first = model.text_features(CLASSES)
    second = model.text_features(CLASSES)
    assert first.requires_grad and len(counted) == 1
    torch.testing.assert_close(first, second)
    model.text_features(CLASSES[:2])
    assert len(counted) == 2


def test_trainable_parameters_per_method(clip):
    counts = {name: sum(p.numel() for p in build(clip, name, MIXED_ROLES).parameters() if p.requires_grad)
              for name in ("zeroshot", "coop", "mmrl", "dear_nomask", "dear")}
    aligner = lambda width: 16 * width + width  # noqa: E731
    # dear: R [5, 16] + vision aligners of the last third (layer 3 of 3) + text aligners (layer 2 of 2) + P_attr [64, 32];
    # the fusion weights are refit by `fuse`, not trained, under the mmrl objective
    dear = 5 * 16 + aligner(64) + aligner(64) + 64 * 32
    # mmrl: R [5, 16] + projections of the upper half (image layers 2-3, text layers 1-2) + proj_rep [64, 32]
    mmrl = 5 * 16 + 2 * aligner(64) + 2 * aligner(64) + 64 * 32
    assert counts == {"zeroshot": 0, "coop": 4 * 64, "mmrl": mmrl, "dear_nomask": dear, "dear": dear}


def test_fused_objective_trains_the_fusion_weights(clip):
    assert build(clip, "dear_nomask", objective="fused").fusion_w.requires_grad
    assert not build(clip, "dear_nomask").fusion_w.requires_grad


def test_dear_without_roles_is_an_error(clip):
    with pytest.raises(DearError, match="roles"):
        build(clip, "dear", None)


def test_start_layer_outside_the_tower_is_an_error(clip):
    with pytest.raises(DearError, match="start_layer"):
        build(clip, "dear_nomask", start_layer=4)
    with pytest.raises(DearError, match="text_start_layer"):
        build(clip, "dear_nomask", text_start_layer=3)
    with pytest.raises(DearError, match="start_layer = 6"):
        build(clip, "mmrl", start_layer=6)


def test_load_trained_round_trip_and_mismatches(clip, images, tmp_path):
    roles = fake_run.roles(tmp_path / "roles.parquet", "abc", layers=3, heads=4)
    backbone = Backbone(clip)
    from dear.runtime.io import sha256_file
    from dear.methods.trained import read_roles

    model = build(clip, "dear", read_roles(roles, backbone, "abc"), seed=3)
    with torch.no_grad():
        model.bank.add_(1.0)
    save_trained(tmp_path / "model.pt", model, {"backbone_sha256": "abc", "roles_sha256": sha256_file(roles)})
    loaded = load_trained(tmp_path / "model.pt", backbone, roles)
    assert loaded.recipe.values == model.recipe.values
    with torch.no_grad():
        torch.testing.assert_close(loaded.logits(features(loaded, images), CLASSES),
                                   model.logits(features(model, images), CLASSES))
    with pytest.raises(DearError, match="backbone"):
        load_trained(tmp_path / "model.pt", Backbone(clip, sha="xyz"), roles)
    other = fake_run.roles(tmp_path / "other.parquet", "abc", layers=3, heads=4, kinds=(("mixed", None),))
    with pytest.raises(DearError, match="roles"):
        load_trained(tmp_path / "model.pt", backbone, other)
    with pytest.raises(DearError, match="roles"):
        load_trained(tmp_path / "model.pt", backbone, None)
