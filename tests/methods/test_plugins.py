"""Methods from installed packages: found by name like built-in ones, their code counted as the study's.

A plugin is written and "installed" as pip installs one (a package and its .dist-info with entry_points.txt)
into a folder put on sys.path (tests/plugins.py); the example package and the generated skeleton are
installed with pip itself in tests/docs/test_your_method.py.
"""

import os
from pathlib import Path

import pytest
import yaml

from dear.pipeline import codegraph, jobs
from dear.errors import DearError
from dear.methods import RESERVED, available, entry, model_class, names
from dear.config.params import load_params
from tests import fake_run
from tests.plugins import installed_plugin, write_plugin

ROOT = Path(__file__).resolve().parents[2]


def params_with(path: Path, methods: list[str]) -> Path:
    raw = yaml.safe_load((ROOT / "params.yaml").read_text())
    raw["study"]["methods"] = methods
    raw["report"].update(methods=methods, compare=methods[-1])
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return path


def test_an_installed_method_is_found_by_name_beside_the_built_in_ones(tmp_path):
    with installed_plugin(tmp_path / "site", "my_adapter", trains=True) as name:
        assert available() == [*names(), name]
        found = entry(name)
        assert found.plugin.distribution == "my-adapter" and found.plugin.version == "0.1.0"
        assert found.module_name == "my_adapter.model" and found.recipe == name
        assert model_class(name).__name__ == "Model"
        params = load_params(params_with(tmp_path / "params.yaml", ["zeroshot", "coop", name]))
        recipe = params.train.recipe(name, "world_objects", "base_to_novel")
        assert recipe.settings["template"].source == "tests/plugins.py" and recipe.epochs == 10  # dassl's default
    assert name not in available()
    with pytest.raises(DearError, match="unknown method 'my_adapter'.*install a package that declares it"):
        entry(name)


def test_a_plugin_cannot_take_a_built_in_name_and_the_built_in_one_wins(tmp_path):
    with installed_plugin(tmp_path / "site", "not_coop", method="coop"):
        assert entry("coop").plugin is None and available() == names()
        assert "coop" in RESERVED and "dassl" in RESERVED


def test_a_plugin_of_another_contract_is_refused_by_name(tmp_path):
    with installed_plugin(tmp_path / "site", "future_method", contract=2) as name:
        assert name not in available()
        with pytest.raises(DearError, match="written for method contract 2, but this dear provides contract 1"):
            entry(name)


def code(stage: str, method: str) -> jobs.Code:
    jobs.code.cache_clear()
    return jobs.code(stage, method, "world_objects")


def edit(path: Path, old: str, new: str) -> None:
    """Change a file's text and move its time on (the fingerprints' caches are keyed by it)."""
    stat = path.stat()
    path.write_text(path.read_text().replace(old, new))
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))


def test_a_plugin_job_counts_the_plugins_code_and_nothing_else_changes(tmp_path):
    """Its model module, its declaration, its recipe and the dear modules they import are its code; a comment
    changes nothing, a change to its forward its jobs only; installing it changes no other job's code."""
    before = {method: code("train", method).sha256 for method in ("coop", "dear")}
    with installed_plugin(tmp_path / "site", "my_adapter", trains=True) as name:
        found = code("train", name)
        assert {"my_adapter/__init__.py", "my_adapter/model.py", "my_adapter/recipe.yaml", "dear/contract.py",
                "dear/methods/recipes/dassl.yaml", "dear/stages/train.py"} <= set(found.files)
        assert found.name == "train-my_adapter"
        assert {method: code("train", method).sha256 for method in before} == before
        model = tmp_path / "site/my_adapter/model.py"
        edit(model, '"""A test plugin method', '# a comment\n"""A test plugin method, documented')
        assert code("train", name).sha256 == found.sha256
        edit(model, "[:, 0]", "[:, 0] * 1.0")
        assert code("train", name).sha256 != found.sha256
        assert {method: code("train", method).sha256 for method in before} == before
        edit(tmp_path / "site/my_adapter/recipe.yaml", "a photo of a {}.", "a photo of the {}.")
        assert code("evaluate", name).files["my_adapter/recipe.yaml"] != found.files["my_adapter/recipe.yaml"]
    jobs.code.cache_clear()


def test_dear_recipe_shows_a_plugins_values_and_sources(tmp_path):
    with installed_plugin(tmp_path / "site", "my_adapter", trains=True) as name:
        params = params_with(tmp_path / "params.yaml", ["zeroshot", name])
        shown = fake_run.invoke("recipe", "--params", params, "--method", name, "--protocol", "base_to_novel").output
        assert "a photo of a {}." in shown and "tests/plugins.py" in shown and "Dassl.pytorch" in shown


