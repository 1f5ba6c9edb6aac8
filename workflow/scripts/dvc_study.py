"""Write the DVC pipeline of another config: <output_root>/dvc.yaml, beside the demo's.

    python workflow/scripts/dvc_study.py configs/paper-vitb16.yaml
    dvc repro paper-vitb16/dvc.yaml

DVC reads one params file per dvc.yaml (params.yaml for the top-level one), so a
second config gets its own dvc.yaml (and dvc.lock) in its output root. It is the
top-level dvc.yaml (with the few-shot stages of workflow/dvc/fewshot.yaml when
its study.few_shot is on) with every output path moved under that root, its parameters
read from the config (templating and tracked sections alike), and each stage run
from the project root (`wdir`), so its commands are exactly those of
`snakemake --configfile CONFIG` (a test checks). Regenerate it after dvc.yaml changes;
changes to the config itself need nothing.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import yaml

PROJECT = Path(__file__).resolve().parents[2]


TRANSFER_STAGES = ("train_transfer", "fuse_transfer", "evaluate_transfer")
FEW_SHOT = PROJECT / "workflow/dvc/fewshot.yaml"


def with_few_shot(pipeline: dict) -> dict:
    """`pipeline` with the few-shot stages before collect (each reads its code file as dvc.yaml's stages do), and
    collect reading fewshot/ whole (each method's few-shot evaluations are among its runs)."""
    extra = yaml.safe_load(FEW_SHOT.read_text())["stages"]
    stages = {}
    for name, stage in pipeline["stages"].items():
        if name == "collect":
            for new, body in extra.items():
                body = dict(body)
                stages[new] = {"matrix": body.pop("matrix"), "cmd": body.pop("cmd"), **body}
            stage = {**stage, "deps": [*stage["deps"], "fewshot"]}
        stages[name] = stage
    return {**pipeline, "stages": stages}


def study(pipeline: dict, config: str, root: str, where: str, world: bool = True, transfer: bool = True,
          base_to_novel: bool = True, few_shot: bool = False) -> dict:
    """The top-level `pipeline` (dvc.yaml as a dict) for `config`, whose outputs go under `root`.

    `config` and `root` are relative to the project; `where` is the new dvc.yaml's folder.
    Output paths are those whose first part is the first part of some stage's out (world,
    data, runs, ...) or logs; code paths (dear/...) stay. Without `world` (nothing reads the
    embedded world) the world stage and its digests go; without `transfer` (the transfer
    protocols are off) the transfer stages go, as the Snakefile leaves out those jobs; with `few_shot`
    the few-shot stages come in (`with_few_shot`); and collect reads no folder of a protocol that
    is off (`base_to_novel`: runs/, `transfer`: transfer/; fewshot/ only with `few_shot`).
    """
    pipeline = with_few_shot(pipeline) if few_shot else pipeline
    tops = {"logs", "fewshot"} | {_path(out).split("/")[0] for stage in pipeline["stages"].values()
                                  for out in stage["outs"]}
    dropped = ({"world"} if not world else set()) | (set(TRANSFER_STAGES) if not transfer else set())
    unread = ({"transfer"} if not transfer else set()) | ({"runs"} if not base_to_novel else set())

    def move(path: str) -> str:
        return f"{root}/{path}" if path.split("/")[0] in tops else path

    def kept(item) -> bool:  # a params entry: not the digest of a dropped stage's output
        return not any(_path(item).startswith(f"{name}/.digest/") for name in dropped)

    stages = {}
    for name, stage in pipeline["stages"].items():
        if name in dropped:
            continue
        new = {key: value for key, value in stage.items() if key in ("matrix", "foreach", "do")}
        body = stage.get("do", stage)
        moved = {"cmd": _command(body["cmd"], config, move), "wdir": os.path.relpath(PROJECT, PROJECT / where),
                 **{key: body[key] for key in ("always_changed", "desc") if key in body}}
        deps = [move(dep) for dep in body.get("deps", []) if dep not in unread]
        moved.update({"deps": deps} if deps else {})  # the code is a params file (.dear/code/): most stages have none
        sections = [item for item in body.get("params", []) if isinstance(item, str)]
        files = [{move(path): keys for path, keys in item.items()} for item in body.get("params", [])
                 if isinstance(item, dict) and kept(item)]
        moved["params"] = [*([{config: sections}] if sections else []), *files]
        for kind in ("outs", "metrics", "plots"):
            if kind in body:
                moved[kind] = [move(item) if isinstance(item, str) else {move(key): value for key, value in item.items()}
                               for item in body[kind]]
        stages[name] = {**new, "do": moved} if "do" in stage else {**new, **moved}
    # top-level plots are relative to this dvc.yaml's folder (the root) already; templates to the project
    return {"vars": [os.path.relpath(PROJECT / config, PROJECT / where)], "stages": stages,
            **({"plots": pipeline["plots"]} if "plots" in pipeline else {})}


def _path(item) -> str:
    return item if isinstance(item, str) else next(iter(item))


def _command(cmd: str, config: str, move) -> str:
    """`dear <stage> ...` with the config after --params and every output path moved (the stage name stays)."""
    program, stage, *tokens = cmd.split(" ")
    return " ".join([program, stage, *(config if previous == "--params" else move(token)
                                       for previous, token in zip(["", *tokens], tokens))])


def kept_folders(pipeline: dict, root: str) -> list[Path]:
    """Folders stages read whole (data, runs, ...): they must exist on a fresh clone (a .gitignore keeps them)."""
    outs = {_path(out).split("/")[0] for stage in pipeline["stages"].values() for out in stage["outs"]}
    deps = {dep for stage in pipeline["stages"].values() for dep in stage.get("deps", []) if dep in outs}
    return [PROJECT / root / dep for dep in sorted(deps)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("config", help="config file inside the project, e.g. configs/paper-vitb16.yaml")
    args = parser.parse_args()
    sys.path.insert(0, str(PROJECT))
    from dear.errors import DearError
    from dear.config.params import load_params

    from dear.config.params import world_needed

    try:
        params = load_params(args.config)  # the one strict reader: the same lines as dear and the Snakefile
    except DearError as err:
        sys.exit("\n".join(f"error: {line}" for line in getattr(err, "lines", [str(err)])))
    root = os.path.normpath(params.output_root)
    config = os.path.relpath(Path(args.config).resolve(), PROJECT)
    if root == ".":
        sys.exit(f"error: {args.config}: output_root is '.', the top-level dvc.yaml's; give this config its own")
    if root.startswith("..") or os.path.isabs(root) or config.startswith(".."):
        sys.exit(f"error: {args.config}: DVC keeps a pipeline inside its project; use a config and an "
                 f"output_root inside {PROJECT}")
    pipeline = yaml.safe_load((PROJECT / "dvc.yaml").read_text())
    target = PROJECT / root / "dvc.yaml"
    target.parent.mkdir(parents=True, exist_ok=True)
    header = (f"# Generated by `python workflow/scripts/dvc_study.py {config}` from dvc.yaml: the study of {config},\n"
              f"# every output under {root}/. Do not edit; regenerate after dvc.yaml changes. Run: dvc repro {root}/dvc.yaml\n")
    own = study(pipeline, config, root, root, world=world_needed(params), transfer=params.study.transfer_on is not None,
                base_to_novel=bool(params.study.base_to_novel), few_shot=params.study.few_shot_on is not None)
    target.write_text(header + yaml.safe_dump(own, sort_keys=False, width=200))
    read_whole = with_few_shot(pipeline) if params.study.few_shot_on is not None else pipeline
    for folder in kept_folders(read_whole, root):  # the same .gitignore as the top-level folder's
        folder.mkdir(parents=True, exist_ok=True)
        (folder / ".gitignore").write_text((PROJECT / folder.name / ".gitignore").read_text())
    print(f"wrote {target.relative_to(PROJECT)}; run: dvc repro {root}/dvc.yaml")


if __name__ == "__main__":
    main()
