"""Every method's accuracy before any training step, against zero-shot, on a finished demo tree.

A method is trained for 0 epochs (its learnable parts as initialized: CoOp's
context from the prompt words, MMRL's and DeAR's tokens from N(0, 0.02)
through random aligners), fused and evaluated with the pipeline's own stages.
CoOp starts exactly at zero-shot; so do the token methods while their tokens
are faded out (`train.fade_in_epochs` > 0, the demo's default): with
`--set train.recipes.all.fade_in_epochs=0` (MMRL's code) they start below it, because the
frozen heads read the random tokens from the first token layer on.
docs/results.md quotes the tables this prints.

    python scripts/at_init.py --root . --datasets world_objects,world_objects_sketch --seed 1
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from dear.config.params import load_params  # noqa: E402
from dear.stages import evaluate, fuse, train  # noqa: E402

NO_TRAINING = tuple(f"train.recipes.{recipe}.{change}" for recipe in ("coop", "mmrl", "dear")
                    for change in ("epochs=0", "datasets={}"))  # no epoch anywhere, the demo's per-dataset ones too


def base_accuracy(params, root: Path, dataset: str, method: str, seed: int, work: Path) -> dict[str, float]:
    """Top-1 on the base test images per stream ('output' = what the method predicts) after 0 epochs."""
    roles = root / params.output_root / f"roles/{params.profile.dataset}/roles.parquet"
    data = root / params.output_root / "data"
    backbone = root / params.output_root / "backbone"
    fewshot = data / dataset / f"fewshot-seed{seed}.parquet"
    out = work / method / dataset
    train.run(params, train.Inputs(method=method, dataset=dataset, seed=seed, backbone=backbone, fewshot=fewshot,
                                   roles=roles), train.Outputs(out / "train", out / "ckpt.pt"))
    fuse.run(params, fuse.Inputs(model=out / "train/model.pt", backbone=backbone, roles=roles, fewshot=fewshot,
                                 manifest=data / dataset / "manifest.parquet", classes="base"), fuse.Outputs(out / "fusion.json"))
    evaluate.run(params, evaluate.Inputs(model=out / "train/model.pt", fusion=out / "fusion.json", backbone=backbone,
                                         roles=roles, source=data / dataset, classes="base", data=data),
                 evaluate.Outputs(out / "eval"))
    table = pq.read_table(out / "eval/eval.parquet").to_pandas()
    base = table[table.split == "base"].groupby("stream")[["correct", "total"]].sum()
    return (100 * base.correct / base.total).to_dict()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, default=Path("."), help="project folder of a finished `make demo`")
    parser.add_argument("--params", type=Path, default=Path("params.yaml"))
    parser.add_argument("--datasets", default=None, help="comma-separated (default: study.base_to_novel)")
    parser.add_argument("--methods", default="zeroshot,coop,mmrl,dear_nomask,dear")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="change a parameter")
    args = parser.parse_args()
    params = load_params(args.root / args.params, (*NO_TRAINING, *args.set))
    datasets = args.datasets.split(",") if args.datasets else list(params.study.base_to_novel)
    methods = args.methods.split(",")
    print("| dataset | method | base (output) | base (CLS stream) | output - zero-shot |")
    print("| --- | --- | --- | --- | --- |")
    with tempfile.TemporaryDirectory() as work:
        for dataset in datasets:
            zeroshot = None
            for method in methods:
                acc = base_accuracy(params, args.root, dataset, method, args.seed, Path(work))
                zeroshot = acc["output"] if method == "zeroshot" else zeroshot
                gap = "" if zeroshot is None else f"{acc['output'] - zeroshot:+.1f}"
                print(f"| {dataset} | {method} | {acc['output']:.1f} | {acc.get('cls', acc['output']):.1f} | {gap} |",
                      flush=True)


if __name__ == "__main__":
    main()
