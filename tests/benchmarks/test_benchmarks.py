"""The benchmarks still run against today's code (they are scripts, so nothing else would notice them rot)."""

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _script(name: str):
    spec = importlib.util.spec_from_file_location(f"bench_{name}", ROOT / "benchmarks" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


TINY_DEPTHS = ["maple.prompt_depth=2", "promptsrc.vision_depth=2", "promptsrc.text_depth=2",  # dear-world-tiny's
               "tac.vision_depth=2", "tac.text_depth=2"]  # 2 layers


def test_the_training_step_benchmark_steps_every_method_it_compares():
    bench = _script("train_step")
    result = bench.interleaved("dear-world-tiny", classes=4, batch=2, rounds=1, warmup=0, device="cpu",
                               changes=bench.recipe_changes(TINY_DEPTHS))
    assert {*bench.METHODS, "dear_fading"} <= result.keys()
    assert all(result[name]["median_s"] > 0 and result[name]["trainable"] > 0 for name in bench.METHODS)


def test_the_training_step_benchmark_compares_any_listed_method_with_coop():
    bench = _script("train_step")
    changes = bench.recipe_changes(TINY_DEPTHS)
    assert changes["maple"] == {"prompt_depth": 2} and changes["promptsrc"] == {"vision_depth": 2, "text_depth": 2}
    result = bench.interleaved("dear-world-tiny", classes=4, batch=2, rounds=1, warmup=0, device="cpu",
                               methods=["promptsrc"], changes=changes)
    assert {"promptsrc", "coop"} == result.keys() - {"threads"}  # CoOp joins as the baseline
    assert result["promptsrc"]["trainable"] == 4 * 64 + 2 * 4 * 64 + 1 * 4 * 64  # context, image 2 layers, text layer 2


def test_the_evaluation_benchmark_times_a_later_seed_against_the_first():
    from types import SimpleNamespace

    run = _script("run")
    result = run.evaluation_ratio(SimpleNamespace(arch="dear-world-tiny", images=4, batch=2, repeats=1))
    assert result["ratio"] > 0 and set(result["reuse"]) == {"zeroshot", "dear_nomask"}
    assert all(ratio > 0 for ratio in result["reuse"].values())


def test_the_job_overhead_benchmark_measures_each_pair():
    bench = _script("job_overhead")
    result = {"load": bench.backbone_load("dear-world-tiny", repeats=1),
              "attention": bench.masked_attention("dear-world-tiny", repeats=1, batch=2),
              "import": {"plain": 2.0, "paused": 1.0}}  # two fresh interpreters: timed by `make bench` only
    assert all(value > 0 for pair in result.values() for value in pair.values())
    assert [row[0] for row in bench.rows(result)] == [
        f"a stage's imports as `dear` makes them / plain ({bench.STAGE}, then a full collection)",
        "load_backbone for a job's later seed / its first",
        "role-masked attention / the math kernel (a 3-D mask's fallback)"]


def test_the_demo_time_summary_adds_the_jobs_up(tmp_path):
    """benchmarks/demo_time.py on hand-made benchmark files: sums per stage and method, and the no-training bound."""
    header = "s\th:m:s\tmax_rss\tmax_vms\tmax_uss\tmax_pss\tio_in\tio_out\tmean_load\tcpu_time\n"
    times = {"world": 10, "backbone": 100, "profile": 10, "report": 10, "train/zeroshot/dsA": 4,
             "train/coop/dsA": 24, "train_transfer/coop": 40, "fuse/coop/dsA": 6, "evaluate/coop/dsA": 8,
             "evaluate_transfer/coop": 12}
    for job, seconds in times.items():
        path = tmp_path / f"{job}.benchmark.tsv"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(header + f"{seconds}\t0:00:{seconds:02d}\t100\t0\t0\t0\t0\t0\t0\t{seconds}\n")
    lines = _script("demo_time").summary(tmp_path, cores=2)
    assert "| train | 2 | 28 |" in lines and "| coop | 90 |" in lines
    # alone 130 s + (fuse and evaluate 26 s + 3 training jobs x 4 s) / 2 = 149 s
    assert lines[-1].startswith("- **with no training step at all: about 2.5 min**")
    for job, seconds in {"train_fewshot/zeroshot/dsA/shots1": 4, "train_fewshot/coop/dsA/shots1": 30}.items():
        path = tmp_path / f"{job}.benchmark.tsv"  # a few-shot study's training jobs count as training too
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(header + f"{seconds}\t0:00:{seconds:02d}\t100\t0\t0\t0\t0\t0\t0\t{seconds}\n")
    lines = _script("demo_time").summary(tmp_path, cores=2)
    assert "- of them training: 102 job-seconds in 5 jobs (a job that trains nothing: 4.0 s)" in lines


def test_the_text_prefix_benchmark_steps_each_method_both_ways():
    bench = _script("text_prefix")
    result = bench.compare("dear-world-tiny", classes=4, batch=2, rounds=1, methods=["coop", "cocoop"])
    assert set(result) == {"coop", "cocoop"} and all(row["ratio"] > 0 for row in result.values())
    from dear.methods import towers
    assert towers.SHARED_MIN == 2  # the switch is put back


def test_the_one_epoch_demo_is_the_demo_with_every_training_job_at_one_epoch():
    """demo_time.py --write-one-epoch (docs/performance.md): params.yaml but for the epochs of every trained job."""
    from dear.methods.recipe import resolve
    from dear.config.params import Params, read_yaml

    demo = read_yaml(ROOT / "params.yaml")
    one = _script("demo_time").one_epoch(demo)
    params = Params.model_validate(one)
    study = params.study
    jobs = [(m, d, "base_to_novel") for m in study.methods for d in study.base_to_novel] + \
        [(m, study.transfer_on.source, "transfer") for m in study.methods]
    epochs = {job: resolve(params.train.recipes, *job).get("epochs") for job in jobs}
    assert {value for (method, *_), value in epochs.items() if method != "zeroshot"} == {1}
    for raw in (demo, one):
        raw.pop("output_root"), raw["data"].pop("root"), raw["train"].pop("recipes")
    assert one == demo


def test_the_demo_time_tells_when_the_first_training_job_started():
    """From a Snakemake log: its Date: header to the first train job's [time] line (the cached world and backbone's
    gain, docs/engines.md)."""
    log = ("  Date: 2026-12-05 02:32:30\n  Workflow ID: x\n[Sat Dec  5 02:32:41 2026]\nlocalrule world:\n"
           "[Sat Dec  5 02:33:12 2026]\nlocalrule backbone:\n[Sat Dec  5 02:33:20 2026]\nrule prepare:\n"
           "[Sat Dec  5 02:33:25 2026]\nlocalrule train:\n    input: x\n")
    assert _script("demo_time").first_training(log) == 55.0
    assert _script("demo_time").first_training(log.replace("localrule train:", "rule report:")) is None



def test_the_training_step_benchmark_takes_each_method_s_few_shot_recipe():
    bench = _script("train_step")
    changes = bench.recipe_changes(TINY_DEPTHS)
    run = {shots: bench.interleaved("dear-world-tiny", classes=4, batch=2, rounds=1, warmup=0, device="cpu",
                                    methods=["tip_adapter_f", "clip_lora"], changes=changes, shots=shots)
           for shots in (None, 16)}
    assert {"tip_adapter_f", "clip_lora", "coop"} == run[16].keys() - {"threads"}
    assert run[16]["coop"]["trainable"] == 4 * run[None]["coop"]["trainable"]  # CoOp's few-shot context: 16, not 4
    assert run[16]["tip_adapter_f"]["trainable"] == bench.CACHE_SHOTS * 4 * 64  # the cache keys: 16 shots x 4 classes x 64



def test_the_training_step_benchmark_steps_tac_on_its_views_beside_one_view():
    bench = _script("train_step")
    result = bench.interleaved("dear-world-tiny", classes=4, batch=2, rounds=1, warmup=0, device="cpu",
                               methods=["tac"], changes=bench.recipe_changes(TINY_DEPTHS), views=4)
    assert {"tac", "tac@4", "coop"} == result.keys() - {"threads"}
    assert result["tac@4"]["trainable"] == result["tac"]["trainable"] and result["tac@4"]["median_s"] > 0

# A stand-in for MaxZanella/CLIP-LoRA's loralib with its interface (apply_lora walking the towers' resblocks,
# q_proj/k_proj/v_proj carrying w_lora_A [r, D] and w_lora_B [D, r], scaling alpha / sqrt(r)), for the harness only:
# the real one is the authors' checkout given to benchmarks/authors_step.py.
FAKE_LORALIB = '''
import math

import torch
import torch.nn.functional as F
from torch import nn


class LoRALinear(nn.Linear):
    def __init__(self, weight, bias, r, alpha):
        super().__init__(weight.shape[1], weight.shape[0])
        self.weight.data.copy_(weight)
        self.bias.data.copy_(bias)
        self.w_lora_A = nn.Parameter(torch.empty(r, weight.shape[1]))
        self.w_lora_B = nn.Parameter(torch.zeros(weight.shape[0], r))
        nn.init.kaiming_uniform_(self.w_lora_A, a=math.sqrt(5))
        self.scaling = alpha / math.sqrt(r)

    def forward(self, x):
        return super().forward(x) + x @ (self.w_lora_B @ self.w_lora_A).T * self.scaling


class Attention(nn.Module):
    def __init__(self, mha, r, alpha):
        super().__init__()
        D, self.heads = mha.embed_dim, mha.num_heads
        for index, m in enumerate("qkv"):
            rows = slice(index * D, (index + 1) * D)
            setattr(self, m + "_proj", LoRALinear(mha.in_proj_weight.data[rows], mha.in_proj_bias.data[rows], r, alpha))
        self.proj = mha.out_proj

    def forward(self, query, key, value, need_weights=False, attn_mask=None, **kwargs):
        B, T, D = query.shape
        q, k, v = (getattr(self, m + "_proj")(query).view(B, T, self.heads, -1).transpose(1, 2) for m in "qkv")
        mask = None if attn_mask is None else attn_mask.to(query.dtype)
        heads = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        return self.proj(heads.transpose(1, 2).reshape(B, T, D)), None


def apply_lora(args, clip_model):
    for blocks in (clip_model.transformer.resblocks, clip_model.visual.transformer.resblocks):
        for block in blocks:
            block.attn = Attention(block.attn, args.r, args.alpha)


def mark_only_lora_as_trainable(model):
    for name, p in model.named_parameters():
        p.requires_grad = "lora_" in name


def get_lora_parameters(model):
    return [p for name, p in model.named_parameters() if "lora_" in name]
'''


def test_the_authors_step_benchmark_runs_their_modules_beside_ours(tmp_path):
    from types import SimpleNamespace

    (tmp_path / "loralib").mkdir()
    (tmp_path / "loralib" / "utils.py").write_text(FAKE_LORALIB)
    bench = _script("authors_step")
    args = SimpleNamespace(arch="dear-world-tiny", classes=4, batch=2, device="cpu", set=[], shots=4, warmup=0,
                           rounds=1)
    result = bench.compare("clip_lora", tmp_path, args)
    assert result["trainable_ours"] == result["trainable_authors"] > 0
    agreement = result["agreement"]
    assert agreement["max |cosine difference|"] < 1e-5 < agreement["the update moves the cosines"]  # nonzero update
    assert result["ours_median_s"] > 0 and result["authors_median_s"] > 0
    assert result["note"].endswith("authors 24")  # dear-world-tiny's context length


def test_the_authors_step_benchmark_names_a_folder_that_is_not_their_checkout(tmp_path):
    import pytest
    from types import SimpleNamespace

    bench = _script("authors_step")
    args = SimpleNamespace(arch="dear-world-tiny", classes=4, batch=2, device="cpu", set=[], shots=4, warmup=0,
                           rounds=1)
    for method, repository in (("clip_lora", "MaxZanella/CLIP-LoRA"), ("mmrlpp", "yunncheng/MMRL"),
                               ("tac", "FushengHao/TAC"), ("tip_adapter_f", "gaopengcuhk/Tip-Adapter")):
        with pytest.raises(SystemExit, match=f"{tmp_path}: no .* here; give a checkout of {repository}"):
            bench.compare(method, tmp_path, args)


# A stand-in for gaopengcuhk/Tip-Adapter's main.py and utils.py with their interface (run_tip_adapter_F: the keys as
# an nn.Linear trained by AdamW(eps 1e-4) under a cosine, saved when the test accuracy rises, reloaded, then
# search_hp over beta (outer) and alpha), for the harness only: the real ones are the checkout given to it.
FAKE_TIP_UTILS = """
import torch


def cls_acc(output, target, topk=1):
    return 100 * float((output.argmax(1) == target).float().sum()) / target.shape[0]


def search_hp(cfg, cache_keys, cache_values, features, labels, clip_weights, adapter=None):
    betas = [i * (cfg['search_scale'][0] - 0.1) / cfg['search_step'][0] + 0.1 for i in range(cfg['search_step'][0])]
    alphas = [i * (cfg['search_scale'][1] - 0.1) / cfg['search_step'][1] + 0.1 for i in range(cfg['search_step'][1])]
    best, choice = 0, (0, 0)
    for beta in betas:
        for alpha in alphas:
            cache = ((-1) * (beta - beta * adapter(features))).exp() @ cache_values
            acc = cls_acc(100. * features @ clip_weights + cache * alpha, labels)
            if acc > best:
                best, choice = acc, (beta, alpha)
    return choice
"""
FAKE_TIP_MAIN = """
import torch
import torch.nn as nn
import torch.nn.functional as F
from utils import *


def run_tip_adapter_F(cfg, cache_keys, cache_values, val_features, val_labels, test_features, test_labels,
                      clip_weights, clip_model, train_loader_F):
    adapter = nn.Linear(cache_keys.shape[0], cache_keys.shape[1], bias=False).to(clip_model.dtype).cuda()
    adapter.weight = nn.Parameter(cache_keys.t())
    optimizer = torch.optim.AdamW(adapter.parameters(), lr=cfg['lr'], eps=1e-4)
    scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, cfg['train_epoch'] * len(train_loader_F))
    beta, alpha = cfg['init_beta'], cfg['init_alpha']
    for images, target in train_loader_F:
        features = clip_model.encode_image(images)
        logits = 100. * features @ clip_weights + ((-1) * (beta - beta * adapter(features))).exp() @ cache_values * alpha
        loss = F.cross_entropy(logits, target)
        cls_acc(logits, target)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        scheduler.step()
    logits = 100. * test_features @ clip_weights + ((-1) * (beta - beta * adapter(test_features))).exp() @ cache_values * alpha
    if cls_acc(logits, test_labels) > 0:
        torch.save(adapter.weight, cfg['cache_dir'] + "/best_F_" + str(cfg['shots']) + "shots.pt")
    adapter.weight = torch.load(cfg['cache_dir'] + "/best_F_" + str(cfg['shots']) + "shots.pt")
    search_hp(cfg, cache_keys, cache_values, val_features, val_labels, clip_weights, adapter=adapter)
"""


def test_the_authors_step_benchmark_runs_their_tip_adapter_f_beside_ours(tmp_path):
    from types import SimpleNamespace

    (tmp_path / "utils.py").write_text(FAKE_TIP_UTILS)
    (tmp_path / "main.py").write_text(FAKE_TIP_MAIN)
    bench = _script("authors_step")
    args = SimpleNamespace(arch="dear-world-tiny", classes=4, batch=2, device="cpu",
                           set=["tip_adapter_f.search_step=[20, 10]"], shots=4, warmup=0, rounds=1)
    result = bench.compare("tip_adapter_f", tmp_path, args)
    agreement = result["agreement"]
    assert agreement["keys after one step"] < 1e-6 < agreement["the step moves the keys"]
    assert agreement["tip_logits of their 200 searched pairs"] < 1e-4
    theirs, ours = agreement["search choice (beta, alpha): theirs, ours"]
    assert theirs == ours != (0.1, 0.1)  # the same pair, not merely the first
    assert "ours_median_s" not in result  # no step cost: their step is one linear layer on frozen features


def test_the_tac_terms_benchmark_weights_each_term_by_the_run_s_recipe(tmp_path, monkeypatch, capsys):
    """benchmarks/tac_terms.py on hand-made train logs: TAC's L1 terms times the weights its log's provenance
    records (2 and 3 here, not the authors' 20 and 25), PromptSRC's regularizers as loss - CE, and the figure."""
    import json

    import pyarrow as pa
    import pyarrow.parquet as pq

    def log(method, dataset, seed, columns, recipe):
        table = pa.table({"step": list(range(12)), **{name: [value] * 12 for name, value in columns.items()}})
        table = table.replace_schema_metadata({b"dear.provenance": json.dumps({"params": {"recipe": recipe}})})
        path = tmp_path / "runs" / method / dataset / "train" / f"seed{seed}" / "train_log.parquet"
        path.parent.mkdir(parents=True)
        pq.write_table(table, path)

    for dataset in ("world_objects", "world_objects_sketch"):
        for seed in (1, 2):
            log("tac", dataset, seed, {"loss": 2.0 + 2 * 0.1 + 3 * 0.2, "loss_ce": 2.0, "loss_txt": 0.1,
                                       "loss_img": 0.2}, {"text_loss_weight": 2.0, "image_loss_weight": 3.0})
            log("promptsrc", dataset, seed, {"loss": 1.5, "loss_ce": 1.25, "loss_txt": 0.0, "loss_img": 0.0}, {})
    out = tmp_path / "terms.png"
    monkeypatch.setattr("sys.argv", ["tac_terms.py", str(tmp_path), "--out", str(out)])
    _script("tac_terms").main()
    printed = capsys.readouterr().out
    assert "world_objects          tac        2 x text L1    first 10 steps 0.200  last 10 0.200" in printed
    assert "world_objects_sketch   tac        3 x image L1   first 10 steps 0.600  last 10 0.600" in printed
    assert "world_objects          promptsrc  regularizers   first 10 steps 0.250  last 10 0.250" in printed
    assert out.read_bytes().startswith(b"\x89PNG")
