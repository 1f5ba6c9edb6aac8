"""`dear profile`: what does each attention head of the image encoder do? (SPEC §1-3)

Streams a seeded sample of one split of a prepared dataset through the
backbone, decomposes the image embedding into per-head direct contributions
(`dear.model.decompose`), explains every head of the last `profile.layers`
layers with TextSpan over the text bank (`dear.model.textspan`), and turns
each head's picked texts into a distribution over concepts, its Concept
Entropy and a role (`dear.model.concepts`). Writes into the output folder:
`roles.parquet`, `head_concepts.parquet`, `head_texts.parquet` (schemas
below), `heatmap.png`, `roles.md` and `ablation.parquet`: on the embedded
world, whose images carry their true attributes, the roles are validated by
mean-ablation (`dear.model.ablation`; an empty table elsewhere). Every input
is read and checked before the first file is written, and the folder appears
as a whole (`dear.runtime.io.output_folder`).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, ClassVar, Iterator, Sequence

import numpy as np
import pyarrow as pa
import torch
from torch import nn

from dear.compute import cpus
from dear.compute import device as devices
from dear.data.manifest import UNREADABLE_HINT, read_manifest, select
from dear.errors import DearError
from dear.runtime.io import output_folder, provenance, write_bytes, write_parquet, write_text
from dear.model import ablation as abl
from dear.model import concepts as cpt
from dear.model import internals
from dear.model.decompose import check_layers, head_statistics
from dear.model.textbank import TextBank, load_bank
from dear.model.textspan import Pick, check_rank, text_span
from dear.methods.trained import backbone_sha256
from dear.config.params import Params, Profile
from dear.runtime.progress import track

log = logging.getLogger("dear.profile")

ROLES_SCHEMA = pa.schema([
    pa.field("layer", pa.int32(), nullable=False),  # 1-based
    pa.field("head", pa.int32(), nullable=False),  # 0-based within the layer
    pa.field("entropy_bits", pa.float64(), nullable=False),
    pa.field("role", pa.string(), nullable=False),  # attribute | generalization | mixed
    pa.field("concept", pa.string(), nullable=False),  # dominant concept (argmax P)
    pa.field("concept_share", pa.float64(), nullable=False),  # P(concept)
    pa.field("mask_role", pa.string(), nullable=False),  # what the role mask uses
    pa.field("n_images", pa.int64(), nullable=False),
    pa.field("model_sha256", pa.string(), nullable=False),
    pa.field("text_bank_sha256", pa.string(), nullable=False),
])

HEAD_CONCEPTS_SCHEMA = pa.schema([
    pa.field("layer", pa.int32(), nullable=False),
    pa.field("head", pa.int32(), nullable=False),
    pa.field("concept", pa.string(), nullable=False),
    pa.field("probability", pa.float64(), nullable=False),
])

HEAD_TEXTS_SCHEMA = pa.schema([
    pa.field("layer", pa.int32(), nullable=False),
    pa.field("head", pa.int32(), nullable=False),
    pa.field("rank", pa.int32(), nullable=False),  # 1 = picked first
    pa.field("text", pa.string(), nullable=False),
    pa.field("concept", pa.string(), nullable=False),  # bank label, or cluster name in cluster mode
    pa.field("variance_explained", pa.float64(), nullable=False),  # share of the head's total variance
])


@dataclass(frozen=True)
class Inputs:
    backbone: Path  # folder made by `dear backbone` (model.pt + card.json)
    manifest: Path  # data/<ds>/manifest.parquet (or its folder)


@dataclass(frozen=True)
class Outputs:
    folder: Path
    FILES: ClassVar[tuple[str, ...]] = ("roles.parquet", "head_concepts.parquet", "head_texts.parquet", "heatmap.png",
                                        "roles.md", "ablation.parquet")

    @property
    def roles(self) -> Path:
        return self.folder / "roles.parquet"

    @property
    def head_concepts(self) -> Path:
        return self.folder / "head_concepts.parquet"

    @property
    def head_texts(self) -> Path:
        return self.folder / "head_texts.parquet"

    @property
    def heatmap(self) -> Path:
        return self.folder / "heatmap.png"

    @property
    def summary(self) -> Path:
        return self.folder / "roles.md"

    @property
    def ablation(self) -> Path:
        return self.folder / "ablation.parquet"


@dataclass(frozen=True)
class HeadResult:
    """Everything the tables say about one head."""

    layer: int  # 1-based
    head: int  # 0-based
    picks: list[Pick]
    pick_texts: list[str]
    pick_concepts: list[str]
    distribution: dict[str, float]
    entropy: float
    concept: str
    role: str = ""
    mask_role: str = ""


def run(params: Params, inputs: Inputs, outputs: Outputs) -> None:
    cfg = params.profile  # checked first by `dear.config.check` (roles thresholds, bank, rank vs picks)
    bank = load_bank(cfg.text_bank, cfg.concepts.allowed, params.world)
    paths = image_paths(inputs.manifest, cfg)
    from dear.model.clip import load_backbone

    backbone = load_backbone(inputs.backbone)
    device = devices.resolve(params.compute)
    devices.exact_matmuls(device)  # fp32 everywhere: the head terms must add up to the embedding
    model = backbone.model.to(device)
    depth = check_layers(model, cfg.layers)
    dim = internals.image_projection(model).shape[1]
    check_rank(cfg.svd_rank, cfg.texts_per_head, len(paths), dim, len(bank))
    log.info("profiling on %s", devices.describe(device, "fp32"))
    with torch.no_grad():
        texts = embed_texts(model, backbone.tokenizer, bank.texts, cfg.text_batch_size).cpu().numpy()
        batches = image_batches(paths, backbone.preprocess, cfg.batch_size, params.compute.workers, device)
        stats = head_statistics(model, batches, cfg.layers, cfg.contributions)
    results = explain_heads(stats.covariance.cpu().numpy(), texts, bank, cfg, first_layer=depth - cfg.layers + 1)
    ablation = ablation_rows(params, inputs.manifest, backbone, results)
    model_sha = backbone_sha256(backbone, inputs.backbone)  # the weights' hash, checked when they loaded
    banks = {"text_bank": bank.source} if Path(bank.source).is_file() else {}
    record = provenance(cfg, {"manifest": inputs.manifest, "backbone": inputs.backbone, **banks})
    record["text_bank_sha256"] = bank.sha256
    record["model_sha256"] = model_sha
    with output_folder(outputs.folder, Outputs.FILES) as staging:
        _write(Outputs(staging), results, cfg, bank, len(paths), model_sha, record, ablation)
    log.info("profiled %d heads of layers %d-%d on %d images: %s", len(results), depth - cfg.layers + 1, depth,
             len(paths), _counts([r.role for r in results]))


# --- images ------------------------------------------------------------------------

def image_paths(manifest: Path, cfg: Profile) -> list[str]:
    """A seeded sample (at most `max_images`) of the split's paths, sorted."""
    rows = select(read_manifest(manifest), split=cfg.split)
    paths = sorted(rows["path"].to_pylist())
    if not paths:
        raise DearError(f"{manifest}: no images in split '{cfg.split}'; set profile.split to a split it has")
    if len(paths) > cfg.max_images:
        keep = np.random.default_rng(cfg.seed).choice(len(paths), cfg.max_images, replace=False)
        paths = [paths[i] for i in sorted(keep)]
    missing = [p for p in paths if not Path(p).is_file()]
    if missing:
        raise DearError(f"{manifest}: {len(missing)} profiled image(s) missing, e.g. {missing[0]}; "
                        "run from the project root or rerun `dear prepare`")
    if Path(manifest).resolve().parent.name != cfg.dataset:
        log.warning("%s is not in a folder named profile.dataset (%s); check the two agree", manifest, cfg.dataset)
    if cfg.split == "test":
        log.warning("profiling test images of %s: do not evaluate on this dataset's test split", cfg.dataset)
    return paths


