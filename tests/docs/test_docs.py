"""The docs cannot drift: short README, links that resolve, blocks written from the files they describe.

Values of params.yaml, the configs and the Slurm profile appear in the docs only inside
`<!-- generated: ... -->` blocks (`python -m dear.docs` rewrites them); the tables of
output columns name exactly the columns the code writes; backticked params keys exist.
"""

from __future__ import annotations

import ast
import fnmatch
import json
import re
import shutil
import typing
from functools import partial
from pathlib import Path

import pytest

from dear.docs import blocks
from dear.docs.__main__ import main
from dear.docs.generators import generate
from dear.config.params import Params

ROOT = Path(__file__).resolve().parents[2]
PAGES = blocks.pages(ROOT)
DOCS = sorted((ROOT / "docs").glob("*.md"))
README_MAX_LINES = 200
# Pages other branches add; links to them may dangle until the lead merges those branches.
# Once a page exists here, the test below asks to remove it from this list.
PENDING: dict[str, str] = {}
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")
MEASURED = re.compile(r"^(\*\*[^*]+\*\* )?Measured\b")  # a paragraph reporting measurements
FILE_NAME = re.compile(r"\.(pt|json|parquet|png|md|csv|yaml|py|tsv|log)$")
DATE = re.compile(r"\b20\d\d-\d\d-\d\d\b")


def _text_outside_code(page: Path) -> str:
    """The page without fenced code blocks (their brackets are not links)."""
    return blocks.FENCE.sub("", page.read_text())


def test_readme_is_at_most_200_lines():
    lines = (ROOT / "README.md").read_text().count("\n")
    assert lines <= README_MAX_LINES, f"README.md has {lines} lines; move detail into docs/"


def test_every_generated_block_is_current():
    stale = blocks.stale(ROOT, partial(generate, ROOT))
    assert not stale, f"stale generated blocks {stale}: run `python -m dear.docs`"


def test_every_params_section_has_its_table_in_docs_params():
    page = (ROOT / "docs/params.md").read_text()
    missing = [s for s in Params.model_fields if f"<!-- generated: params {s} -->" not in page]
    assert not missing, (f"docs/params.md has no table for sections {missing}: add "
                         f"'<!-- generated: params NAME -->' + '<!-- end generated -->', then run `python -m dear.docs`")


