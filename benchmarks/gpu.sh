#!/usr/bin/env bash
# The GPU check, for a machine with a CUDA device (< 5 minutes on one GPU):
# the gpu-marked tests (GPU roles = CPU roles, bf16 training), then ViT-B/16 shapes (random weights):
#   DeAR training steps with the role masks vs every head Mixed vs CoOp (images/s = batch / step time),
#   peak GPU memory per step at 10, 100 and 1000 classes,
#   profile: the profile pass vs plain encode_image, and the text bank's embedding vs plain encode_text,
#   backbone: a pretraining step of the embedded model on CUDA, dear's recipe vs torch's defaults.
# Prints Markdown to paste into the docs/performance.md.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
export HF_HUB_OFFLINE=1
"$PY" -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else "no CUDA device: run this on a GPU machine")'
echo "## GPU ($("$PY" -c 'import torch; print(torch.cuda.get_device_name(0))'), $(date -u +%F))"
echo
echo '### gpu-marked tests'
"$PY" -m pytest -q -p no:cacheprovider -m gpu tests 2>&1 | tail -3 || echo "gpu tests FAILED (see above)"
echo
echo '### GPU against CPU, compute.reproducible (docs/compute.md#cpu-and-gpu)'
"$PY" -m pytest -q -s -p no:cacheprovider tests/compute/test_reproducible.py -k gpu 2>&1 | grep "GPU vs CPU" || echo "not measured (see the test)"
echo
echo '### Training step, ViT-B/16, batch 32, bf16 autocast'
"$PY" benchmarks/train_step.py --arch ViT-B-16 --batch 32 --device cuda --rounds 10 --steps 10 --warmup 3 \
    --classes 1000,10,100 --coop-classes 10,100,1000
echo
echo '### Profile pass vs plain encode_image, ViT-B/16'
"$PY" benchmarks/profile_speed.py --arch ViT-B-16 --device cuda --images 2048 --batch 128 --repeats 3 --texts
echo
echo '### Backbone pretraining step (embedded dear-world, batch 64), CUDA'
"$PY" benchmarks/pretrain_step.py --device cuda --repeats 20
