"""The adapted model: equivalence with open_clip, head isolation under the role mask, text tokens, CoOp, fusion."""

from types import SimpleNamespace

import open_clip
import pytest
import torch
import torch.nn.functional as F

from dear.errors import DearError
from dear.model import internals
from dear.model.dear import Adapted
from dear.model.masks import HeadRole
from dear.model.methods import method
from dear.model.trained import load_trained, save_trained
from dear.params import load_params
from tests import fake_run
from tests.tiny_clip import tiny_clip

TEMPLATE = "a photo of a {}."
CLASSES = ["dog", "red car", "tree"]
CONCEPTS = ["color", "shape", "texture", "object", "position"]


def tokenize(texts):
    return open_clip.tokenize(texts, context_length=16)


def spec(name="dear", coop=None, **dear):
    """Method `name` from the project's params, with a small token bank and the given dear/coop values."""
    params = load_params(fake_run.ROOT / "params.yaml")
    train = params.train.model_copy(update={"coop": params.train.coop.model_copy(update=coop or {})})
    return method(name, params.model_copy(update={
        "dear": params.dear.model_copy(update={"d_r": 16, **dear}),
        "mmrl": params.mmrl.model_copy(update={"d_r": 16}), "train": train}))


def layer_roles(kinds, layers=(1, 2, 3)):
    """kinds[h] = (mask_role, concept) for head h of every listed layer."""
    return [HeadRole(layer, h, kind, concept) for layer in layers for h, (kind, concept) in enumerate(kinds)]


MIXED_ROLES = layer_roles([("attribute", "color"), ("attribute", "object"), ("generalization", "other"), ("mixed", None)])


@pytest.fixture(scope="module")
def clip():
    return tiny_clip()


@pytest.fixture(scope="module")
def images():
    torch.manual_seed(1)
    return torch.randn(2, 3, 32, 32)


def reference_text(clip, names=CLASSES):
    return F.normalize(clip.encode_text(tokenize([TEMPLATE.format(n) for n in names])), dim=-1)


