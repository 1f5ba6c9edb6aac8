"""Recipes as data: every value a training run uses, with where it comes from.

A method's recipe file (`dear/methods/recipes/<name>.yaml`) holds its
authors' values as layers, each naming the file of the authors' repository
(or the paper, or us) it comes from:
- `recipe`: the base-to-novel recipe, layer after layer (later wins);
- `datasets`: per-dataset layers (MMRL's REG_WEIGHT, CoOp's ImageNet config);
- `transfer`: the layers of the transfer source's run (all classes; MMRL's
  cross-dataset config), or `{recipe: [...], datasets: {ds: [...]}}` where
  the authors' cross-dataset runs also set values per dataset (MMRL++'s
  per-dataset BETA and REG_WEIGHT of their CD task, the source's and each
  target's: `dear evaluate` resolves a target's recipe in this protocol);
- `few_shot`: the layers of a few-shot run on all classes (study.few_shot):
  `recipe` for every shot count, `shots: {K: ...}` per shot count (CoOp's
  epochs), `datasets: {ds: ...}` per dataset, applied in that order after
  `recipe` and `datasets` (MMRL merges its per-dataset values after its
  few-shot config file, so they are restated there);
- `own`: the layers of every dataset of one's own (`data.custom`), after the
  dataset layers: values of ours for data no author tuned a recipe for
  (`dassl.yaml`: `min_steps`, see `lengthened`).
`base: dassl` puts the shared Dassl layers (`dassl.yaml`: the trainer's keys
and defaults) first; `inherit` takes listed keys of another recipe (DeAR takes
MMRL's optimization, stated as our choice).

A config changes them under `train.recipes`: `all` (every method that has
the key) and one entry per recipe, each with plain keys, `datasets: {ds:
{...}}` and `transfer: {...}` and `few_shot: {..., shots: {K: {...}}}`. `resolve` layers,
for one run: the authors' defaults, their dataset layer, their transfer or
few-shot layers (when the run is the transfer source or a few-shot run),
then the same of `all`, then of the method's entry.
The result, a `Recipe`, is the one object the trainer reads; each value
carries its source, and a value of ours remembers the authors' value it
replaced. Nothing here imports torch: `dear recipe` answers in a second.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import yaml

from dear.errors import DearError
from dear.methods import RESERVED, ROLES_RECIPE, entry, plugins

FOLDER = Path(__file__).with_name("recipes")
PROTOCOLS = plugins.PROTOCOLS  # base_to_novel: base classes | transfer: the transfer source | few_shot: K shots, all classes
KINDS = ("authors", "paper", "ours")
SHARED = "all"  # train.recipes.all: every recipe that has the key
SECTIONS = ("datasets", "transfer", "few_shot")  # the non-value keys of an override block
REQUIRED = ("precision",)  # keys every recipe has: `fuse` and `evaluate` read them of every method


# --- keys and their types ---------------------------------------------------------

@dataclass(frozen=True)
class LayerKey:
    """A recipe key whose value names layers of a tower (`dear.methods.layers` resolves it against a model's depth)."""

    key: str
    towers: tuple[str, ...]  # the towers the value applies to: image, text
    meaning: str  # depth: layers 1..value hold prompts | start: layers value..L hold tokens
    lowest: int  # the smallest value that means something (PromptSRC's vision_depth 0: no image prompts)
    default: Callable[[int], int] | None = None  # the value null stands for, from the tower's depth


@dataclass(frozen=True)
class Key:
    """One recipe key: its type (a small vocabulary, see `check`) and what it means."""

    name: str
    type: str  # int | float | str | bool, '?' suffix = may be null, 'float[2]', 'str[]', 'a|b|c' (choices)
    help: str
    layers: LayerKey | None = None  # set when the value names layers of a tower (`dear check` fits it)

    def check(self, value: Any) -> str | None:
        """None when `value` fits the type, else what was expected."""
        kind = self.type
        if value is None:
            return None if kind.endswith("?") else f"{kind} (not null)"
        kind = kind.removesuffix("?")
        if kind.endswith("[]") or kind.endswith("[2]"):
            item = Key(self.name, kind.split("[")[0], self.help)
            if not isinstance(value, list) or (kind.endswith("[2]") and len(value) != 2):
                return f"a list of {'2 ' if kind.endswith('[2]') else ''}{item.type}"
            bad = [v for v in value if item.check(v) is not None or v is None]
            return f"a list of {item.type}" if bad else None
        if kind not in ("int", "float", "str", "bool"):  # choices
            return None if value in kind.split("|") else f"one of {kind.replace('|', ' | ')}"
        if kind == "float":
            ok = isinstance(value, (int, float)) and not isinstance(value, bool) and value == value \
                and abs(value) != float("inf")
            return None if ok else "a finite number"
        expected = {"int": int, "str": str, "bool": bool}[kind]
        ok = isinstance(value, expected) and (expected is bool or not isinstance(value, bool))
        return None if ok else kind

    def cast(self, value: Any) -> Any:
        """Floats as floats (YAML's `7` for a float key), lists of floats likewise."""
        kind = self.type.removesuffix("?")
        if value is None:
            return None
        if kind == "float":
            return float(value)
        if kind in ("float[2]", "float[]"):
            return [float(v) for v in value]
        return value


# --- recipe files -----------------------------------------------------------------

@dataclass(frozen=True)
class Layer:
    source: str  # the file (repository@commit path) or text the values come from
    kind: str  # authors | paper | ours
    values: dict[str, Any]


@dataclass(frozen=True)
class FewShot:
    """The few-shot layers of a recipe file: for every shot count, per shot count, per dataset (in that order)."""

    recipe: tuple[Layer, ...] = ()
    shots: dict[int, tuple[Layer, ...]] = field(default_factory=dict)
    datasets: dict[str, tuple[Layer, ...]] = field(default_factory=dict)

    def layers(self, dataset: str, shots: int) -> list[Layer]:
        return [*self.recipe, *self.shots.get(shots, ()), *self.datasets.get(dataset, ())]


@dataclass(frozen=True)
class RecipeFile:
    """One `recipes/<name>.yaml`, with its base and inherited layers already in front."""

    name: str
    title: str
    prompt: str  # how the method writes its text side (dear.methods.prompts.FORMS)
    keys: dict[str, Key]  # every key the recipe has, in display order
    recipe: tuple[Layer, ...]
    datasets: dict[str, tuple[Layer, ...]]
    transfer: tuple[Layer, ...]
    trains: bool  # False: nothing learnable (zero-shot), no trainer keys
    few_shot: FewShot = FewShot()
    transfer_datasets: dict[str, tuple[Layer, ...]] = field(default_factory=dict)  # after `transfer`, per dataset
    own: tuple[Layer, ...] = ()  # every dataset of one's own (data.custom)

    def layers(self, dataset: str, protocol: str, shots: int | None = None, own: bool = False) -> list[Layer]:
        first = [*self.recipe, *self.datasets.get(dataset, ()), *(self.own if own else ())]
        if protocol == "transfer":
            return [*first, *self.transfer, *self.transfer_datasets.get(dataset, ())]
        if protocol == "few_shot":
            return [*first, *self.few_shot.layers(dataset, shots)]
        return first


def _layers(raw: list, path: Path, keys: dict[str, Key]) -> tuple[Layer, ...]:
    layers = []
    for item in raw or []:
        kind = item.get("kind", "authors")
        unknown = sorted(set(item["values"]) - set(keys))
        if kind not in KINDS or unknown:
            raise DearError(f"{path}: layer from {item['source']!r}: "
                            + (f"unknown keys {unknown}; declare each under `keys:` with its type and help, or fix "
                               f"its spelling{_close(unknown[0], keys)}" if unknown
                               else f"kind {kind!r} is not one of {KINDS}"))
        for name, value in item["values"].items():
            problem = keys[name].check(value)
            if problem:
                raise DearError(f"{path}: {name} = {value!r} from {item['source']!r} must be {problem}; write it as "
                                f"such in this file, or change its type under `keys:`")
        layers.append(Layer(item["source"], kind, {k: keys[k].cast(v) for k, v in item["values"].items()}))
    return tuple(layers)


def path_of(name: str) -> Path:
    """Where recipe `name` lies: dear/methods/recipes/<name>.yaml, or the file a plugin method declares (a plugin's
    recipe is named after its method)."""
    own = FOLDER / f"{name}.yaml"
    if own.is_file() or name in RESERVED:
        return own
    plugin = entry(name).plugin
    return plugin.recipe_path() if plugin else own


def load(name: str) -> RecipeFile:
    """The recipe file `name` (cached per file and modification time: a built-in file is read once)."""
    path = path_of(name)
    if not path.is_file():
        owner = entry(name).plugin if name not in RESERVED else None
        raise DearError(f"{owner.label}: its recipe file {path} does not exist; fix `recipe=` of its Method "
                        "declaration" if owner else
                        f"{path}: no recipe file {name!r}; add it or fix the registry (dear/methods/__init__.py)")
    return _load(name, path, path.stat().st_mtime_ns)


@functools.lru_cache(maxsize=None)
def _load(name: str, path: Path, mtime_ns: int) -> RecipeFile:
    raw = _read_yaml(path)
    base = load(raw["base"]) if raw.get("base") else None
    keys = dict(base.keys) if base else {}
    keys.update({name: Key(name, spec["type"], spec["help"], _layer_key(name, spec, path))
                 for name, spec in (raw.get("keys") or {}).items()})
    front = list(base.recipe) if base else []
    inherit = raw.get("inherit")
    if inherit:
        parent = load(inherit["recipe"])
        wanted = set(inherit["keys"])
        own = [id(layer) for layer in base.recipe] if base else []  # the shared base's layers stay the base's
        front += _inherited([layer for layer in parent.recipe if id(layer) not in own], wanted, parent.name)
        inherited_datasets = {ds: _inherited(layers, wanted, parent.name) for ds, layers in parent.datasets.items()}
        inherited_transfer = _inherited(parent.transfer, wanted, parent.name)
        inherited_transfer_datasets = {ds: _inherited(layers, wanted, parent.name)
                                       for ds, layers in parent.transfer_datasets.items()}
        inherited_few_shot = FewShot(
            _inherited(parent.few_shot.recipe, wanted, parent.name),
            {k: _inherited(layers, wanted, parent.name) for k, layers in parent.few_shot.shots.items()},
            {ds: _inherited(layers, wanted, parent.name) for ds, layers in parent.few_shot.datasets.items()})
    else:
        inherited_datasets, inherited_transfer, inherited_few_shot = {}, (), FewShot()
        inherited_transfer_datasets = {}
    datasets = {ds: (*inherited_datasets.get(ds, ()), *_layers(layers, path, keys))
                for ds, layers in (raw.get("datasets") or {}).items()}
    datasets.update({ds: layers for ds, layers in inherited_datasets.items() if ds not in datasets})
    transfer, transfer_datasets = _transfer(raw.get("transfer"), path)
    return RecipeFile(name=name, title=raw["title"], prompt=raw["prompt"], keys=keys,
                      recipe=(*front, *_layers(raw.get("recipe"), path, keys)), datasets=datasets,
                      transfer=(*inherited_transfer, *_layers(transfer, path, keys)),
                      trains=bool(base), few_shot=_few_shot(raw.get("few_shot") or {}, path, keys, inherited_few_shot),
                      own=(*(base.own if base else ()), *_layers(raw.get("own"), path, keys)),
                      transfer_datasets={ds: (*inherited_transfer_datasets.get(ds, ()),
                                              *_layers(transfer_datasets.get(ds), path, keys))
                                         for ds in {**inherited_transfer_datasets, **transfer_datasets}})


def _layer_key(name: str, spec: dict, path: Path):
    """A key's `layers: {towers: [image, text], meaning: depth | start, lowest: 1}`: its value names layers of those
    towers (depth: layers 1..value hold the method's tokens; start: layers value..L), which `dear check` and the
    testing kit fit to the backbone as they fit the built-in recipes' (dear.methods.layers)."""
    declared = spec.get("layers")
    if declared is None:
        return None
    given = declared if isinstance(declared, dict) else {}
    towers, meaning, lowest = given.get("towers"), given.get("meaning"), given.get("lowest", 1)
    if not (isinstance(towers, list) and towers and set(towers) <= {"image", "text"}
            and meaning in ("depth", "start") and isinstance(lowest, int) and spec["type"].removesuffix("?") == "int"):
        raise DearError(f"{path}: keys.{name}.layers: write {{towers: [image] or [text] or [image, text], meaning: "
                        f"depth or start, lowest: 1}} on a key of type int (got {declared!r} on type {spec['type']})")
    return LayerKey(name, tuple(towers), meaning, lowest)


def _transfer(raw, path: Path) -> tuple[list, dict]:
    """A file's `transfer` section: a list of layers, or {recipe: layers, datasets: {ds: layers}}."""
    if not isinstance(raw, dict):
        return raw or [], {}
    unknown = sorted(set(raw) - {"recipe", "datasets"})
    if unknown:
        raise DearError(f"{path}: transfer: unknown sections {unknown} (recipe, datasets)")
    return raw.get("recipe") or [], raw.get("datasets") or {}


def _few_shot(raw: dict, path: Path, keys: dict[str, Key], inherited: FewShot) -> FewShot:
    """A file's `few_shot` section (recipe, shots: {K: layers}, datasets: {ds: layers}) after the inherited one."""
    unknown = sorted(set(raw) - {"recipe", "shots", "datasets"})
    bad = [k for k in raw.get("shots") or {} if not isinstance(k, int) or isinstance(k, bool) or k < 1]
    if unknown or bad:
        raise DearError(f"{path}: few_shot: " + (f"unknown sections {unknown} (recipe, shots, datasets)" if unknown
                                                 else f"shot count {bad[0]!r} is not an integer >= 1"))

    def merged(mine: dict, theirs: dict) -> dict:
        return {name: (*theirs.get(name, ()), *_layers(mine.get(name), path, keys)) for name in {**theirs, **mine}}

    return FewShot((*inherited.recipe, *_layers(raw.get("recipe"), path, keys)),
                   merged(raw.get("shots") or {}, inherited.shots), merged(raw.get("datasets") or {}, inherited.datasets))


def _read_yaml(path: Path):
    """A recipe file's values, with libyaml's parser where PyYAML has it: the same values (PyYAML's own resolver
    and constructor), read ~20x faster; every job reads its method's recipe files."""
    return yaml.load(path.read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))