def _slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[`*_]", "", heading.strip().lower())
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def _anchors(page: Path) -> set[str]:
    return {_slug(line.lstrip("#")) for line in _text_outside_code(page).splitlines() if line.startswith("#")}


def test_every_link_resolves_to_a_file_and_heading():
    broken = []
    for page in PAGES:
        for target in LINK.findall(_text_outside_code(page)):
            if re.match(r"[a-z]+:", target):
                continue  # a web address
            path, _, anchor = target.partition("#")
            resolved = (page.parent / path).resolve() if path else page
            name = resolved.relative_to(ROOT).as_posix() if resolved.is_relative_to(ROOT) else str(resolved)
            if not resolved.exists():
                if name not in PENDING:
                    broken.append(f"{page.relative_to(ROOT)}: {target}")
            elif anchor and resolved.suffix == ".md" and anchor not in _anchors(resolved):
                broken.append(f"{page.relative_to(ROOT)}: {target} (no such heading)")
    assert not broken, f"links that do not resolve: {broken}"


def test_pending_pages_are_still_missing():
    arrived = [f"{name} ({owner})" for name, owner in PENDING.items() if (ROOT / name).exists()]
    assert not arrived, f"{arrived} exist now: remove them from PENDING in tests/docs/test_docs.py"


def test_the_index_links_every_page():
    index = (ROOT / "docs/index.md").read_text()
    linked = {target.partition("#")[0] for target in LINK.findall(index)}
    unlisted = [page.name for page in DOCS if page.name != "index.md" and page.name not in linked]
    assert not unlisted, f"docs/index.md does not link {unlisted}"


def _is_params_key(key: str) -> bool:
    """Whether a dotted key names a value or section of params (`*` matches any part)."""
    if key.startswith("train.recipes."):
        return _is_recipe_key(key.split(".")[2:])
    model = Params
    for part in key.split("."):
        if typing.get_origin(model) is dict:  # a mapping's key (train.recipes.mmrl.dataset_epochs.<dataset>)
            model = typing.get_args(model)[1]
            continue
        fields = getattr(model, "model_fields", None)
        if fields is None:
            return False
        matches = fnmatch.filter(fields, part)
        if not matches:
            return False
        annotation = fields[matches[0]].annotation  # a section that may be null: the section
        model = next((arg for arg in typing.get_args(annotation) if hasattr(arg, "model_fields")), annotation)
    return True


def _is_recipe_key(parts: list[str]) -> bool:
    """train.recipes.OWNER[.datasets.DATASET | .transfer][.KEY]: a recipe (or `all`) and a key one of them has."""
    from dear.methods import REGISTRY, ROLES_RECIPE
    from dear.methods.recipe import SHARED, load

    recipes = sorted({entry.recipe for entry in REGISTRY.values()} | {ROLES_RECIPE})  # roles: the `+roles` keys
    owners = fnmatch.filter([SHARED, *recipes], parts[0])
    rest = parts[1:]
    if rest[:1] == ["datasets"]:
        rest = rest[2:]
    elif rest[:1] == ["transfer"]:
        rest = rest[1:]
    if not owners or len(rest) > 1:
        return False
    keys = {key for owner in owners for name in (recipes if owner == SHARED else [owner]) for key in load(name).keys}
    return not rest or bool(fnmatch.filter(keys, rest[0]))


def _is_code_reference(key: str) -> bool:
    """`dear.a.b.NAME`: the module dear/a/b.py (or package) exists and defines NAME."""
    parts = key.split(".")
    for cut in range(len(parts), 1, -1):
        module = ROOT.joinpath(*parts[:cut])
        source = module.with_suffix(".py") if module.with_suffix(".py").is_file() else module / "__init__.py"
        if source.is_file():
            names = parts[cut:]
            return not names or re.search(rf"^(class |def )?{re.escape(names[0])}\b", source.read_text(), re.M)
    return False


def _names_code(key: str) -> bool:
    """`dear.<module or package>...` is a code reference, not the params section `dear`."""
    parts = key.split(".")
    return parts[0] == "dear" and len(parts) > 1 and (
        (ROOT / "dear" / parts[1]).is_dir() or (ROOT / "dear" / f"{parts[1]}.py").is_file())


def test_the_docs_name_only_params_keys_and_code_that_exist():
    sections = "|".join(Params.model_fields)
    unknown = []
    for page in PAGES:
        for key in re.findall(rf"`((?:{sections})\.[A-Za-z0-9_.*]+)", page.read_text()):
            key = key.rstrip(".")
            if FILE_NAME.search(key):
                continue  # model.pt, fusion.json: a file, not a key
            known = _is_code_reference(key) if _names_code(key) else _is_params_key(key)
            if not known:
                unknown.append(f"{page.relative_to(ROOT)}: {key}")
    assert not unknown, f"the docs name params keys or code that do not exist: {unknown}"


def _schema_columns(source: Path, name: str) -> list[tuple[str, str]]:
    """(column, type) of a `NAME = pa.schema([...])` in a module, read without importing it."""
    tree = ast.parse(source.read_text())
    schemas = {node.targets[0].id: node.value for node in tree.body
               if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name)}

    def kind(call: ast.expr) -> str:
        inner = call.args[0] if isinstance(call, ast.Call) and call.args else None
        base = call.func.attr.rstrip("_") if isinstance(call, ast.Call) else "?"
        return f"{base}<{kind(inner)}>" if base == "list" and inner is not None else base

    def columns(node: ast.expr) -> list[tuple[str, str]]:
        if isinstance(node, ast.BinOp):  # list(OTHER_SCHEMA) + [fields]
            return columns(node.left) + columns(node.right)
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "list":
            return columns(schemas[node.args[0].id])
        if isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "schema":
            return columns(node.args[0])
        out = []
        for item in node.elts:  # pa.field("x", pa.int32()) or ("x", pa.int32())
            args = item.args if isinstance(item, ast.Call) else item.elts
            out.append((args[0].value, kind(args[1])))
        return out

    return columns(schemas[name])


