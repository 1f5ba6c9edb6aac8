"""The whole study at test size: tiny world, tiny backbone, two seeds, five methods, every protocol.

`write(path)` writes a complete params.yaml; `tests/e2e/test_pipeline.py` runs it
through Snakemake and DVC, and `tests/cluster` through Slurm.
"""

from __future__ import annotations

from pathlib import Path

import yaml

from dear.data.world import tiny_params
from tests.fake_run import small_recipes

ROOT = Path(__file__).resolve().parents[1]


def params() -> dict:
    raw = yaml.safe_load((ROOT / "params.yaml").read_text())
    raw.update(tiny_params())
    raw["world"]["attribute_sets"] = ["colors"]
    raw["backbone"]["steps"] = 60
    raw["data"].update(datasets=["world_objects", "world_objects_b", "world_objects_sketch", "world_colors"],
                       seeds=[1, 2], shots=2, val_shots=1, workers=1)
    raw["study"] = {"methods": ["zeroshot", "coop", "mmrl", "dear_nomask", "dear"],
                    "base_to_novel": ["world_objects", "world_colors"],
                    "transfer": {"source": "world_objects", "cross_dataset": ["world_objects_b"],
                                 "domain_generalization": ["world_objects_sketch"]}}
    raw["profile"].update(dataset="world_objects", max_images=32, batch_size=16, svd_rank=8, texts_per_head=5, layers=2)
    small_recipes(raw["train"], epochs=1, batch_size=4, warmup_epochs=0, rep_dim=16)
    raw["train"].update(checkpoint_every=2)
    raw["compute"].update(device="cpu", workers=0)
    raw["evaluate"]["batch_size"] = 64
    return raw


def write(path: Path) -> Path:
    path.write_text(yaml.safe_dump(params(), sort_keys=False))
    return path