def recipe_files(name: str) -> list[Path]:
    """The recipe file `name` and the files its `base` and `inherit` read, in that order."""
    path = path_of(name)
    raw = _read_yaml(path)
    parents = [raw["base"]] if raw.get("base") else []
    parents += [raw["inherit"]["recipe"]] if raw.get("inherit") else []
    found = [path]
    for parent in parents:
        found += [f for f in recipe_files(parent) if f not in found]
    return found


def _inherited(layers, wanted: set[str], parent: str) -> tuple[Layer, ...]:
    """`layers` cut to the keys in `wanted`, restated as our choice of the parent's values."""
    kept = []
    for layer in layers:
        values = {k: v for k, v in layer.values.items() if k in wanted}
        if values:
            kept.append(Layer(f"as {parent}: {layer.source}", "ours", values))
    return tuple(kept)


# --- resolution -------------------------------------------------------------------

NOT_SET = object()


@dataclass(frozen=True)
class Setting:
    """One resolved value and where it comes from."""

    value: Any
    source: str
    kind: str  # authors | paper | ours
    authors: Any = NOT_SET  # the authors' value that a value of ours replaced (NOT_SET: none, or the same)

    @property
    def differs(self) -> bool:
        return self.authors is not NOT_SET


@dataclass(frozen=True)
class Recipe:
    """The resolved recipe of one run: what the trainer and the model read, and nothing else changes."""

    method: str
    recipe: str  # the recipe file
    dataset: str
    protocol: str  # base_to_novel | transfer | few_shot
    settings: dict[str, Setting] = field(repr=False)
    keys_read: tuple[str, ...] = ()  # the config's dotted keys that reached this run (its key-level dependencies)
    shots: int | None = None  # few_shot: the training shots per class K the recipe was resolved for

    def __getattr__(self, key: str) -> Any:
        settings = self.__dict__.get("settings", {})
        if key in settings:
            return settings[key].value
        raise AttributeError(f"recipe {self.recipe!r} has no key {key!r}")

    def get(self, key: str, default: Any = None) -> Any:
        return self.settings[key].value if key in self.settings else default

    @property
    def values(self) -> dict[str, Any]:
        return {key: setting.value for key, setting in self.settings.items()}

    def sha256(self) -> str:
        """Hash of the values (not their sources): equal values train equal models."""
        return hashlib.sha256(json.dumps(self.values, sort_keys=True).encode()).hexdigest()

    def to_dict(self) -> dict:
        """JSON-able record (model.pt keeps it): values, their sources, and the authors' value where ours differs."""
        return {"method": self.method, "recipe": self.recipe, "dataset": self.dataset, "protocol": self.protocol,
                **({"shots": self.shots} if self.shots is not None else {}),
                "settings": {key: {"value": s.value, "source": s.source, "kind": s.kind,
                                   **({"authors": s.authors} if s.differs else {})}
                             for key, s in self.settings.items()}}

    @classmethod
    def from_dict(cls, data: dict) -> "Recipe":
        settings = {key: Setting(s["value"], s["source"], s["kind"], s.get("authors", NOT_SET))
                    for key, s in data["settings"].items()}
        return cls(data["method"], data["recipe"], data["dataset"], data["protocol"], settings,
                   shots=data.get("shots"))


