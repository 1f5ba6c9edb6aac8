"""The per-head decomposition adds up exactly to encode_image (SPEC §1)."""

import open_clip
import pytest
import torch

from dear.errors import DearError
from dear.model.decompose import HeadStatistics, decompose, head_statistics, mean_ablate
from tests.floats import assert_same_up_to_rounding
from tests.tiny_clip import tiny_clip


def _assert_exact(model, images, layers):
    parts = decompose(model, images, layers)
    with torch.no_grad():
        reference = model.encode_image(images)
    scale = float(reference.abs().max())
    torch.testing.assert_close(parts.embedding, reference, rtol=1e-5, atol=1e-5 * scale)
    torch.testing.assert_close(parts.total(), reference, rtol=1e-5, atol=1e-5 * scale)
    return parts


@pytest.mark.parametrize("ls_init", [None, 0.1], ids=["no-layerscale", "layerscale"])
def test_tiny_terms_add_up_to_encode_image(ls_init):
    model = tiny_clip(ls_init=ls_init, layers=3)
    parts = _assert_exact(model, torch.randn(3, 3, 32, 32), layers=2)
    assert parts.heads.shape == (3, 2, 4, 32)  # [B, Lp, H, E]
    assert parts.first_layer == 2
    # terms really differ per head (a decomposition that dumps everything in one term would pass the sum)
    assert parts.heads[:, :, 0].abs().sum() > 0 and not torch.allclose(parts.heads[:, :, 0], parts.heads[:, :, 1])


def real_image_tower(arch: str) -> open_clip.model.CLIP:
    """A random-weight CLIP whose image tower is exactly `arch`'s (the text tower is shrunk: it is never used)."""
    config = open_clip.get_model_config(arch)
    text = dict(config["text_cfg"], width=64, heads=4, layers=1)
    torch.manual_seed(0)
    return open_clip.model.CLIP(embed_dim=config["embed_dim"], vision_cfg=config["vision_cfg"], text_cfg=text).eval()


def test_vit_b16_terms_add_up():
    model = real_image_tower("ViT-B-16")
    parts = _assert_exact(model, torch.randn(1, 3, 224, 224), layers=4)
    assert parts.heads.shape == (1, 4, 12, 512)
    assert parts.first_layer == 9  # layers 9-12, as in the paper


@pytest.mark.slow
@pytest.mark.xdist_group("vit_l14")
def test_vit_l14_terms_add_up():
    model = real_image_tower("ViT-L-14")
    parts = _assert_exact(model, torch.randn(1, 3, 224, 224), layers=4)
    assert parts.heads.shape == (1, 4, 16, 768)
    assert parts.first_layer == 21


def test_all_layers_profiled_keeps_only_the_embedding_as_residual():
    model = tiny_clip(layers=3)
    _assert_exact(model, torch.randn(2, 3, 32, 32), layers=3)


def test_more_layers_than_the_model_has_is_a_clean_error():
    with pytest.raises(DearError, match="profile.layers: asked for the last 5 layers but the image tower has 3"):
        decompose(tiny_clip(layers=3), torch.randn(1, 3, 32, 32), layers=5)


def test_streamed_statistics_equal_those_of_the_full_matrix():
    model = tiny_clip()
    images = torch.randn(10, 3, 32, 32)
    full = decompose(model, images, 2).heads.double()  # [M, Lp, H, E]
    stats = head_statistics(model, images.split(3), layers=2)
    assert stats.count == 10
    centred = full - full.mean(0)
    expected = torch.einsum("mlhe,mlhf->lhef", centred, centred) / 10
    torch.testing.assert_close(stats.mean, full.mean(0), rtol=1e-5, atol=1e-6)
    assert_same_up_to_rounding(stats.covariance, expected, per_vector=False)  # float32 heads of other batch splits


def test_normalized_contributions_add_up_to_the_unit_embedding():
    model = tiny_clip()
    images = torch.randn(4, 3, 32, 32)
    parts = decompose(model, images, 3)
    unit = parts.embedding / parts.embedding.norm(dim=-1, keepdim=True)
    norm = parts.embedding.norm(dim=-1)[:, None]
    rebuilt = (parts.residual + parts.heads.sum((1, 2)) + parts.attn_bias.sum(1) + parts.mlp.sum(1)) / norm
    torch.testing.assert_close(rebuilt, unit, rtol=1e-5, atol=1e-5)
    stats = head_statistics(model, [images], layers=3, contributions="normalized")
    torch.testing.assert_close(stats.mean.float(), (parts.heads / norm[:, :, None, None]).mean(0), rtol=1e-4, atol=1e-5)


def test_empty_statistics_are_a_clean_error():
    with pytest.raises(DearError, match="no images"):
        HeadStatistics().covariance


def test_mean_ablation_replaces_exactly_the_chosen_heads():
    model = tiny_clip()
    parts = decompose(model, torch.randn(5, 3, 32, 32), 2)
    means = parts.heads.mean(0)  # [Lp, H, E]
    torch.testing.assert_close(mean_ablate(parts.embedding, parts.heads, means, []), parts.embedding)
    ablated = mean_ablate(parts.embedding, parts.heads, means, [(1, 2)])
    heads = parts.heads.clone()
    heads[:, 1, 2] = means[1, 2]
    rebuilt = parts.residual + heads.sum((1, 2)) + parts.attn_bias.sum(1) + parts.mlp.sum(1)
    torch.testing.assert_close(ablated, rebuilt, rtol=1e-5, atol=1e-5)
    everything = [(i, h) for i in range(2) for h in range(4)]
    spread = mean_ablate(parts.embedding, parts.heads, means, everything).std(0).sum()
    assert spread < parts.embedding.std(0).sum()  # heads' image-specific parts are gone
