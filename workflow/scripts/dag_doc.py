"""Write the demo's stage graph (`dvc dag --mermaid`) into docs/engines.md, between its markers.

    python workflow/scripts/dag_doc.py          # after a change of dvc.yaml or of params.yaml's study

tests/e2e/test_engines.py fails while the page shows another graph than dvc.yaml makes.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

PROJECT = Path(__file__).resolve().parents[2]
PAGE = PROJECT / "docs/engines.md"
BEGIN, END = "<!-- dvc dag --mermaid: begin -->", "<!-- dvc dag --mermaid: end -->"


def mermaid(project: Path) -> str:
    """The graph of the top-level dvc.yaml's study (every stage is upstream of `report`)."""
    dvc = Path(sys.executable).parent / "dvc"
    env = dict(os.environ, DVC_NO_ANALYTICS="1")
    result = subprocess.run([str(dvc), "dag", "--mermaid", "report"], cwd=project, env=env,
                            capture_output=True, text=True, check=True)
    return result.stdout.strip()


def block(graph: str) -> str:
    return f"{BEGIN}\n```mermaid\n{graph}\n```\n{END}"


def shown(page: str) -> str:
    """The block the page holds now."""
    start, end = page.index(BEGIN), page.index(END) + len(END)
    return page[start:end]


def main() -> None:
    page = PAGE.read_text()
    PAGE.write_text(page.replace(shown(page), block(mermaid(PROJECT))))
    print(f"updated {PAGE.relative_to(PROJECT)}")


if __name__ == "__main__":
    main()