def resolve(recipes: dict, method: str, dataset: str, protocol: str, shots: int | None = None,
            template: str | None = None, own: bool = False, roles: dict | None = None) -> Recipe:
    """The recipe of `method` trained on `dataset` (`protocol`: base_to_novel | transfer | few_shot with `shots`).

    `recipes` is the config's `train.recipes` mapping (already checked by `problems`). `own`: `dataset` is one
    of one's own (`data.custom`), which gets the recipe files' `own` layers. `template` is the prompt a dataset
    of one's own declares (`data.custom.<dataset>.template`): it replaces the recipe's own template, and any
    `train.recipes` key still overrides it. `roles`: {key: (value, source)} of the study's roles, recorded in
    the recipe of a `+roles` variant (`roles_record`).
    """
    if protocol not in PROTOCOLS:
        raise DearError(f"protocol {protocol!r} is not one of {', '.join(PROTOCOLS)}")
    if (protocol == "few_shot") != (shots is not None):
        raise DearError(f"protocol {protocol}: " + ("give the shot count K" if shots is None
                                                    else "a shot count belongs to the few_shot protocol only"))
    found = entry(method)
    spec = with_roles(load(found.recipe)) if found.plain else load(found.recipe)
    settings: dict[str, Setting] = {}
    for layer in spec.layers(dataset, protocol, shots, own):
        for key, value in layer.values.items():
            settings[key] = Setting(value, layer.source, layer.kind)
    authors = {key: s for key, s in settings.items()}
    read = []
    if template is not None and "template" in spec.keys:
        read.append(f"data.custom.{dataset}.template")
        known = authors["template"]
        replaced = known.value if known.kind != "ours" and known.value != template else NOT_SET
        settings["template"] = Setting(template, read[-1], "ours", replaced)
    owners = (spec.name, ROLES_RECIPE) if found.plain else (spec.name,)
    for where, block in _override_blocks(recipes, owners, dataset, protocol, shots):
        for key, value in block.items():
            if key not in spec.keys:
                _unknown_override(key, where, spec)
                continue  # an `all` key that another recipe has
            read.append(f"{where}.{key}")
            known = authors.get(key)
            value = spec.keys[key].cast(value)
            if known is not None and known.value == value and known.kind != "ours":
                settings[key] = known  # the config restates the authors' value: it stays theirs
                continue
            replaced = known.value if known is not None and known.kind != "ours" else NOT_SET
            settings[key] = Setting(value, f"{where}.{key}", "ours", replaced)
    missing = [key for key in spec.keys if key not in settings]
    if missing:
        raise DearError(f"{path_of(spec.name)}: no value for {missing}; every key needs a default layer")
    order = list(spec.keys)
    recorded = roles_record(roles) if found.plain else {}
    return Recipe(method, spec.name, dataset, protocol, {**{key: settings[key] for key in order}, **recorded},
                  tuple(read), shots)


