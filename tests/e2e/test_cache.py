"""One embedded world and backbone per machine: Snakemake's output cache restores them into another study."""

import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from dear.pipeline.digest import SNAKEMAKE_STAMP, damaged, write_digests
from dear.runtime.io import files_under, restored_from_output_cache
from dear.pipeline.machine_cache import LOCATION as CACHE_VARIABLE
from tests import tiny_study
from tests.engines import BIN, ROOT, engine_env, make_project


def snakemake(project: Path, cache: Path, *options: str) -> str:
    result = subprocess.run([str(BIN / "snakemake"), "--cores", "2", *options, "backbone", "--cache"], cwd=project,
                            env=dict(engine_env(), SNAKEMAKE_OUTPUT_CACHE=str(cache)), capture_output=True, text=True,
                            timeout=900)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return result.stdout + result.stderr


def contents(folder: Path) -> dict[str, str]:
    """{relative path: sha256} of every file under `folder` (through links), Snakemake's timestamp left out."""
    return {str(path.relative_to(folder)): hashlib.sha256(path.read_bytes()).hexdigest()
            for path in files_under(folder) if path.name != SNAKEMAKE_STAMP}


def test_a_folder_restored_as_links_is_hashed_whole_and_a_changed_entry_is_found(tmp_path):
    entry = tmp_path / ("ab" * 32)  # a cache entry, named by its provenance hash as Snakemake names them
    (entry / "images" / "cat").mkdir(parents=True)
    (entry / "images" / "cat" / "1.png").write_bytes(b"png")
    (entry / "card.json").write_text("{}")
    write_digests(entry, "world")
    restored = tmp_path / "study" / "world"  # as `snakemake --cache` restores it: a link per top-level name
    restored.mkdir(parents=True)
    for name in ("images", "card.json", ".digest"):
        (restored / name).symlink_to(entry / name)
    (restored / ".snakemake_timestamp").touch()
    assert [path.relative_to(restored).as_posix() for path in files_under(restored)] == \
        [".digest/card.json.yaml", ".digest/folder.yaml", ".snakemake_timestamp", "card.json", "images/cat/1.png"]
    assert restored_from_output_cache(restored) and not restored_from_output_cache(entry)
    assert damaged(restored) is None
    (entry / "images" / "cat" / "1.png").write_bytes(b"changed")
    assert damaged(restored) == f"its files do not hash to {restored / '.digest' / 'folder.yaml'}"


@pytest.mark.slow
def test_a_second_study_gets_the_world_and_backbone_from_the_cache_byte_identical(tmp_path):
    cache = tmp_path / "cache"
    cache.mkdir()
    text = yaml.safe_dump(tiny_study.params(), sort_keys=False)
    first = make_project(tmp_path / "first", text)
    made = snakemake(first, cache)
    assert "Moving output file backbone to cache" in made and len(list(cache.iterdir())) == 2, made[-3000:]
    second = make_project(tmp_path / "second", text)  # another clone on the same machine
    again = snakemake(second, cache)
    assert "Symlinking output file backbone/model.pt from cache" in again, again[-3000:]
    for name in ("world", "backbone"):  # Snakemake makes each log file, empty: the stage did not run
        log = second / "logs" / f"{name}.log"
        assert not log.exists() or not log.read_text(), f"{name} ran again: {log.read_text()[-2000:]}"
    for name in ("world", "backbone"):
        assert contents(second / name) == contents(first / name) and contents(first / name)
    assert ".digest/folder.yaml" in contents(second / "backbone")
    assert any(path.count("/") > 1 for path in contents(second / "world")), "the world's image folders"
    planned = subprocess.run([str(BIN / "snakemake"), "-n", "--cores", "1", "backbone"], cwd=second, env=engine_env(),
                             capture_output=True, text=True, timeout=300)
    assert "Nothing to be done" in planned.stdout + planned.stderr, planned.stdout[-3000:]

    # a backbone remade by hand where the first study's is a link into the cache replaces the link, not the entry
    entry = Path(os.readlink(first / "backbone"))
    kept = contents(entry)
    subprocess.run(["dear", "backbone", "--params", "params.yaml", "--world", "world", "--out", "backbone", "--set",
                    "backbone.steps=5"], cwd=first, env=engine_env(), check=True, capture_output=True, timeout=600)
    assert not (first / "backbone").is_symlink() and contents(entry) == kept

    # a cache entry changed after it was stored is found while the second study plans, and its backbone rerun
    (entry / "model.pt").write_bytes((entry / "model.pt").read_bytes() + b"\0")
    planned = subprocess.run([str(BIN / "snakemake"), "-n", "--cores", "1", "backbone"], cwd=second, env=engine_env(),
                             capture_output=True, text=True, timeout=300)
    assert "restored from the output cache, but its files do not hash to backbone/.digest/folder.yaml" in \
        planned.stdout + planned.stderr, planned.stdout[-3000:] + planned.stderr[-3000:]