def test_column_tables_name_exactly_the_columns_the_code_writes():
    marker = re.compile(r"<!-- columns: (\S+) (\w+)(?: after (\w+))? -->\n((?:\|.*\n)+)")
    checked = 0
    for page in PAGES:
        for source, name, after, table in marker.findall(page.read_text()):
            expected = _schema_columns(ROOT / source, name)
            if after:
                expected = expected[len(_schema_columns(ROOT / source, after)):]
            shown = []
            for row in table.splitlines()[2:]:
                cells = [cell.strip() for cell in row.strip("|").split("|")]
                kind = cells[1].split(",")[0].strip()  # "int32, null": nullable columns say so
                shown += [(column.strip().strip("`"), kind) for column in cells[0].split(",")]
            assert [c for c, _ in shown] == [c for c, _ in expected], f"{page.name}: {name} columns"
            assert [k for _, k in shown] == [k for _, k in expected], f"{page.name}: {name} types"
            checked += 1
    assert checked >= 10


def test_measured_paragraphs_carry_a_date_and_a_command():
    bad = []
    for page in PAGES:
        for paragraph in _text_outside_code(page).split("\n\n"):
            text = paragraph.strip()
            if MEASURED.match(text) and not (DATE.search(text) and "`" in text):
                bad.append(f"{page.relative_to(ROOT)}: {text[:60]}...")
    assert not bad, f"measured figures without their date and command: {bad}"


RESULTS = """protocol,source,dataset,row,method,metric,mean,std,ci_low,ci_high,n_seeds,seeds,missing_seeds,std_warning,seed1,seed2
base_to_novel,a,a,dataset,zeroshot,base,80.0,0.0,80.0,80.0,2,1;2,,False,80.0,80.0
base_to_novel,a,a,dataset,zeroshot,novel,60.0,0.0,60.0,60.0,2,1;2,,False,60.0,60.0
base_to_novel,a,a,dataset,zeroshot,hm,68.571429,0.0,68.571429,68.571429,2,1;2,,False,68.571429,68.571429
base_to_novel,a,a,dataset,dear,base,90.0,1.0,81.015356,98.984644,2,1;2,,False,89.0,91.0
base_to_novel,a,a,dataset,dear,novel,,,,,0,,1;2,False,,
base_to_novel,a,a,dataset,dear,hm,,,,,0,,1;2,False,,
base_to_novel,,Average,average,zeroshot,base,80.0,0.0,80.0,80.0,2,1;2,,False,80.0,80.0
base_to_novel,,Average,average,zeroshot,novel,60.0,0.0,60.0,60.0,2,1;2,,False,60.0,60.0
base_to_novel,,Average,average,zeroshot,hm,68.571429,0.0,68.571429,68.571429,2,1;2,,False,68.571429,68.571429
cross_dataset,a,b,dataset,zeroshot,accuracy,70.0,0.0,70.0,70.0,2,1;2,,False,70.0,70.0
cross_dataset,a,Average,average,zeroshot,accuracy,70.0,0.0,70.0,70.0,2,1;2,,False,70.0,70.0
"""
SANITY = {"a": {"top1": 0.5, "chance": 0.25, "classes": 4, "images": 8, "base_top1": 0.75, "base_chance": 0.5,
                "novel_top1": 0.25, "novel_chance": 0.5}}


def _demo_root(tmp_path: Path) -> Path:
    """A project as `make demo` leaves it: report/results.csv and backbone/card.json."""
    demo = tmp_path / "demo"
    (demo / "report").mkdir(parents=True)
    (demo / "backbone").mkdir()
    (demo / "report/results.csv").write_text(RESULTS)
    card = {"arch": "dear-world", "pretrained": "embedded", "parameters": 1234, "training": {"steps": 1},
            "sanity": SANITY}
    (demo / "backbone/card.json").write_text(json.dumps(card))
    return demo