def with_roles(spec: RecipeFile) -> RecipeFile:
    """A `+roles` variant's recipe: the plain method's, then the keys and layers of `recipes/roles.yaml`."""
    roles = load(ROLES_RECIPE)
    return dataclasses.replace(spec, keys={**spec.keys, **roles.keys}, recipe=(*spec.recipe, *roles.recipe))


def roles_record(roles: dict | None) -> dict[str, Setting]:
    """What a run with head roles records of them, from the study's `profile` section (`Params`): its roles
    table and the thresholds that made it; for a recipe resolved without a study, the table `dear train --roles`
    is given."""
    if roles is None:
        return {"roles_table": Setting(None, "the table given to `dear train --roles`", "ours")}
    return {key: Setting(value, source, "ours") for key, (value, source) in roles.items()}


# --- how long a run trains -----------------------------------------------------------

# The fewest optimizer steps any baseline's authors train a base-to-novel run with: KgCoOp (batch 128, 100 epochs)
# and MaPLe (batch 4, 5 epochs) on EuroSAT's 5 base classes x 16 shots, 100 steps (tests/methods/test_training_lengths.py
# derives it from the recipe files). Datasets of one's own train at least this many (dassl.yaml `own`: min_steps),
# and a run of fewer steps says so in its log and in the report (docs/your-data.md#training-lengths).
FEWEST_STEPS = 100