@pytest.mark.parametrize("start", [1, 2, 3])
def test_zero_tokens_reproduce_encode_image_and_encode_text(clip, images, start):
    model = Adapted(clip, tokenize, spec(attribute_tokens=0, text_tokens=0, start_layer=start, text_start_layer=min(start, 2)),
                    TEMPLATE, MIXED_ROLES)
    with torch.no_grad():
        features = model.image_features(images)
        text = model.text_features(CLASSES)
    assert features.shape == (2, 1, 32)
    torch.testing.assert_close(features[:, 0], F.normalize(clip.encode_image(images), dim=-1), rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(text, reference_text(clip), rtol=1e-5, atol=1e-6)


def test_all_generalization_heads_keep_the_cls_feature_exact(clip, images):
    """With every head Generalization, CLS and patches never read a token: f_0 is the frozen model's."""
    model = Adapted(clip, tokenize, spec(start_layer=1), TEMPLATE, layer_roles([("generalization", "other")] * 4))
    out = model.image_forward(images, with_frozen=True)
    reference = F.normalize(clip.encode_image(images), dim=-1)
    torch.testing.assert_close(out.features[:, 0], reference, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(out.frozen_cls, reference, rtol=1e-5, atol=1e-6)
    unmasked = Adapted(clip, tokenize, spec("dear_nomask", start_layer=1), TEMPLATE)
    assert not torch.allclose(unmasked.image_features(images)[:, 0], reference, atol=1e-4)


def first_layer_heads(model, x, mask):
    block = model.vision.blocks[model.start - 1]
    return internals.head_outputs(block, x, mask)[:, :, : x.shape[1] - 5]  # [B, H, 1+N, d] image rows only


def test_generalization_head_ignores_changed_attribute_tokens(clip, images):
    model = Adapted(clip, tokenize, spec(start_layer=2), TEMPLATE, MIXED_ROLES)
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
    model = Adapted(clip, tokenize, spec(start_layer=2), TEMPLATE, MIXED_ROLES)
    x, mask = model.first_token_layer(images)
    y = x.clone()
    y[:, x.shape[1] - 5 + token] += torch.randn(x.shape[-1])
    before, after = first_layer_heads(model, x, mask), first_layer_heads(model, y, mask)
    changed = [not torch.allclose(after[:, h], before[:, h]) for h in range(4)]
    assert changed == [token == CONCEPTS.index("color"), token == CONCEPTS.index("object"), False, True]


def test_text_tokens_keep_causality_and_move_the_pooling_index(clip):
    """A class's feature does not depend on which other (longer) names share its batch."""
    model = Adapted(clip, tokenize, spec("dear_nomask", text_start_layer=1), TEMPLATE)
    with torch.no_grad():
        alone = model.text_features(["dog"])
        together = model.text_features(["dog", "a rather long and unusual class name"])
        frozen = model.frozen_text_features(["dog"])
    torch.testing.assert_close(together[:1], alone, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(frozen, reference_text(clip, ["dog"]), rtol=1e-5, atol=1e-6)
    assert not torch.allclose(alone, frozen, atol=1e-4)


@pytest.mark.parametrize("template", [TEMPLATE, "a photo of a thing on a {} background."])
def test_coop_starts_as_the_hand_written_prompt(clip, template):
    """Context = the prompt's words before {} (CoOp's 'a photo of a': 4 vectors); the rest follows the name."""
    model = Adapted(clip, tokenize, spec("coop"), template)
    assert [n for n, p in model.named_parameters() if p.requires_grad] == ["context"]
    words = len(template.partition("{}")[0].split())
    assert model.context.shape == (words, 64)
    with torch.no_grad():
        text = model.text_features(CLASSES)
    expected = F.normalize(clip.encode_text(tokenize([template.format(n) for n in CLASSES])), dim=-1)
    torch.testing.assert_close(text, expected, rtol=1e-5, atol=1e-6)


def test_coop_random_context_is_coops_few_shot_prompt(clip):
    """Random context: `random_context` vectors N(0, init_std) before the name and CoOp's '.'."""
    model = Adapted(clip, tokenize, spec("coop", coop={"init": "random", "random_context": 8}), TEMPLATE)
    assert model.context.shape == (8, 64) and 0.01 < float(model.context.detach().std()) < 0.03
    with torch.no_grad():
        model.context.copy_(internals.text_token_embeddings(clip, tokenize(["a photo of a"]))[0, 1:5].repeat(2, 1))
        text = model.text_features(CLASSES)
    twice = F.normalize(clip.encode_text(tokenize([f"a photo of a a photo of a {n}." for n in CLASSES])), dim=-1)
    torch.testing.assert_close(text, twice, rtol=1e-5, atol=1e-6)


def test_coop_context_too_long_for_the_text_tower_is_an_error(clip):
    long = spec("coop", coop={"init": "random", "random_context": 14})
    with pytest.raises(DearError, match="train.coop"):
        Adapted(clip, tokenize, long, TEMPLATE).text_features(CLASSES)


def test_fusion_starts_at_init_cls_and_fuses_streams(clip, images):
    model = Adapted(clip, tokenize, spec("dear_nomask"), TEMPLATE)
    alpha = model.alpha
    torch.testing.assert_close(alpha, torch.tensor([0.7] + [0.06] * 5))
    with torch.no_grad():
        text = model.text_features(CLASSES)
        streams = model.stream_logits(images, text)
    assert streams.shape == (2, 6, 3)
    cos = torch.einsum("bke,ce->bkc", model.image_features(images), text)
    torch.testing.assert_close(streams, internals.logit_scale(clip) * cos)
    torch.testing.assert_close(model.fused_logits(streams, alpha), (streams * alpha[None, :, None]).sum(1))


@pytest.mark.parametrize("name", ["mmrl", "dear_nomask", "dear"])
def test_faded_out_tokens_leave_the_untouched_model(clip, images, name):
    """fade 0 (before training): CLS and text are the frozen model's and every token stream is the CLS feature."""
    model = Adapted(clip, tokenize, spec(name, start_layer=1), TEMPLATE, MIXED_ROLES)
    with torch.no_grad():
        full = model.image_features(images), model.text_features(CLASSES)
        model.fade = 0.0
        features, text = model.image_features(images), model.text_features(CLASSES)
        model.fade = 0.5
        halfway = model.image_features(images)
    reference = F.normalize(clip.encode_image(images), dim=-1)
    for stream in range(features.shape[1]):
        torch.testing.assert_close(features[:, stream], reference, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(text, reference_text(clip), rtol=1e-5, atol=1e-6)
    assert not torch.allclose(full[0][:, 0], reference, atol=1e-3) and not torch.allclose(full[1], text, atol=1e-3)
    assert not torch.allclose(halfway, full[0], atol=1e-3) and not torch.allclose(halfway[:, 0], reference, atol=1e-3)


def test_fade_travels_with_the_trained_state(clip):
    model = Adapted(clip, tokenize, spec("dear_nomask"), TEMPLATE)
    model.fade = 0.25
    state = model.trainable_state()
    assert float(state["fade"]) == 0.25 and "fade" not in Adapted(clip, tokenize, spec("coop"), TEMPLATE).trainable_state()
    again = Adapted(clip, tokenize, spec("dear_nomask"), TEMPLATE)
    again.load_trainable(state, "test")
    assert float(again.fade) == 0.25
    state.pop("fade")  # a model.pt from before the fade-in: tokens at full weight
    again.load_trainable(state, "test")
    assert float(again.fade) == 1.0


def test_frozen_layers_run_without_autograd(clip, images):
    model = Adapted(clip, tokenize, spec("dear", start_layer=3), TEMPLATE, MIXED_ROLES).train()
    seen = {}
    hooks = [block.mlp.register_forward_hook(lambda m, i, o, k=k: seen.setdefault(k, o.requires_grad))
             for k, block in enumerate(model.vision.blocks)]
    out = model.image_forward(images, with_frozen=True)
    for hook in hooks:
        hook.remove()
    assert seen == {0: False, 1: False, 2: True}
    assert out.features.requires_grad and not out.frozen_cls.requires_grad


@pytest.mark.parametrize("name,calls", [("dear_nomask", 1), ("coop", 2)])
def test_text_prefix_is_computed_once_per_class_list(clip, name, calls):
    counted = []

    def counting(texts):
        counted.append(len(texts))
        return tokenize(texts)

    model = Adapted(clip, counting, spec(name), TEMPLATE)
    counted.clear()  # CoOp tokenizes its prompt's words once to initialize the context
    first = model.text_features(CLASSES)
    second = model.text_features(CLASSES)
    assert first.requires_grad and len(counted) == calls
    torch.testing.assert_close(first, second)
    model.text_features(CLASSES[:2])
    assert len(counted) == 2 * calls


def test_trainable_parameters_per_method(clip):
    counts = {name: sum(p.numel() for p in Adapted(clip, tokenize, spec(name), TEMPLATE, MIXED_ROLES).parameters()
                        if p.requires_grad) for name in ("zeroshot", "coop", "mmrl", "dear_nomask", "dear")}
    aligner = lambda width: 16 * width + width  # noqa: E731
    # dear: R [5, 16] + vision aligners of the last third (layer 3 of 3) + text aligners (layer 2 of 2) + P_attr [64, 32];
    # the fusion weights are refit by `fuse`, not trained, under the mmrl objective
    dear = 5 * 16 + aligner(64) + aligner(64) + 64 * 32
    # mmrl: R [5, 16] + aligners of the upper half (image layers 2-3, text layers 1-2) + proj_rep [64, 32]
    mmrl = 5 * 16 + 2 * aligner(64) + 2 * aligner(64) + 64 * 32
    assert counts == {"zeroshot": 0, "coop": 4 * 64, "mmrl": mmrl, "dear_nomask": dear, "dear": dear}


def test_mmrl_pools_its_tokens_into_one_stream_with_a_random_projection(clip, images):
    model = Adapted(clip, tokenize, spec("mmrl"), TEMPLATE)
    assert model.method.stream_names() == ["cls", "rep"] and (model.start, model.text_start) == (2, 1)
    torch.testing.assert_close(model.alpha, torch.tensor([0.7, 0.3]))
    assert not torch.allclose(model.p_attr, internals.image_projection(clip))
    with torch.no_grad():
        assert model.image_features(images).shape == (2, 2, 32)


def test_fused_objective_trains_the_fusion_weights(clip):
    params = load_params(fake_run.ROOT / "params.yaml")
    fused = method("dear_nomask", params.model_copy(update={
        "train": params.train.model_copy(update={"objective": "fused"})}))
    model = Adapted(clip, tokenize, fused, TEMPLATE)
    assert model.fusion_w.requires_grad


def test_dear_without_roles_is_an_error(clip):
    with pytest.raises(DearError, match="roles"):
        Adapted(clip, tokenize, spec("dear"), TEMPLATE, None)


def test_start_layer_outside_the_tower_is_an_error(clip):
    with pytest.raises(DearError, match="start_layer"):
        Adapted(clip, tokenize, spec("dear_nomask", start_layer=4), TEMPLATE)
    with pytest.raises(DearError, match="dear.text_start_layer"):
        Adapted(clip, tokenize, spec("dear_nomask", text_start_layer=3), TEMPLATE)


def test_load_trained_round_trip_and_mismatches(clip, images, tmp_path):
    roles = fake_run.roles(tmp_path / "roles.parquet", "abc", layers=3, heads=4)
    backbone = SimpleNamespace(model=clip, tokenizer=tokenize, card={"sha256": "abc"})
    from dear.io import sha256_file
    from dear.model.trained import read_roles

    model = Adapted(clip, tokenize, spec("dear"), TEMPLATE, read_roles(roles, backbone, "abc"), seed=3)
    with torch.no_grad():
        model.bank.add_(1.0)
    save_trained(tmp_path / "model.pt", model, {"backbone_sha256": "abc", "roles_sha256": sha256_file(roles)})
    loaded = load_trained(tmp_path / "model.pt", backbone, roles)
    with torch.no_grad():
        torch.testing.assert_close(loaded.stream_logits(images, loaded.text_features(CLASSES)),
                                   model.stream_logits(images, model.text_features(CLASSES)))
    with pytest.raises(DearError, match="backbone"):
        load_trained(tmp_path / "model.pt", SimpleNamespace(model=clip, tokenizer=tokenize, card={"sha256": "xyz"}), roles)
    other = fake_run.roles(tmp_path / "other.parquet", "abc", layers=3, heads=4, kinds=(("mixed", None),))
    with pytest.raises(DearError, match="roles"):
        load_trained(tmp_path / "model.pt", backbone, other)
    with pytest.raises(DearError, match="roles"):
        load_trained(tmp_path / "model.pt", backbone, None)