def test_snapshot_copies_a_demo_run_draws_the_picture_and_rewrites_the_blocks(tmp_path):
    root = tmp_path / "docs-root"
    (root / "docs").mkdir(parents=True)
    shutil.copy(ROOT / "params.yaml", root / "params.yaml")
    (root / "README.md").write_text("<!-- generated: demo-results -->\nold\n<!-- end generated -->\n")
    (root / "docs/world.md").write_text("x\n<!-- generated: demo-card -->\n<!-- end generated -->\n")
    assert main(["--snapshot", str(_demo_root(tmp_path)), "--root", str(root)]) == 0
    run = json.loads((root / "docs/demo/run.json").read_text())
    assert DATE.fullmatch(run["date"]) and run["command"] == "make demo"
    assert run["commit"].startswith("unknown")  # the demo folder is no git checkout
    assert (root / "docs/img/base_novel.png").read_bytes().startswith(b"\x89PNG\r\n\x1a\n")
    readme = (root / "README.md").read_text()
    assert "| zeroshot | 80.00 ± 0.00 | 60.00 ± 0.00 | 68.57 ± 0.00 | 68.57 | 70.00 |" in readme
    assert "| dear | — | — | — | — | — |" in readme and "old" not in readme  # missing, never 0
    world = (root / "docs/world.md").read_text()
    assert "| `a` | 4 | 8 | 50.0 | 25.0 |" in world and "75.0 / 25.0" in world and "1,234 parameters" in world
    assert main(["--check", "--root", str(root)]) == 0


def test_snapshot_without_a_demo_run_is_one_line(tmp_path, capsys):
    assert main(["--snapshot", str(tmp_path), "--root", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: ") and "make demo" in err


def test_a_stale_block_is_reported_and_rewritten(tmp_path):
    (tmp_path / "docs").mkdir()
    page = tmp_path / "README.md"
    page.write_text("a\n<!-- generated: x 1 -->\nold\n<!-- end generated -->\nb\n")
    write = {"x 1": "new"}.get
    assert blocks.stale(tmp_path, write) == ["README.md: x 1"]
    assert blocks.refresh(tmp_path, write) == [page]
    assert page.read_text() == "a\n<!-- generated: x 1 -->\nnew\n<!-- end generated -->\nb\n"
    assert blocks.stale(tmp_path, write) == []


def test_a_block_without_its_end_is_an_error(tmp_path):
    (tmp_path / "docs").mkdir()
    (tmp_path / "README.md").write_text("<!-- generated: x -->\nno end\n")
    with pytest.raises(Exception, match="no '<!-- end generated -->' line"):
        blocks.stale(tmp_path, lambda spec: "")


def test_a_marker_inside_fenced_code_is_an_example_not_a_block(tmp_path):
    (tmp_path / "docs").mkdir()
    text = "```\n<!-- generated: x -->\nexample\n<!-- end generated -->\n```\n"
    (tmp_path / "README.md").write_text(text)
    assert blocks.stale(tmp_path, lambda spec: "written") == []
    assert blocks.refresh(tmp_path, lambda spec: "written") == []


WORDS = {"eight": 8, "fifteen": 15}


def test_counts_the_pages_spell_out_are_the_code_s():
    """'the eight stages', 'the fifteen datasets': tied to dear/stages and to the CoOp datasets `dear prepare` reads."""
    from dear.data import coop

    by_hand = ("__init__.py", "predict.py")  # `dear predict` is a stage module run by hand, in no study's graph
    stages = len([path for path in (ROOT / "dear" / "stages").glob("*.py") if path.name not in by_hand])
    datasets = len([name for name in coop.SPECS if not name.startswith("world_")])
    for page in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        text = page.read_text()
        for word, thing, actual in (*((w, "stages", stages) for w in WORDS), *((w, "datasets", datasets) for w in WORDS)):
            if re.search(rf"\b{word} {thing}\b", text, flags=re.I):
                assert WORDS[word] == actual, f"{page.name}: '{word} {thing}', but there are {actual}"
