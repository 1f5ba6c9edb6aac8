#!/usr/bin/env bash
# The demo's cold time with compute.reproducible on and then off, one after the other on this machine
# (docs/performance.md, "The demo's time"). Each side is a fresh clone of COMMIT with an empty Snakemake output
# cache, running `make demo`'s command under /usr/bin/time; the off side's params.yaml says
# `compute.reproducible: false` and nothing else (its pretraining stays fp32, as the demo's params say).
# The clones run this checkout's virtual environment with their own tree first on the path (nothing is installed
# or timed besides the study).
#
#   benchmarks/demo_on_off.sh [COMMIT [SCRATCH]]     # default: HEAD, /tmp/dear-demo-on-off (emptied first)
#
# Prints each side's wall time, the job-seconds per stage (benchmarks/demo_time.py) and whether its
# report/results.csv is byte-identical to docs/demo/results.csv. About 25 + 25 minutes on 2 cores.
set -euo pipefail
source "$(dirname "$0")/fresh_clone.sh"
COMMIT="$(git -C "$REPO" rev-parse "${1:-HEAD}")"
SCRATCH="${2:-/tmp/dear-demo-on-off}"
rm -rf "$SCRATCH" && mkdir -p "$SCRATCH"

for side in on off; do
    clone="$SCRATCH/$side"
    fresh_clone "$COMMIT" "$clone"
    if [ "$side" = off ]; then
        sed -i 's/^  reproducible: true /  reproducible: false/' "$clone/params.yaml"
        grep -q '^  reproducible: false' "$clone/params.yaml" || { echo "error: params.yaml: no compute.reproducible line to turn off" >&2; exit 1; }
    fi
    echo "$(date '+%F %T') $side: make demo in $clone"
    timed_study "$clone" "$SCRATCH/$side-cache" "$SCRATCH/$side"
done

for side in on off; do
    clone="$SCRATCH/$side"
    if cmp -s "$clone/report/results.csv" "$clone/docs/demo/results.csv"; then same="byte-identical to"; else same="differs from"; fi
    echo "== compute.reproducible $side: $(minutes "$SCRATCH/$side.seconds")" \
         "on $(git -C "$clone" rev-parse --short HEAD); report/results.csv $same docs/demo/results.csv"
    (cd "$clone" && PYTHONPATH="$clone" "$VENV/bin/python" benchmarks/demo_time.py --logs logs --cores 2)
done
python3 -c "print(f'on / off: {float(open(\"$SCRATCH/on.seconds\").read()) / float(open(\"$SCRATCH/off.seconds\").read()):.2f}x')"
