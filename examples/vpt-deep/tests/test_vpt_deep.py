"""VPT-deep through dear's testing kit (the checks every built-in method passes), and its features against a
hand-built re-implementation of its authors' forward (muzairkhattak/multimodal-prompt-learning@904dbd7 clip/model.py:
VisionTransformer.forward and ResidualAttentionBlock_IVLP.forward, VPT design) on the kit's tiny backbone."""

import torch
import torch.nn.functional as F

from dear.testing import Kit


def test_vpt_deep_passes_the_kit(tmp_path):
    Kit("vpt_deep", tmp_path).check()


def their_image_feature(visual, images, first, deeper):
    """Their VisionTransformer.forward, written out on open_clip's modules: tokens appended before ln_pre, the last
    n positions replaced by each deeper layer's own tokens at its block (raw), CLS -> ln_post -> proj."""
    x = visual.conv1(images)  # [B, D, g, g]
    x = x.reshape(x.shape[0], x.shape[1], -1).permute(0, 2, 1)  # [B, N, D]
    cls = visual.class_embedding + torch.zeros(x.shape[0], 1, x.shape[-1])
    x = torch.cat([cls, x], dim=1) + visual.positional_embedding  # [B, 1+N, D]
    x = visual.ln_pre(torch.cat([x, first.expand(x.shape[0], -1, -1)], dim=1))  # [B, 1+N+n, D]
    n = first.shape[0]
    for i, block in enumerate(visual.transformer.resblocks):
        if 1 <= i <= len(deeper):  # ResidualAttentionBlock_IVLP with add_prompt (i != 0, i < depth)
            x = torch.cat([x[:, : x.shape[1] - n], deeper[i - 1].expand(x.shape[0], -1, -1)], dim=1)
        h = block.ln_1(x)
        attention = block.attn(h, h, h, need_weights=False)[0] if block.attn.batch_first else \
            block.attn(*(h.transpose(0, 1),) * 3, need_weights=False)[0].transpose(0, 1)
        x = x + block.ls_1(attention)
        x = x + block.ls_2(block.mlp(block.ln_2(x)))
    return visual.ln_post(x[:, 0]) @ visual.proj  # [B, E]


def test_the_features_are_their_forwards_on_a_hand_built_case(tmp_path):
    kit = Kit("vpt_deep", tmp_path)
    model = kit.model().eval()
    assert model.frozen_depth == 0 and model.depth == 2 and len(model.tokens) == 2  # the kit's towers: 2 layers
    assert [tuple(t.shape) for t in model.tokens] == [(8, model.vision.width)] * 2  # N_CTX_VISION 8
    torch.manual_seed(0)
    with torch.no_grad():
        for tokens in model.tokens:  # away from the init, so that a token in the wrong place shows
            tokens.normal_(0, 1.0)
        images = torch.randn(3, 3, 32, 32)
        ours = model.encode(model.image_prefix(images))[:, 0]  # [B, E]
        theirs = F.normalize(their_image_feature(model.clip.visual, images, model.tokens[0], list(model.tokens[1:])),
                             dim=-1)
        torch.testing.assert_close(ours, theirs, atol=1e-6, rtol=1e-5)
        classes = ["apple", "hot_dog"]
        tokenized = model.tokenizer(["a photo of a apple.", "a photo of a hot dog."])
        fixed = F.normalize(model.clip.encode_text(tokenized), dim=-1)  # FixedEmbeddings: CLIP's own text features
        torch.testing.assert_close(model.text_features(classes), fixed, atol=1e-6, rtol=1e-5)
    assert [name for name, p in model.named_parameters() if p.requires_grad] == ["tokens.0", "tokens.1"]