class _Images(torch.utils.data.Dataset):
    """Preprocessed images [3, S, S]; an unreadable file becomes its error line (raised by the main process)."""

    def __init__(self, paths: list[str], preprocess):
        self.paths, self.preprocess = paths, preprocess

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, index: int) -> torch.Tensor | str:
        from PIL import Image

        path = self.paths[index]
        try:
            with Image.open(path) as image:
                return self.preprocess(image.convert("RGB"))
        except OSError as err:  # PIL's UnidentifiedImageError is an OSError
            return f"{path}: not a readable image ({type(err).__name__}); {UNREADABLE_HINT}"


def _stack(items: list) -> torch.Tensor | str:
    problems = [item for item in items if isinstance(item, str)]
    return problems[0] if problems else torch.stack(items)


def image_batches(paths: list[str], preprocess, batch_size: int, workers: int = 0,
                  device: torch.device = torch.device("cpu")) -> Iterator[torch.Tensor]:
    """Preprocessed image batches [B, 3, S, S] on `device`, in order; `workers` processes decode them."""
    loader = torch.utils.data.DataLoader(_Images(paths, preprocess), batch_size=batch_size, num_workers=cpus.processes(workers),
                                         collate_fn=_stack, pin_memory=device.type == "cuda")
    for batch in track(loader, description="profiling images", total=len(loader), unit="batches"):
        if isinstance(batch, str):
            raise DearError(batch)
        yield batch.to(device, non_blocking=True)


