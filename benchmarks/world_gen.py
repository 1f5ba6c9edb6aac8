"""Benchmark: drawing the default world (`dear world`) against a plain PNG-writing floor.

Target (issue [2/6]): the default world in <= 60 s on 2 cores. The baseline,
measured in the same run, writes as many flat-colour PNGs of the same size:
the ratio says how much the scene drawing costs on top of encoding and I/O.

    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/world_gen.py [params.yaml]
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from dear.data import world as world_data
from dear.config.params import load_params
from dear.stages import world as world_stage


def baseline(count: int, size: int, folder: Path) -> float:
    start = time.perf_counter()
    pixels = np.full((size, size, 3), 128, dtype=np.uint8)
    for i in range(count):
        (folder / f"{i}.png").write_bytes(world_stage.png_bytes(pixels))
    return time.perf_counter() - start


def main() -> None:
    params = load_params(sys.argv[1] if len(sys.argv) > 1 else "params.yaml")
    count = sum(sum(spec.per_class) * len(spec.classnames) for spec in world_data.dataset_specs(params.world))
    with tempfile.TemporaryDirectory() as tmp:
        start = time.perf_counter()
        world_stage.run(params, world_stage.Inputs(), world_stage.Outputs(folder=Path(tmp) / "world"))
        world_s = time.perf_counter() - start
        (Path(tmp) / "flat").mkdir()
        flat_s = baseline(count, params.world.image_size, Path(tmp) / "flat")
    print(f"images: {count}")
    print(f"dear world: {world_s:.1f} s ({count / world_s:.0f} img/s); target <= 60 s: {'ok' if world_s <= 60 else 'MISSED'}")
    print(f"flat PNG baseline: {flat_s:.1f} s; ratio world/baseline: {world_s / flat_s:.2f}")


if __name__ == "__main__":
    main()