def _config(project: Path, name: str) -> str:
    """`<name>.yaml` in `project`: the study's values, everything under its own output root `<name>/`."""
    raw = tiny_study.params()
    raw.update(output_root=name)
    raw["data"]["root"] = f"{name}/world"
    (project / f"{name}.yaml").write_text(yaml.safe_dump(raw, sort_keys=False))
    return f"{name}.yaml"


def _run(project: Path, env: dict, *command: str) -> str:
    result = subprocess.run(list(command), cwd=project, env=env, capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return result.stdout + result.stderr


def _dvc_backbone(project: Path, env: dict, name: str) -> None:
    """What docs/your-data.md runs for a config under DVC, up to its backbone (the check and world stages run first)."""
    _run(project, env, sys.executable, "workflow/scripts/dvc_study.py", _config(project, name))
    _run(project, env, str(BIN / "dvc"), "repro", f"{name}/dvc.yaml:backbone")


@pytest.mark.slow
def test_a_new_config_reuses_the_machines_world_and_backbone_run_as_the_pages_write_it(tmp_path):
    """Issue 39: docs/your-data.md's `snakemake --configfile` (no --cache) trained the backbone of every new config
    again, and `dvc repro <root>/dvc.yaml` planned it again. Now: the default workflow profile turns Snakemake's
    output cache on, and DVC's world and backbone stages copy the machine's entry whose record is theirs."""
    cache, own_cache = tmp_path / "cache", tmp_path / "dvc-only-cache"
    env = {key: value for key, value in engine_env().items() if key != "DEAR_MACHINE_CACHE"}
    env[CACHE_VARIABLE] = str(cache)
    project = make_project(tmp_path / "project", yaml.safe_dump(tiny_study.params(), sort_keys=False))
    shutil.copytree(ROOT / "profiles", project / "profiles")  # a fresh clone holds it: Snakemake reads it by itself

    made = _run(project, env, str(BIN / "snakemake"), "--cores", "2", "first/backbone", "--configfile",
                _config(project, "first"))
    assert "Moving output file first/backbone to cache" in made, made[-3000:]
    again = _run(project, env, str(BIN / "snakemake"), "--cores", "2", "second/backbone", "--configfile",
                 _config(project, "second"))
    assert "Symlinking output file second/backbone/model.pt from cache" in again, again[-3000:]
    for stage in ("world", "backbone"):
        log = project / "second/logs" / f"{stage}.log"
        assert not log.exists() or not log.read_text(), f"{stage} ran again: {log.read_text()[-2000:]}"

    _dvc_backbone(project, env, "third")  # DVC after Snakemake: the entries Snakemake keeps
    for stage in ("world", "backbone"):
        text = (project / "third/logs" / f"{stage}.log").read_text()
        assert f"restored third/{stage} from the machine's output cache ({cache}/" in text and "pretraining" not in text
        assert contents(project / "third" / stage) == contents(project / "first" / stage)

    dvc_only = dict(env, **{CACHE_VARIABLE: str(own_cache)})  # DVC after DVC: the entries dear keeps
    _dvc_backbone(project, dvc_only, "fourth")
    assert "pretraining" in (project / "fourth/logs/backbone.log").read_text()
    assert sorted(entry.name.split("-")[1] for entry in own_cache.iterdir()) == ["backbone", "world"]
    _dvc_backbone(project, dvc_only, "fifth")
    text = (project / "fifth/logs/backbone.log").read_text()
    assert "restored fifth/backbone from the machine's output cache" in text and "pretraining" not in text
    assert contents(project / "fifth/backbone") == contents(project / "fourth/backbone")
    assert contents(project / "fourth/backbone")["model.pt"] == contents(project / "first/backbone")["model.pt"]
    status = _run(project, dvc_only, str(BIN / "dvc"), "status", "fifth/dvc.yaml:backbone")
    assert "changed" not in status, status  # DVC records the restored folders as the stage's outputs
