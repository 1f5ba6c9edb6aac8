#!/usr/bin/env bash
# `make smoke` with the warm server, then without it (DEAR_SERVER=off: every job its own process), each in a fresh
# clone of COMMIT on the machine's output cache (world and backbone made once per machine, as a user has them), one
# after the other; then every output of the two runs compared byte for byte, and each run's median job time from
# Snakemake's benchmark files. Wall-clock values (train_log's seconds, and the digests that hash them) are not
# compared (tests/wall_clock.py).
#
#   benchmarks/smoke_on_off.sh [COMMIT] [OUT]        (default HEAD, benchmarks/out/smoke_on_off)
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/fresh_clone.sh"
COMMIT="$(git -C "$REPO" rev-parse --short "${1:-HEAD}")"
OUT="$(mkdir -p "${2:-$REPO/benchmarks/out/smoke_on_off}" && cd "${2:-$REPO/benchmarks/out/smoke_on_off}" && pwd)"
CACHE="${SNAKEMAKE_OUTPUT_CACHE:-$HOME/.cache/dear/snakemake}"
SOCKETS="$(mktemp -d)"  # this run's own servers: the first job of the served run starts one
trap 'DEAR_SERVER_DIR="$SOCKETS" "$VENV/bin/dear" server stop >/dev/null 2>&1 || true' EXIT

for side in on off; do
    rm -rf "$OUT/$side"
    fresh_clone "$COMMIT" "$OUT/$side"
    DEAR_SERVER="$side" DEAR_SERVER_DIR="$SOCKETS" timed_study "$OUT/$side" "$CACHE" "$OUT/$side-run" \
        --configfile configs/smoke.yaml
done

"$VENV/bin/python" - "$OUT" "$REPO" <<'EOF'
import statistics, sys
from pathlib import Path

out = Path(sys.argv[1])
sys.path.insert(0, sys.argv[2])
from tests.wall_clock import comparable, digests_wall_clock  # train_log's seconds: wall time, in any two runs

def outputs(side):
    root = out / side / "smoke"
    return {str(p.relative_to(root)): p for p in root.rglob("*")
            if p.is_file() and not p.is_symlink() and p.parts[len(root.parts)] != "logs"
            and not digests_wall_clock(p)}
on, off = outputs("on"), outputs("off")
differ = sorted(name for name in on.keys() & off.keys() if comparable(on[name]) != comparable(off[name]))
only = sorted(on.keys() ^ off.keys())
for side in ("on", "off"):
    seconds = float((out / f"{side}-run.seconds").read_text())
    jobs = [float(line.split("\t")[0]) for path in (out / side / "smoke" / "logs").rglob("*.benchmark.tsv")
            for line in path.read_text().splitlines()[1:2]]
    print(f"server {side}: {int(seconds // 60)} min {round(seconds % 60)} s, {len(jobs)} jobs with a benchmark "
          f"file, median job {statistics.median(jobs):.2f} s")
print(f"outputs compared: {len(on.keys() & off.keys())}, differing: {len(differ)} {differ[:10]}, "
      f"in one run only: {len(only)} {only[:10]}")
EOF
