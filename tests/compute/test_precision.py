"""Precision as the authors': fp16 (CoOp's PREC fp16), amp (MMRL's), bf16 (ours); fp32 on CPU."""

import pytest
import torch

from dear.compute.device import Precision
from dear.methods.base import in_precision
from tests.methods_tools import CLASSES, build
from tests.tiny_clip import tiny_clip


@pytest.mark.parametrize("name", ["fp16", "amp", "bf16", "fp32"])
def test_every_precision_runs_fp32_on_cpu(name):
    precision = Precision(name, torch.device("cpu"))
    assert not precision.active and not precision.half and not precision.scales_loss
    assert precision.describe() == "fp32"


def test_fp16_is_clip_and_the_learnable_tensors_in_half_with_norms_in_fp32():
    """OpenAI's convert_weights: linear, conv, attention weights and projections in fp16; LayerNorm in fp32.

    Run on the CPU with the CUDA path forced: the arithmetic is the same kind, the tolerance that of fp16.
    """
    clip = tiny_clip()
    model = build(clip, "coop")
    images, labels = torch.randn(2, 3, 32, 32), torch.tensor([0, 2])
    with torch.no_grad():
        reference = model.logits(model.encode(model.image_prefix(images)), CLASSES)
    precision = Precision("fp16", torch.device("cpu"))
    precision.active = True  # as on CUDA
    in_precision(model, precision)
    assert model.context.dtype == torch.float16 and clip.visual.conv1.weight.dtype == torch.float16
    assert clip.visual.ln_pre.weight.dtype == torch.float32 and type(clip.visual.ln_pre).__name__ == "LayerNormFp32"
    assert clip.token_embedding.weight.dtype == torch.float32  # embeddings stay fp32, as OpenAI's
    with torch.no_grad():
        half = model.logits(model.encode(model.image_prefix(images)), CLASSES)
    torch.testing.assert_close(half, reference, rtol=0, atol=0.05)
    step = model.step(model.image_prefix(images), labels, CLASSES)
    step.total.backward()
    assert model.context.grad.dtype == torch.float16 and torch.isfinite(model.context.grad).all()


@pytest.mark.gpu
@pytest.mark.parametrize("method,precision", [("coop", "fp16"), ("mmrl", "amp"), ("dear_nomask", "bf16")])
def test_the_authors_precisions_train_on_cuda(method, precision, tmp_path):
    from tests import fake_run
    from dear.config.params import load_params
    from dear.stages import train

    sha = fake_run.backbone(tmp_path / "backbone")
    fewshot = fake_run.fewshot(tmp_path / "fewshot.parquet", tmp_path / "images")
    fake_run.roles(tmp_path / "roles.parquet", sha)
    params = fake_run.params_file(tmp_path / "params.yaml", compute={"device": "cuda"})
    raw = load_params(params, [f"train.recipes.{'dear' if method == 'dear_nomask' else method}.precision={precision}"])
    train.run(raw, train.Inputs(method, "toy", 1, tmp_path / "backbone", fewshot, tmp_path / "roles.parquet"),
              train.Outputs(tmp_path / "run", None))
    import pyarrow.parquet as pq

    losses = pq.read_table(tmp_path / "run" / "train_log.parquet")["loss"].to_pylist()
    assert losses and all(loss == loss for loss in losses)