def test_a_run_records_the_plugins_distribution_and_version(tmp_path):
    from dear.cli import job_record

    args = {"dataset": "world_objects", "classes": "base"}
    with installed_plugin(tmp_path / "site", "my_adapter", trains=True, version="2.3.1") as name:
        params = load_params(params_with(tmp_path / "params.yaml", ["zeroshot", name]))
        record = job_record("train", params, {"method": name, **args})["plugin"]
        files = {key: value for key, value in code("train", name).files.items() if key.startswith("my_adapter/")}
        edit(tmp_path / "site/my_adapter/model.py", "[:, 0]", "[:, 0] * 1.0")
        jobs.code.cache_clear()
        edited = job_record("train", params, {"method": name, **args})["plugin"]
    assert record == {"method": name, "distribution": "my-adapter", "version": "2.3.1",
                      "entry_point": "my_adapter:METHOD", "contract": 1, "code_files": files,
                      "code_sha256": codegraph.fingerprint(files), "installed": "as installed", "edited": []}
    assert sorted(files) == ["my_adapter/__init__.py", "my_adapter/model.py", "my_adapter/recipe.yaml"]
    assert edited["installed"] == "edited since installed" and edited["edited"] == ["my_adapter/model.py"]
    assert edited["code_sha256"] != record["code_sha256"] and edited["version"] == "2.3.1"
    assert "plugin" not in job_record("train", params, {"method": "coop", "dataset": "world_objects",
                                                        "classes": "base"})


def test_the_page_lists_every_name_of_the_contract_and_every_hook():
    """docs/your-method.md's contract table is dear.contract.__all__, and its hooks table every method of
    MethodModel a method overrides (the base's own machinery left out)."""
    import re

    from dear import contract
    from dear.methods.base import MethodModel

    page = (ROOT / "docs" / "your-method.md").read_text()
    contract_table = page.partition("## The contract")[2].partition("###")[0]
    listed = set(re.findall(r"`(\w+)`", "".join(line.split("|")[1] for line in contract_table.splitlines()
                                              if line.startswith("| `"))))
    assert listed == set(contract.__all__) - {"VERSION"}
    hooks_table = page.partition("## Hooks")[2].partition("\n\n**")[0]
    shown = set(re.findall(r"`(\w+)[(`]", "".join(line.split("|")[1] for line in hooks_table.splitlines()
                                                  if line.startswith("| `"))))
    machinery = {"image_prefix", "frozen_image", "frozen_embedding", "text_features", "once", "logit_scale", "logits",
                 "trains", "train", "device", "trainable_state", "load_trainable"}
    hooks = {name for name, value in vars(MethodModel).items()
             if not name.startswith("_") and (callable(value) or isinstance(value, property))} - machinery
    assert shown == hooks | {"fit"}  # fit: only a method that sets fits_features defines it (the base has none)


DEEP_BUILD = '''
    def build(self, roles):
        from dear.contract import check_layer

        self.depth = check_layer(12, self.vision.layers, "prompt_depth_vision")
'''


def test_a_layer_outside_the_tower_is_named_under_the_plugins_own_recipe_without_a_null_it_does_not_take(tmp_path):
    from dear.methods import create
    from dear.methods.base import LayerError, check_layer
    from tests.tiny_clip import tiny_clip

    with installed_plugin(tmp_path / "site", "my_deep", model_body=DEEP_BUILD) as name:
        params = load_params(params_with(tmp_path / "params.yaml", ["zeroshot", name]))
        recipe = params.train.recipe(name, "world_objects", "base_to_novel")
        backbone = type("Backbone", (), {"model": tiny_clip(layers=3), "tokenizer": None})
        with pytest.raises(LayerError) as raised:
            create(name, backbone, recipe)
    assert str(raised.value) == ("recipe: prompt_depth_vision = 12 is outside this backbone's layers 1..3; set "
                                 "train.recipes.my_deep.prompt_depth_vision in 1..3")
    assert (raised.value.key, raised.value.layers) == ("prompt_depth_vision", 3)
    with pytest.raises(DearError, match=r"set train.recipes.dear.start_layer in 1..2, or null for its default$"):
        check_layer(5, 2, "start_layer", method="dear", nullable=True)


def test_a_plugin_shadowed_by_a_folder_of_its_name_is_refused_with_the_likely_cause(tmp_path, monkeypatch):
    """A flat `name/name/` package seen from its parent folder: Python imports the outer folder (no __init__.py)."""
    from dear.methods import plugins
    from tests.plugins import fresh_discovery

    write_plugin(tmp_path / "site", "shadowed_method")
    (tmp_path / "site" / "shadowed_method" / "__init__.py").unlink()  # what the outer folder of a flat layout is
    fresh_discovery(monkeypatch, tmp_path / "site")
    (broken,) = [item for item in plugins.discovered() if item.name == "shadowed_method"]
    assert "has no attribute 'METHOD'" in broken.problem
    assert f"likely cause: Python imported the folder {tmp_path / 'site' / 'shadowed_method'} (no __init__.py)" \
        in broken.problem and "src layout (src/shadowed_method/" in broken.problem


def test_new_method_writes_the_src_layout(tmp_path):
    from dear import scaffold

    written = scaffold.run("my_method", tmp_path / "my-method")
    assert sorted(str(path.relative_to(tmp_path / "my-method")) for path in written) == \
        ["pyproject.toml", "src/my_method/__init__.py", "src/my_method/model.py", "src/my_method/recipe.yaml",
         "tests/test_my_method.py"]
    assert 'package-dir = {"" = "src"}' in (tmp_path / "my-method" / "pyproject.toml").read_text()


