# Sourced by the whole-study timings (demo_on_off.sh, demo_2026.sh): a fresh clone of a commit that runs this
# checkout's virtual environment, and one Snakemake study in it timed under /usr/bin/time on its own output cache.
# Sets REPO and VENV; exits with one error line when the environment is not installed.
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${VENV:-$REPO/.venv}"  # another environment: VENV=... (its dear must be this commit's)
test -x "$VENV/bin/snakemake" || { echo "error: $VENV/bin/snakemake not found: run make install first" >&2; exit 1; }

# fresh_clone COMMIT DEST: DEST a clone of COMMIT with this checkout's .venv linked in (nothing installed)
fresh_clone() {
    git clone --quiet --no-checkout "$REPO" "$2"
    git -C "$2" checkout --quiet "$1"
    ln -s "$VENV" "$2/.venv"
}

# timed_study CLONE CACHE OUT [SNAKEMAKE ARGS...]: `make demo`'s Snakemake command in CLONE (its own tree first on
# the path, CACHE its output cache), wall seconds to OUT.seconds, its output to OUT.log; one error line if it fails
timed_study() {
    local clone="$1" cache="$2" out="$3"
    shift 3
    mkdir -p "$cache"
    (cd "$clone" && SNAKEMAKE_OUTPUT_CACHE="$cache" PYTHONPATH="$clone" HF_HUB_OFFLINE=1 DVC_NO_ANALYTICS=1 \
        PATH="$VENV/bin:$PATH" /usr/bin/time -f "%e" -o "$out.seconds" \
        "$VENV/bin/snakemake" --cores 2 --scheduler greedy --cache "$@" > "$out.log" 2>&1) \
        || { echo "error: the run in $clone failed: see $out.log" >&2; exit 1; }
}

# minutes FILE: the seconds FILE holds as "M min S s"
minutes() {
    python3 -c "m, r = divmod(round(float(open('$1').read())), 60); print(f'{m} min {r} s')"
}