def embed_texts(model: nn.Module, tokenizer: Callable[[list[str]], torch.Tensor], texts: Sequence[str],
                batch_size: int) -> torch.Tensor:
    """Normalized text embeddings [K, E] of `texts`, in order, computed on the model's device."""
    device = internals.text_positions(model).device
    chunks = []
    starts = range(0, len(texts), batch_size)
    for start in track(starts, description="embedding texts", total=len(starts), unit="batches"):
        tokens = internals.trim_text_padding(model, tokenizer(list(texts[start:start + batch_size])))
        chunks.append(internals.encode_text(model, tokens.to(device)).float())
    embeddings = torch.cat(chunks)  # [K, E]
    return embeddings / embeddings.norm(dim=-1, keepdim=True).clamp_min(1e-12)


# --- heads -------------------------------------------------------------------------

def explain_heads(covariances: np.ndarray, texts: np.ndarray, bank: TextBank, cfg: Profile,
                  first_layer: int) -> list[HeadResult]:
    """TextSpan, concepts, entropy and role of every head. covariances: [Lp, H, E, E]."""
    n_layers, n_heads = covariances.shape[:2]
    spans = [(first_layer + i, h, text_span(covariances[i, h], texts, cfg.svd_rank, cfg.texts_per_head))
             for i in range(n_layers) for h in range(n_heads)]
    labels = _pick_concepts(spans, bank, cfg)
    names = list(cfg.concepts.allowed) + ([cpt.NOISE] if cfg.concepts.source == "cluster" else [])
    results = []
    for (layer, head, picks), pick_concepts in zip(spans, labels):
        weights = [1.0] * len(picks) if cfg.weighting == "uniform" else [p.variance for p in picks]
        p = cpt.distribution(pick_concepts, weights, names)
        texts_of = [bank.texts[pick.index] for pick in picks]
        results.append(HeadResult(layer, head, picks, texts_of, pick_concepts, p, cpt.entropy_bits(p.values()),
                                  cpt.dominant(p, pick_concepts)))
    limits = cpt.thresholds([r.entropy for r in results], cfg.roles.mode, cfg.roles.low, cfg.roles.high)
    return [_with_role(r, cpt.role(r.entropy, limits)) for r in results]


def _with_role(result: HeadResult, role: str) -> HeadResult:
    return HeadResult(**{**result.__dict__, "role": role, "mask_role": cpt.mask_role(role, result.concept)})


