"""Tiny random-weight open_clip models for fast tests (no registry, no download)."""

import open_clip
import torch


def tiny_clip(seed: int = 0, image_size: int = 32, patch: int = 8, width: int = 64, layers: int = 3, heads: int = 4,
              text_layers: int = 2, quick_gelu: bool = False, ls_init: float | None = None,
              text_width: int | None = None) -> open_clip.model.CLIP:
    """A CLIP with the standard towers, small enough to run in milliseconds (text_width: None = `width`)."""
    torch.manual_seed(seed)
    vision = dict(image_size=image_size, patch_size=patch, width=width, layers=layers, head_width=width // heads,
                  ls_init_value=ls_init)
    text = dict(context_length=16, vocab_size=49408, width=text_width or width, heads=heads, layers=text_layers,
                ls_init_value=ls_init)
    model = open_clip.model.CLIP(embed_dim=32, vision_cfg=vision, text_cfg=text, quick_gelu=quick_gelu)
    # open_clip initializes projections and biases to constants; randomize them so tests can tell terms apart
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name.endswith("bias") or "proj" in name or "ls_" in name:
                param.normal_(0, 0.05 if name.endswith("bias") else 0.2)
    return model.eval()