def test_the_page_documents_each_tower_function_with_its_real_arguments_and_the_internals_that_exist():
    """docs/your-method.md#the-towers: each `towers.f(args)` heading is the function's signature (names, order and
    defaults), every function the contract table lists for `towers` has one, and the internals table names
    functions of dear.model.internals."""
    import inspect
    import re

    from dear.methods import towers
    from dear.model import internals

    page = (ROOT / "docs" / "your-method.md").read_text()
    section = page.partition("\n## The towers\n")[2].partition("\n## ")[0]
    headings = re.findall(r"^### `towers\.(\w+)\((.*)\)`$", section, flags=re.M)
    for name, arguments in headings:
        real = [str(p).split(":")[0].strip() + (f"={p.default!r}" if p.default is not p.empty else "")
                for p in inspect.signature(getattr(towers, name)).parameters.values()]
        assert [a.strip() for a in arguments.split(",")] == real, name
    contract_row = next(line for line in page.splitlines() if line.startswith("| `towers` |"))
    listed = set(re.findall(r"`(\w+)`", contract_row.split("|")[2])) - {"compose"}  # run_text's argument
    assert {name for name, _ in headings} == listed
    table = section.partition("### `internals`")[2]
    named = set(re.findall(r"`(\w+)[(`]", "".join(line.split("|")[1] for line in table.splitlines()
                                                  if line.startswith("| `"))))
    assert named and all(hasattr(internals, name) for name in named), sorted(n for n in named
                                                                              if not hasattr(internals, n))
    assert "**and `ln_pre`**" in section and "frozen_depth" in section


ROLE_AWARE_BODY = '''
    def build(self, roles):
        self.token = nn.Parameter(torch.randn(1, self.vision.width))
        self.head_roles = roles  # the roles table's heads for name+roles, None for the plain method

    @property
    def frozen_depth(self):
        return self.vision.layers - 1

    def encode(self, prefix):
        from dear.contract import internals, roles

        last, r = self.vision.layers, self.recipe
        masks = None if self.head_roles is None else roles.token_masks(
            self.head_roles, list(r.role_concepts), r.mixed_heads, range(last, last + 1), self.vision.heads,
            prefix.shape[1], 1)
        rows = towers.run_image(self.vision, prefix, last, lambda layer, previous: self.token[None],
                                range(last, last + 1), append_at=last, masks=masks)
        return torch.nn.functional.normalize(internals.image_embedding(self.clip, rows[:, 0]), dim=-1)[:, None]
'''


def test_a_plugin_declared_with_roles_runs_with_deARs_roles_through_the_contract(tmp_path):
    """`roles=True` in its declaration: `<name>+roles` is a method, its recipe the plugin's then roles.yaml, its model
    given the roles table's heads, which the contract's mask builder turns into DeAR's mask."""
    import torch

    from dear.methods import create
    from dear.methods.recipe import resolve
    from tests.methods_tools import Backbone, layer_roles
    from tests.tiny_clip import tiny_clip

    init = ("from dear.contract import Method\n\nMETHOD = Method(model='role_aware.model:Model', "
            "recipe='role_aware:recipe.yaml', title='a test plugin', contract=1, roles=True)\n")
    with installed_plugin(tmp_path / "site", "role_aware", trains=True, init=init, model_body=ROLE_AWARE_BODY) as name:
        assert f"{name}+roles" in available() and entry(f"{name}+roles").reads_roles
        assert entry(f"{name}+roles").plain == name and not entry(name).reads_roles
        recipe = resolve({"roles": {"mixed_heads": "closed"}}, f"{name}+roles", "world_objects", "base_to_novel")
        assert recipe.mixed_heads == "closed"
        assert recipe.settings["mixed_heads"].source == "train.recipes.roles.mixed_heads"
        concepts = recipe.settings["role_concepts"]
        assert concepts.kind == "paper" and "SPEC §3" in concepts.source
        clip, images = tiny_clip(), torch.randn(2, 3, 32, 32)
        closed = layer_roles([("generalization", "other")] * 4)
        variant = create(f"{name}+roles", Backbone(clip), recipe, closed)
        plain = create(name, Backbone(clip), resolve({}, name, "world_objects", "base_to_novel"))
        frozen = torch.nn.functional.normalize(clip.encode_image(images), dim=-1)
        with torch.no_grad():
            torch.testing.assert_close(variant.encode(variant.image_prefix(images))[:, 0], frozen)
            assert not torch.allclose(plain.encode(plain.image_prefix(images))[:, 0], frozen, atol=1e-4)
    with installed_plugin(tmp_path / "site2", "roleless", trains=True) as name:
        assert f"{name}+roles" not in available()
        with pytest.raises(DearError, match=r"roleless has no variant with DeAR's head roles.*roles=True"):
            entry(f"{name}+roles")