def _pick_concepts(spans: list, bank: TextBank, cfg: Profile) -> list[list[str]]:
    """Concept of each picked text: the bank's label, or its cluster's name (cluster mode)."""
    if cfg.concepts.source == "bank":
        return [[bank.concepts[p.index] for p in picks] for _, _, picks in spans]
    unique = sorted({p.index for _, _, picks in spans for p in picks})
    named = cpt.cluster_concepts([bank.texts[i] for i in unique], [bank.concepts[i] for i in unique],
                                 cfg.concepts.min_cluster_size, cfg.concepts.min_samples)
    by_index = dict(zip(unique, named))
    return [[by_index[p.index] for p in picks] for _, _, picks in spans]


# --- validation by ablation (embedded world) -------------------------------------

def ablation_rows(params: Params, manifest: Path, backbone, results: list[HeadResult]) -> list[dict]:
    """Mean-ablation of each concept's labelled heads on images with known attributes; [] when there are none."""
    cfg = params.profile
    attributes_file = Path(params.data.root) / cfg.dataset / "attributes.parquet"
    if not cfg.ablation.enabled or params.data.source != "embedded" or not attributes_file.is_file():
        return []
    import pyarrow.parquet as pq

    table = select(read_manifest(manifest), split=cfg.ablation.split)
    paths = sorted(table["path"].to_pylist())
    if len(paths) > cfg.ablation.max_images:
        keep = np.random.default_rng(cfg.seed).choice(len(paths), cfg.ablation.max_images, replace=False)
        paths = [paths[i] for i in sorted(keep)]
    truth = {row["impath"]: row for row in pq.read_table(attributes_file).to_pylist()}
    images_dir = attributes_file.parent / "images"
    rows = [truth[str(Path(path).relative_to(images_dir))] for path in paths]
    families = world_families(params, rows, backbone)
    with torch.no_grad():
        device = next(backbone.model.parameters()).device
        batches = image_batches(paths, backbone.preprocess, cfg.batch_size, params.compute.workers, device)
        heads, embeddings, first = abl.decomposed(backbone.model, batches, cfg.layers)
    roles = [{"layer": r.layer, "head": r.head, "concept": r.concept, "role": r.role} for r in results]
    return abl.validate(heads, embeddings, first, families, roles, cfg.ablation.random_sets, cfg.seed)


def world_families(params: Params, rows: list[dict], backbone) -> list[abl.Family]:
    """A zero-shot task per core concept over the world's own vocabulary and caption forms."""
    from dear.data import world as world_data

    world = params.world
    objects = sorted({row["object"] for row in rows})
    vocabulary = {"object": objects, "color": list(world.colors), "shape": list(world.shapes),
                  "texture": list(world.textures), "position": list(world_data.positions(world))}
    families = []
    for concept in cpt.CORE_CONCEPTS:
        names = vocabulary[concept]
        index = {name: i for i, name in enumerate(names)}
        labels = torch.tensor([index.get(row[concept], -1) for row in rows])
        template = world_data.TEMPLATES["world_objects" if concept == "object" else f"world_{concept}s"][0]
        families.append(abl.family(backbone.model, backbone.tokenizer, concept, names, template, labels))
    return families


# --- outputs -----------------------------------------------------------------------

def _write(outputs: Outputs, results: list[HeadResult], cfg: Profile, bank: TextBank, n_images: int,
           model_sha: str, record: dict, ablation: list[dict]) -> None:
    roles = {
        "layer": [r.layer for r in results], "head": [r.head for r in results],
        "entropy_bits": [r.entropy for r in results], "role": [r.role for r in results],
        "concept": [r.concept for r in results], "concept_share": [r.distribution[r.concept] for r in results],
        "mask_role": [r.mask_role for r in results], "n_images": [n_images] * len(results),
        "model_sha256": [model_sha] * len(results), "text_bank_sha256": [bank.sha256] * len(results),
    }
    concept_rows = [(r.layer, r.head, c, p) for r in results for c, p in r.distribution.items()]
    text_rows = [(r.layer, r.head, rank, text, concept, pick.share) for r in results
                 for rank, (pick, text, concept) in enumerate(zip(r.picks, r.pick_texts, r.pick_concepts), start=1)]
    write_parquet(outputs.roles, pa.table(roles), ROLES_SCHEMA, record)
    write_parquet(outputs.head_concepts, _columns(concept_rows, HEAD_CONCEPTS_SCHEMA), HEAD_CONCEPTS_SCHEMA, record)
    write_parquet(outputs.head_texts, _columns(text_rows, HEAD_TEXTS_SCHEMA), HEAD_TEXTS_SCHEMA, record)
    write_parquet(outputs.ablation, pa.Table.from_pylist(ablation, schema=abl.ABLATION_SCHEMA), abl.ABLATION_SCHEMA,
                  record)
    write_bytes(outputs.heatmap, _heatmap(results, cfg, n_images))
    write_text(outputs.summary, summary_markdown(results, cfg, n_images, ablation))


