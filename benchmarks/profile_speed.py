"""Profile pass vs plain `encode_image`, on the same images and model, in one run.

Prints images/s of each, their ratio (target <= 1.5x) and the peak memory of
the profile pass for M and 4M images, each in a fresh process (memory must
not grow with the number of images: the pass streams and keeps only
per-head sums). Images are random tensors made batch by batch, so the input
takes no memory either. Time is the best of `--repeats` alternating rounds.

    python benchmarks/profile_speed.py                      # embedded arch (dear-world), random weights
    python benchmarks/profile_speed.py --arch ViT-B-16 --images 64 --batch 16
    python benchmarks/profile_speed.py --arch ViT-B-16 --device cuda --images 2048 --batch 128 --texts   # gpu.sh
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time

import torch


DEVICE = "cpu"


def batches(n_images: int, batch: int, size: int, seed: int = 0):
    generator = torch.Generator().manual_seed(seed)
    for start in range(0, n_images, batch):
        yield torch.randn(min(batch, n_images - start), 3, size, size, generator=generator).to(DEVICE)


def _done() -> None:
    """Wait for queued GPU work so a timing covers it."""
    if DEVICE == "cuda":
        torch.cuda.synchronize()


def make_model(arch: str):
    import open_clip

    import dear.model.clip  # noqa: F401  (registers the embedded architectures)

    torch.manual_seed(0)
    model = open_clip.create_model(arch, pretrained=None).eval().to(DEVICE)
    return model, model.visual.image_size[0] if isinstance(model.visual.image_size, tuple) else model.visual.image_size


@torch.no_grad()
def plain_pass(model, args, size) -> float:
    start = time.perf_counter()
    for images in batches(args.images, args.batch, size):
        model.encode_image(images)
    _done()
    return time.perf_counter() - start


@torch.no_grad()
def recomposed_pass(model, args, size) -> float:
    """The same forward through dear's recomposed blocks (SDPA), without the decomposition."""
    from dear.model import internals

    start = time.perf_counter()
    for images in batches(args.images, args.batch, size):
        internals.encode_image(model, images)
    _done()
    return time.perf_counter() - start


@torch.no_grad()
def profile_pass(model, args, size) -> float:
    from dear.model.decompose import head_statistics

    start = time.perf_counter()
    stats = head_statistics(model, batches(args.images, args.batch, size), args.layers)
    stats.covariance  # the pass is complete once its statistics are
    _done()
    return time.perf_counter() - start


@torch.no_grad()
def text_passes(model, arch: str, repeats: int, batch: int = 256) -> dict:
    """Embedding the packaged text bank: dear's (trimmed padding, on the model's device) vs plain encode_text."""
    import open_clip

    from dear.model.textbank import load_bank
    from dear.stages.profile import embed_texts

    texts = list(load_bank("default", ["color", "shape", "texture", "object", "position", "scene", "count", "style",
                                       "material", "action", "lighting", "weather", "size"]).texts)
    tokenizer = open_clip.get_tokenizer(arch)

    def plain() -> None:
        for start in range(0, len(texts), batch):
            model.encode_text(tokenizer(texts[start:start + batch]).to(DEVICE))
        _done()

    def dear() -> None:
        embed_texts(model, tokenizer, texts, batch)
        _done()

    times = {"plain": [], "dear": []}
    plain()  # warm-up
    for _ in range(repeats):
        for name, function in (("plain", plain), ("dear", dear)):
            start = time.perf_counter()
            function()
            times[name].append(time.perf_counter() - start)
    return {"texts": len(texts), **{name: min(values) for name, values in times.items()}}


def memory_child(args) -> None:
    """Run the profile pass only and print peak RSS (MiB)."""
    model, size = make_model(args.arch)
    profile_pass(model, args, size)
    print(json.dumps({"peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))


def peak_memory(args, n_images: int) -> float:
    command = [sys.executable, __file__, "--memory-child", "--arch", args.arch, "--images", str(n_images),
               "--batch", str(args.batch), "--layers", str(args.layers), "--threads", str(args.threads)]
    output = subprocess.run(command, check=True, capture_output=True, text=True).stdout.strip().splitlines()[-1]
    return json.loads(output)["peak_rss_mib"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--arch", default="dear-world", help="open_clip architecture (random weights)")
    parser.add_argument("--images", type=int, default=512)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--layers", type=int, default=4, help="profiled layers (profile.layers)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--texts", action="store_true", help="also time embedding the packaged text bank")
    parser.add_argument("--memory-child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    global DEVICE
    DEVICE = args.device
    torch.set_num_threads(args.threads)
    if args.memory_child:
        return memory_child(args)
    model, size = make_model(args.arch)
    plain_pass(model, args, size)  # warm-up
    plain, recomposed, profile = [], [], []
    for _ in range(args.repeats):
        plain.append(plain_pass(model, args, size))
        recomposed.append(recomposed_pass(model, args, size))
        profile.append(profile_pass(model, args, size))
    ratio = min(profile) / min(plain)
    print(f"{args.arch}: {args.images} images, batch {args.batch}, {args.layers} profiled layers, "
          f"{args.threads} threads")
    print(f"plain encode_image : {args.images / min(plain):8.1f} images/s")
    print(f"recomposed forward : {args.images / min(recomposed):8.1f} images/s (dear.model.internals, no decomposition)")
    print(f"profile pass       : {args.images / min(profile):8.1f} images/s")
    print(f"ratio profile/plain: {ratio:8.2f}x  (target <= 1.5x)")
    print(f"ratio profile/recomposed forward: {min(profile) / min(recomposed):8.2f}x")
    if args.texts:
        texts = text_passes(model, args.arch, args.repeats)
        print(f"text bank ({texts['texts']} texts): plain encode_text {texts['texts'] / texts['plain']:8.1f} texts/s, "
              f"dear's embed_texts {texts['texts'] / texts['dear']:8.1f} texts/s, "
              f"ratio dear/plain {texts['dear'] / texts['plain']:.2f}x")
    if args.device == "cuda":
        print(f"peak GPU memory: {torch.cuda.max_memory_allocated() / 2**20:.0f} MiB")
        return
    small, large = peak_memory(args, args.images), peak_memory(args, 4 * args.images)
    print(f"peak RSS of the profile pass: {small:.0f} MiB for {args.images} images, "
          f"{large:.0f} MiB for {4 * args.images} images")


if __name__ == "__main__":
    main()
