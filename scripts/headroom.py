"""What 16 shots could add on a dataset, measured without any of the compared methods.

For each dataset: zero-shot top-1 on the base and novel test classes with the
dataset's prompt, and a logistic-regression probe trained on the frozen CLS
features of the base training shots (its C chosen on the validation shots),
scored on the base test images. The headroom is probe − zero-shot on base: a
set where it is ≥ 10 points holds in its image features what the hand-written
prompt misses (as the paper's datasets do for CLIP). This is the criterion the
embedded world was designed by (docs/world.md); it never looks at the methods.

    python scripts/headroom.py --root . --datasets world_objects,world_objects_sketch --seeds 1,2,3
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import torch
from PIL import Image
from sklearn.linear_model import LogisticRegression

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from dear.data.manifest import classnames, read_fewshot, read_manifest, select  # noqa: E402
from dear.model.clip import load_backbone  # noqa: E402
from dear.model.zeroshot import ZeroShotClassifier, image_features  # noqa: E402
from dear.config.params import load_params  # noqa: E402

PROBE_C = (0.1, 0.3, 1, 3, 10, 30, 100)


def cls_features(backbone, paths: list[str], batch: int = 256) -> np.ndarray:
    """[N, D] unit-norm CLS embeddings of the frozen image tower (eval transform), decoding `batch` images at a time."""
    chunks = [image_features(backbone.model, torch.stack([backbone.preprocess(Image.open(p).convert("RGB"))
                                                         for p in paths[i:i + batch]]))
              for i in range(0, len(paths), batch)]
    return torch.cat(chunks).numpy()


def probe_accuracy(backbone, fewshot, test_x: np.ndarray, test_y: np.ndarray) -> float:
    """Base test top-1 (%) of a probe fitted on the training shots, C picked on the validation shots."""
    shots = {part: select(fewshot, subset="base", fewshot_split=part) for part in ("train", "val")}
    x = {part: cls_features(backbone, t["path"].to_pylist()) for part, t in shots.items()}
    y = {part: np.array(t["subset_label"].to_pylist()) for part, t in shots.items()}
    probes = [LogisticRegression(C=c, max_iter=2000).fit(x["train"], y["train"]) for c in reversed(PROBE_C)]
    best = max(probes, key=lambda probe: probe.score(x["val"], y["val"]))  # ties: the larger C, as before
    return 100 * best.score(test_x, test_y)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, default=Path("."), help="project folder with backbone/ and data/")
    parser.add_argument("--params", type=Path, default=Path("params.yaml"))
    parser.add_argument("--datasets", default=None, help="comma-separated (default: study.base_to_novel)")
    parser.add_argument("--seeds", default="1,2,3", help="few-shot seeds of the probe")
    args = parser.parse_args()
    params = load_params(args.root / args.params)
    root = args.root / params.output_root
    backbone = load_backbone(root / "backbone")
    datasets = args.datasets.split(",") if args.datasets else list(params.study.base_to_novel)
    print("| dataset | zero-shot base | zero-shot novel | probe base (seeds) | headroom |")
    print("| --- | --- | --- | --- | --- |")
    for dataset in datasets:
        manifest = read_manifest(root / "data" / dataset)
        template = params.train.recipe("zeroshot", dataset, "base_to_novel").template
        zeroshot = {}
        for subset in ("base", "novel"):
            test = select(manifest, split="test", subset=subset)
            x, y = cls_features(backbone, test["path"].to_pylist()), np.array(test["subset_label"].to_pylist())
            classifier = ZeroShotClassifier(backbone.model, backbone.tokenizer, classnames(manifest, subset=subset),
                                            [template])
            zeroshot[subset] = 100 * float((classifier.logits_of(torch.from_numpy(x)).argmax(1).numpy() == y).mean())
            if subset == "base":
                base_x, base_y = x, y
        probes = [probe_accuracy(backbone, read_fewshot(root / "data" / dataset / f"fewshot-seed{seed}.parquet"),
                                 base_x, base_y) for seed in map(int, args.seeds.split(","))]
        seeds = ", ".join(f"{p:.1f}" for p in probes)
        print(f"| {dataset} | {zeroshot['base']:.1f} | {zeroshot['novel']:.1f} | {np.mean(probes):.1f} ({seeds}) | "
              f"{np.mean(probes) - zeroshot['base']:+.1f} |", flush=True)


if __name__ == "__main__":
    main()
