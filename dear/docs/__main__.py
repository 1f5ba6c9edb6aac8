"""`python -m dear.docs`: rewrite the configs written from params.yaml and the generated blocks of the docs.

    python -m dear.docs                # after changing params.yaml, a config or a profile
    python -m dear.docs --check        # list stale files and blocks, exit 1 if any (what the test does)
    python -m dear.docs --snapshot     # after `make demo`: its numbers into docs/demo/, the picture, the blocks
"""

from __future__ import annotations

import argparse
import sys
from functools import partial
from pathlib import Path

from dear.docs import blocks, demo, smoke
from dear.docs.generators import generate
from dear.errors import DearError
from dear.runtime.io import write_text

ROOT = Path(__file__).resolve().parents[2]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m dear.docs", description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only list stale blocks; exit 1 if any")
    parser.add_argument("--snapshot", nargs="?", const=".", metavar="DEMO",
                        help="copy the numbers of the `make demo` run in DEMO (default: .) into docs/demo/ first")
    parser.add_argument("--root", default=str(ROOT), help="project folder holding README.md and docs/")
    args = parser.parse_args(argv)
    root = Path(args.root)
    write = partial(generate, root)
    try:
        stale_configs = {}  # the configs written from params.yaml (configs/smoke.yaml, configs/demo-fewshot.yaml)
        for path, text_of in smoke.GENERATED.items() if (root / "params.yaml").is_file() else ():
            text = text_of(root)
            if not (root / path).is_file() or (root / path).read_text() != text:
                stale_configs[path] = text
        if args.check:
            found = [f"{path} (written from params.yaml)" for path in stale_configs] + blocks.stale(root, write)
            for line in found:
                print(f"stale: {line}", file=sys.stderr)
            return 1 if found else 0
        if args.snapshot is not None:
            for path in demo.snapshot(Path(args.snapshot), root):
                print(f"wrote {path}")
        for path, text in stale_configs.items():  # first: the blocks show every config's values
            write_text(root / path, text)
            print(f"updated {path}")
        for page in blocks.refresh(root, write):
            print(f"updated {page}")
    except DearError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