def _columns(rows: list[tuple], schema: pa.Schema) -> pa.Table:
    return pa.table({name: [row[i] for row in rows] for i, name in enumerate(schema.names)})


def _heatmap(results: list[HeadResult], cfg: Profile, n_images: int) -> bytes:
    from dear.report.heatmap import role_heatmap

    layers = sorted({r.layer for r in results})
    heads = max(r.head for r in results) + 1
    grid = {(r.layer, r.head): r for r in results}
    entropy = np.array([[grid[(layer, h)].entropy for h in range(heads)] for layer in layers])
    roles = [[grid[(layer, h)].role for h in range(heads)] for layer in layers]
    concepts = [[grid[(layer, h)].concept for h in range(heads)] for layer in layers]
    title = f"Concept Entropy of {cfg.dataset} ({cfg.split}, {n_images} images, N={cfg.texts_per_head})"
    return role_heatmap(layers, heads, entropy, roles, concepts, title)


def _counts(values: list[str]) -> str:
    return ", ".join(f"{name} {values.count(name)}" for name in sorted(set(values)))


def summary_markdown(results: list[HeadResult], cfg: Profile, n_images: int, ablation: list[dict] = (),
                     top_heads: int = 8, top_texts: int = 5) -> str:
    """roles.md: counts per role and concept, then the most specialized heads and their first texts."""
    lines = [f"# Head roles: {cfg.dataset} ({cfg.split} split, {n_images} images)", "",
             f"Layers {results[0].layer}-{results[-1].layer}, {len(results)} heads; N = {cfg.texts_per_head} texts "
             f"per head, r = {cfg.svd_rank}, weighting {cfg.weighting}, concepts from {cfg.concepts.source}, "
             f"thresholds {cfg.roles.mode} ({cfg.roles.low}, {cfg.roles.high}).", "",
             "| role | heads |", "| --- | --- |"]
    lines += [f"| {role} | {sum(r.role == role for r in results)} |" for role in (cpt.ATTRIBUTE, cpt.MIXED,
                                                                                   cpt.GENERALIZATION)]
    lines += ["", "| dominant concept | heads | attribute heads |", "| --- | --- | --- |"]
    for concept in sorted({r.concept for r in results}):
        group = [r for r in results if r.concept == concept]
        lines.append(f"| {concept} | {len(group)} | {sum(r.role == cpt.ATTRIBUTE for r in group)} |")
    lines += ["", "## Most specialized heads", ""]
    for r in sorted(results, key=lambda r: (r.entropy, r.layer, r.head))[:top_heads]:
        lines.append(f"- L{r.layer}.H{r.head}: {r.role}, {r.concept} ({r.distribution[r.concept]:.0%}), "
                     f"H = {r.entropy:.2f} bits")
        for pick, text, concept in list(zip(r.picks, r.pick_texts, r.pick_concepts))[:top_texts]:
            lines.append(f"  - {text} [{concept}, {pick.share:.1%} of the variance]")
    if ablation:
        lines += ["", "## Validation by ablation", "",
                  f"Zero-shot accuracy lost on each concept when its heads' direct contributions are mean-ablated "
                  f"({cfg.ablation.split} images of {cfg.dataset}), against {cfg.ablation.random_sets} random head "
                  "sets of the same size; a concept is judged when the backbone knows it (zero-shot >= 2x chance).", ""]
        lines += abl.markdown(ablation)
    return "\n".join(lines) + "\n"
