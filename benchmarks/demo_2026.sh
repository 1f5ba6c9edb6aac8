#!/usr/bin/env bash
# The cold times of `make demo-2026` and, after it on the same output cache, `make demo-fewshot` (docs/performance.md,
# "The demo's time"): a fresh clone of COMMIT with an empty Snakemake output cache runs demo-2026's command under
# /usr/bin/time (world and backbone built, nothing cached), then demo-fewshot's, which finds the demo's world and
# backbone in that cache (the same values) and trains every built-in method on 1, 4 and 16 shots.
# The clone runs this checkout's virtual environment with its own tree first on the path (nothing installed or timed
# besides the studies).
#
#   benchmarks/demo_2026.sh [COMMIT [SCRATCH]]     # default: HEAD, /tmp/dear-demo-2026 (emptied first)
#
# Prints each study's wall time and job-seconds per stage and method (benchmarks/demo_time.py). Compare demo-2026's
# with `make demo`'s cold time on the same machine (benchmarks/demo_on_off.sh, its "on" side): the 10% the demo may
# grow by (issue 38) is that ratio. About 40 + 25 minutes on 2 cores.
set -euo pipefail
source "$(dirname "$0")/fresh_clone.sh"
COMMIT="$(git -C "$REPO" rev-parse "${1:-HEAD}")"
SCRATCH="${2:-/tmp/dear-demo-2026}"
rm -rf "$SCRATCH" && mkdir -p "$SCRATCH"
clone="$SCRATCH/clone"
fresh_clone "$COMMIT" "$clone"

for study in demo-2026 demo-fewshot; do
    echo "$(date '+%F %T') make $study in $clone"
    timed_study "$clone" "$SCRATCH/cache" "$SCRATCH/$study" --configfile "configs/$study.yaml"
done

for study in demo-2026 demo-fewshot; do
    echo "== make $study: $(minutes "$SCRATCH/$study.seconds") on $(git -C "$clone" rev-parse --short HEAD)" \
         "($(grep -c 'Finished jobid' "$SCRATCH/$study.log") jobs)"
    (cd "$clone" && PYTHONPATH="$clone" "$VENV/bin/python" benchmarks/demo_time.py --logs "$study/logs" --cores 2)
done