def steps_per_epoch(images: int, batch_size: int, drop_last: bool | None = None) -> int:
    """Dassl's loader: `drop_last = is_train and len(data_source) >= batch_size`, so n // B steps an epoch when
    the shots hold a full batch, else the one short batch; `drop_last` False keeps the last short batch (a plain
    DataLoader's default: Tip-Adapter's and CLIP-LoRA's loaders)."""
    if drop_last is False:
        return -(-images // batch_size)
    return images // batch_size if images >= batch_size else 1


def epochs_for(epochs: int, batch_size: int, images: int, min_steps: int | None, drop_last: bool | None = None) -> int:
    """`epochs`, raised to the fewest that reach `min_steps` optimizer steps on `images` (None: as given)."""
    if min_steps is None:
        return epochs
    return max(epochs, -(-min_steps // steps_per_epoch(images, batch_size, drop_last)))


def lengthened(recipe: Recipe, images: int) -> Recipe:
    """`recipe` for a run on `images` training images: its epochs raised to reach `min_steps` steps (a value of
    ours, with the value it replaced beside it); unchanged without `min_steps` or when the epochs reach it."""
    if recipe.get("epochs") is None or recipe.get("min_steps") is None:
        return recipe
    epochs = epochs_for(recipe.epochs, recipe.batch_size, images, recipe.min_steps, recipe.get("drop_last"))
    if epochs == recipe.epochs:
        return recipe
    known = recipe.settings["epochs"]
    before = known.authors if known.differs else known.value if known.kind != "ours" else NOT_SET
    why = (f"min_steps {recipe.min_steps}: {images} training images at batch {recipe.batch_size} make "
           f"{steps_per_epoch(images, recipe.batch_size, recipe.get('drop_last'))} step(s) an epoch (epochs {known.value} "
           f"from {known.source})")
    settings = {**recipe.settings, "epochs": Setting(epochs, why, "ours", before)}
    return dataclasses.replace(recipe, settings=settings)


def _unknown_override(key: str, where: str, spec: RecipeFile) -> None:
    """A key this recipe lacks: an error in the method's own block; in `all`, only when no recipe has it."""
    if where.startswith(f"train.recipes.{SHARED}"):
        for plugins in (False, True):  # the installed plugins' recipes only when no built-in one has the key
            every = {k for name in known_recipes(plugins) for k in load(name).keys}
            if key in every:
                return
        raise DearError(f"{where}.{key}: unknown recipe key; remove it or fix its spelling" + _close(key, every))
    raise DearError(f"{where}.{key}: recipe {spec.name!r} has no such key; remove it or fix its spelling"
                    + _close(key, spec.keys))


def _override_blocks(recipes: dict, names: tuple[str, ...], dataset: str, protocol: str, shots: int | None = None):
    """(dotted params key, {key: value}) of the config's layers that apply to one run, in order: `all`, then the
    blocks of `names` (the recipe's; a `+roles` variant's also `roles`)."""
    for owner in (SHARED, *names):
        block = recipes.get(owner) or {}
        where = f"train.recipes.{owner}"
        yield where, {k: v for k, v in block.items() if k not in SECTIONS}
        datasets = block.get("datasets") or {}
        if dataset in datasets:
            yield f"{where}.datasets.{dataset}", datasets[dataset] or {}
        if protocol == "transfer":
            yield f"{where}.transfer", block.get("transfer") or {}
        if protocol == "few_shot":
            few = block.get("few_shot") or {}
            yield f"{where}.few_shot", {k: v for k, v in few.items() if k != "shots"}
            for count, block in (few.get("shots") or {}).items():
                if shot_count(count) == shots:
                    yield f"{where}.few_shot.shots.{shots}", block or {}


def problems(recipes: Any) -> list[str]:
    """Every problem of a config's `train.recipes` mapping, one line each naming the dotted key."""
    if recipes is None:
        return []
    if not isinstance(recipes, dict):
        return ["train.recipes: must be a mapping of recipe name to changes (e.g. {mmrl: {epochs: 4}})"]
    found = []
    for owner, block in recipes.items():
        where = f"train.recipes.{owner}"
        if owner != SHARED and owner not in known_recipes(plugins=False) and owner not in known_recipes():
            if any(item.name == owner for item in plugins.discovered()):
                continue  # an installed plugin whose own files are broken: that problem is said first and alone
            found.append(f"{where}: no recipe named {owner!r}; use one of {', '.join([SHARED, *known_recipes()])}")
            continue
        names = known_recipes(plugins=False) if owner == SHARED else [owner]
        lines = _block_problems(block, where, {name: load(name).keys for name in names}, top=True)
        if lines and owner == SHARED:  # perhaps keys only an installed plugin's recipe has
            lines = _block_problems(block, where, {name: load(name).keys for name in known_recipes()}, top=True)
        found += lines
    return found


def known_recipes(plugins: bool = True) -> list[str]:
    """The built-in methods' recipes, and (`plugins`) those of the installed plugins whose recipe file loads (a
    plugin's is named after its method; `dear check` names a plugin whose file does not). Listing the plugins
    reads every installed package's entry points (~0.1-0.3 s): asked only when the built-in ones do not answer."""
    from dear.methods import REGISTRY, available

    builtin = {spec.recipe for spec in REGISTRY.values()} | {ROLES_RECIPE}
    if not plugins:
        return sorted(builtin)
    return sorted(builtin | {name for name in available() if name not in RESERVED and loads(name)})


def loads(name: str) -> bool:
    try:
        load(name)
    except DearError:
        return False
    return True


def _block_problems(block: Any, where: str, keys: dict[str, dict[str, Key]], top: bool) -> list[str]:
    """Problems of one block of changes; `keys`: the keys of each recipe the block applies to."""
    if block is None:
        return []
    if not isinstance(block, dict):
        return [f"{where}: must be a mapping of recipe keys to values"]
    found = []
    for key, value in block.items():
        if top and key == "datasets":
            if not isinstance(value, dict):
                found.append(f"{where}.datasets: must map dataset names to changes")
                continue
            for dataset, inner in value.items():
                found += _block_problems(inner, f"{where}.datasets.{dataset}", keys, top=False)
        elif top and key == "transfer":
            found += _block_problems(value, f"{where}.transfer", keys, top=False)
        elif top and key == "few_shot":
            found += _few_shot_problems(value, f"{where}.few_shot", keys)
        else:
            found += _value_problems(key, value, f"{where}.{key}", keys)
    return found


def _few_shot_problems(block: Any, where: str, keys: dict[str, dict[str, Key]]) -> list[str]:
    """A `few_shot` block: recipe keys, and `shots: {K: {...}}` with K an integer >= 1."""
    if not isinstance(block, dict):
        return _block_problems(block, where, keys, top=False)
    found = _block_problems({k: v for k, v in block.items() if k != "shots"}, where, keys, top=False)
    per_k = block.get("shots")
    if per_k is None:
        return found
    if not isinstance(per_k, dict):
        return [*found, f"{where}.shots: must map shot counts (1, 2, 4, ...) to changes"]
    for count, inner in per_k.items():
        if shot_count(count) is None:
            found.append(f"{where}.shots.{count}: {count!r} is not a shot count (an integer >= 1)")
            continue
        found += _block_problems(inner, f"{where}.shots.{count}", keys, top=False)
    return found


def shot_count(key: Any) -> int | None:
    """K of a `few_shot.shots` key: an integer >= 1, or its digits as text (JSON keeps mapping keys as text)."""
    if isinstance(key, bool):
        return None
    if isinstance(key, str) and key.isdigit() and key == str(int(key)):
        key = int(key)
    return key if isinstance(key, int) and key >= 1 else None


def _value_problems(key: str, value: Any, where: str, keys: dict[str, dict[str, Key]]) -> list[str]:
    having = {name: recipe_keys[key] for name, recipe_keys in keys.items() if key in recipe_keys}
    if not having:
        every = {k for recipe_keys in keys.values() for k in recipe_keys}
        return [f"{where}: unknown recipe key; remove it or fix its spelling" + _close(key, every)]
    wrong = {}
    for name, spec in having.items():
        problem = spec.check(value)
        if problem:
            wrong.setdefault(problem, []).append(name)
    hint = (" (YAML 1.1 reads exponents without a dot as text: write 1.0e-3, not 1e-3)"
            if isinstance(value, str) and _numeric(value) else "")
    return [f"{where}: must be {problem}{'' if len(having) == 1 else ' for ' + ', '.join(names)}, got {value!r}{hint}"
            for problem, names in wrong.items()]


def _close(key: str, keys: dict) -> str:
    import difflib

    match = difflib.get_close_matches(key, sorted(keys), n=1)
    return f" (did you mean {match[0]}?)" if match else ""


def _numeric(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True
