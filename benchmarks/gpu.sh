#!/usr/bin/env bash
# The GPU check, for a machine with a CUDA device (< 5 minutes on one GPU):
# ViT-B/16 shapes (random weights), batch 32, 1000 classes:
#   DeAR training steps with the role masks vs every head Mixed vs CoOp (images/s = batch / step time),
#   peak GPU memory per step at 10, 100 and 1000 classes,
#   profile pass vs plain encode_image throughput.
# Prints Markdown to paste into the README's performance section.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
export HF_HUB_OFFLINE=1
"$PY" -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else "no CUDA device: run this on a GPU machine")'
echo "## GPU ($("$PY" -c 'import torch; print(torch.cuda.get_device_name(0))'), $(date -u +%F))"
echo
echo '### Training step, ViT-B/16, batch 32, bf16 autocast'
"$PY" benchmarks/train_step.py --arch ViT-B-16 --batch 32 --device cuda --rounds 10 --steps 10 --warmup 3 \
    --classes 1000,10,100 --coop-classes 10,100,1000
echo
echo '### Profile pass vs plain encode_image, ViT-B/16'
"$PY" benchmarks/profile_speed.py --arch ViT-B-16 --device cuda --images 2048 --batch 128 --repeats 3
