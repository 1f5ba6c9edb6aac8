"""The method through dear's testing kit (the checks every built-in method passes), and what its authors' code does."""

import torch

from dear.testing import Kit


def test_clip_adapter_passes_the_kit(tmp_path):
    Kit("clip_adapter", tmp_path).check()


def test_the_feature_is_a_fifth_adapter_and_four_fifths_clip(tmp_path):
    """CustomCLIP.forward: x = adapter(f); f = 0.2 * x + 0.8 * f, then normalized; a ReLU ends the adapter."""
    model = Kit("clip_adapter", tmp_path).model()
    images = torch.randn(2, 3, 32, 32)
    prefix = model.image_prefix(images)
    f = model.frozen_embedding(prefix)  # [B, E]
    first, second = model.adapter[0].weight, model.adapter[2].weight  # [E/4, E], [E, E/4]
    assert first.shape == (f.shape[1] // 4, f.shape[1]) and model.adapter[0].bias is None
    x = torch.relu(torch.relu(f @ first.T) @ second.T)
    expected = torch.nn.functional.normalize(0.2 * x + 0.8 * f, dim=-1)
    torch.testing.assert_close(model.encode(prefix)[:, 0], expected)
    assert [n for n, p in model.named_parameters() if p.requires_grad] == ["adapter.0.weight", "adapter.2.weight"]
