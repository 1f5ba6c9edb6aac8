"""A short study as one process would run it on a CPU of another kind: backbone, train (CoOp and the linear
probe), fuse, evaluate.

`python -m tests.emulated_cpu FOLDER` runs the `dear` commands in FOLDER (a
world and a prepared world_objects already there, params.yaml beside them) in
this one process, so torch loads once, under the environment the test gives it
(the instruction-set caps that emulate another CPU). The first command applies
`compute.reproducible` before torch loads, as `dear` does in every job.
"""

from __future__ import annotations

import os
import sys

COMMANDS = [
    ["backbone", "--world", "world", "--out", "backbone"],
    ["train", "--method", "coop", "--dataset", "world_objects", "--fewshot", "data/world_objects/fewshot-seed1.parquet",
     "--out", "run", "--seed", "1"],
    ["train", "--method", "linear_probe", "--dataset", "world_objects", "--fewshot",
     "data/world_objects/fewshot-seed1.parquet", "--out", "probe", "--seed", "1"],  # sklearn on OpenBLAS
    ["fuse", "--model", "run/model.pt", "--fewshot", "data/world_objects/fewshot-seed1.parquet", "--out",
     "fusion.json", "--seed", "1"],
    ["evaluate", "--model", "run/model.pt", "--fusion", "fusion.json", "--source", "data/world_objects",
     "--out", "eval", "--seed", "1"],
]


def main(folder: str) -> None:
    os.chdir(folder)
    from dear.compute import reproducible

    reproducible.early(["--params", "params.yaml"])  # as the `dear` command does, before numpy loads
    from dear.cli import app

    for command in COMMANDS:
        app(command, standalone_mode=False)


if __name__ == "__main__":
    main(sys.argv[1])
