"""TAC's class descriptions: the authors' files by digest (fetched from a file:// source here: no network), a file of
one's own, the one name rule, and `dear check` and the model refusing a study without them."""

import hashlib
import json

import pytest
import yaml
from typer.testing import CliRunner

from dear.config.check import check_file
from dear.cli import app
from dear.errors import DearError
from dear.methods import descriptions
from dear.config.params import load_params
from tests import fake_run

TABLE = {"sea lion": ["A sea lion has flippers.", "a photo of a sea lion."], "red car": ["A red car."]}


@pytest.fixture
def source(tmp_path, monkeypatch):
    """A file:// copy of a descriptions folder holding one file, pinned by its sha256 as the authors' are."""
    data = json.dumps(TABLE).encode()
    (tmp_path / "remote").mkdir()
    (tmp_path / "remote/toy_prompt.json").write_bytes(data)
    monkeypatch.setitem(descriptions.DIGESTS, "toy_prompt.json", ("sha256", hashlib.sha256(data).hexdigest()))
    return f"file://{tmp_path}/remote/{{name}}"


def test_fetch_checks_the_digest_before_writing_and_keeps_a_good_copy(tmp_path, source):
    path = descriptions.fetch("toy_prompt.json", tmp_path / "tac", url=source)
    assert path == tmp_path / "tac/descriptions/toy_prompt.json" and json.loads(path.read_text()) == TABLE
    calls = []
    assert descriptions.fetch("toy_prompt.json", tmp_path / "tac", lambda url: calls.append(url)) == path
    assert calls == []  # already there with its digest: not downloaded again
    with pytest.raises(DearError, match=r"sha256 .* not FushengHao/TAC@563e7db's .* nothing written"):
        descriptions.fetch("toy_prompt.json", tmp_path / "other", lambda url: b"{}")
    assert not (tmp_path / "other").exists()
    with pytest.raises(DearError, match="not a descriptions file of FushengHao/TAC"):
        descriptions.fetch("mine_prompt.json", tmp_path)
    with pytest.raises(DearError, match="cannot download file://"):
        descriptions.fetch("toy_prompt.json", tmp_path / "none", url=f"file://{tmp_path}/missing/{{name}}")


def test_the_imagenet_files_are_pinned_by_their_git_blob_id():
    assert descriptions.digest(b"hello\n", "git-blob") == "ce013625030ba8dba906f756967f9e9ca394464a"  # git hash-object
    kinds = {name: kind for name, (kind, _) in descriptions.DIGESTS.items()}
    assert sum(kind == "sha256" for kind in kinds.values()) == 10 and kinds["imagenet_prompt.json"] == "git-blob"


def test_read_maps_class_names_by_the_one_rule_and_names_what_is_missing(tmp_path):
    path = tmp_path / "mine.json"
    path.write_text(json.dumps(TABLE))
    assert descriptions.read(path, ["red car", "sea_lion"]) == [TABLE["red car"], TABLE["sea lion"]]
    with pytest.raises(DearError, match=r"no descriptions of class 'tree' \(1 of 2 classes missing\)"):
        descriptions.read(path, ["sea_lion", "tree"])
    path.write_text(json.dumps({**TABLE, "tree": []}))
    with pytest.raises(DearError, match="'tree' are not a non-empty list"):
        descriptions.read(path, ["tree"])
    path.write_text("{")
    with pytest.raises(DearError, match="not a readable JSON file"):
        descriptions.read(path, ["tree"])


def paper_recipe(dataset="dtd", **changes):
    recipes = {"tac": changes} if changes else {}
    raw = yaml.safe_load((fake_run.ROOT / "configs/paper-vitb16.yaml").read_text())
    raw["train"]["recipes"] = recipes
    from dear.config.params import Params

    return Params.model_validate(raw).train.recipe("tac", dataset, "base_to_novel")


def test_a_recipe_names_the_authors_file_a_file_of_ones_own_or_the_templates(tmp_path):
    authors = paper_recipe(descriptions_dir=str(tmp_path / "TAC"))
    assert descriptions.source(authors) == tmp_path / "TAC/descriptions/dtd_prompt.json"
    own = paper_recipe(descriptions=str(tmp_path / "mine.json"))
    assert descriptions.source(own) == tmp_path / "mine.json" and not descriptions.is_authors(own)
    assert descriptions.source(paper_recipe(descriptions="templates")) is None
    lines = descriptions.missing([authors, paper_recipe("eurosat", descriptions_dir=str(tmp_path / "TAC")), own], "p.yaml")
    assert len(lines) == 2 and "dtd_prompt.json, eurosat_prompt.json not in" in lines[0]
    assert "dear fetch-weights --params p.yaml" in lines[0] and lines[1].endswith("point it to a JSON file {class name: [texts]}")
    (tmp_path / "TAC/descriptions").mkdir(parents=True)
    (tmp_path / "TAC/descriptions/dtd_prompt.json").write_text("{}")
    assert descriptions.missing([authors], "p.yaml") == []


def test_check_refuses_tac_on_a_dataset_without_descriptions_and_fetch_weights_fetches_them(tmp_path, source,
                                                                                            monkeypatch):
    params = fake_run.params_file(tmp_path / "params.yaml")
    raw = yaml.safe_load(params.read_text())
    raw["study"]["methods"] = ["tac"]
    del raw["train"]["recipes"]["tac"]["descriptions"]  # the world: none of the authors'
    params.write_text(yaml.safe_dump(raw, sort_keys=False))
    found = [finding.text for finding in check_file(params)[1]]
    assert len(found) == 1 and found[0].startswith("train.recipes.tac.descriptions: None (the authors' value")
    assert "names no class descriptions" in found[0] and "'templates'" in found[0]

    raw["train"]["recipes"]["tac"].update(descriptions="toy_prompt.json", descriptions_dir=str(tmp_path / "TAC"))
    params.write_text(yaml.safe_dump(raw, sort_keys=False))
    found = [finding.text for finding in check_file(params)[1]]
    assert len(found) == 1 and "toy_prompt.json not in" in found[0] and "dear fetch-weights" in found[0]
    monkeypatch.setattr(descriptions, "URL", source)
    result = CliRunner().invoke(app, ["fetch-weights", "--params", str(params)])
    assert result.exit_code == 0, result.output
    assert f"FushengHao/TAC@563e7db: {tmp_path / 'TAC/descriptions/toy_prompt.json'} (checked)" in result.stdout
    assert check_file(params)[1] == []
    assert load_params(params).train.recipe("tac", "world_objects", "base_to_novel").descriptions == "toy_prompt.json"
