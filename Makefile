# Entry points: `make smoke` runs every stage on a tiny study (its time: docs/configs.md), `make demo` the pipeline on the
# embedded default, `make demo-fewshot` its few-shot figure, `make demo-2026` the demo with MMRL++ and TAC, `make demo-roles`
# the baselines with and without DeAR's head roles, `make test` the test suite. Each creates .venv and installs on first use.
PY      := .venv/bin/python
STAMP   := .venv/.installed
export HF_HUB_OFFLINE := 1
export DVC_NO_ANALYTICS := 1
export PATH := $(CURDIR)/.venv/bin:$(PATH)
# One embedded world and backbone per machine: Snakemake's between-workflow output cache (on in every run:
# profiles/default) keeps the outputs of the rules marked `cache: True` (world, backbone) under their provenance
# hash, and restores them into any study or clone that needs the same; DVC's stages find them there too
# (docs/engines.md). `make clean` leaves it; `make clean-cache` empties it.
export SNAKEMAKE_OUTPUT_CACHE ?= $(HOME)/.cache/dear/snakemake

.PHONY: demo demo-fewshot demo-2026 demo-roles smoke test test-slow test-cluster bench install clean clean-cache

$(STAMP): pyproject.toml constraints.txt
	test -x $(PY) || python3 -m venv .venv
	$(PY) -m pip install -q --upgrade pip
	# torch and torchvision first, in one command, at the tested versions (constraints.txt):
	# pip takes the matching pair from this machine's disk
	$(PY) -m pip install -q -c constraints.txt torch torchvision
	$(PY) -m pip install -q -c constraints.txt -e '.[test]'
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	mkdir -p $(SNAKEMAKE_OUTPUT_CACHE)
	.venv/bin/snakemake --cores 2 --scheduler greedy
	@echo "The report is in report/results.md (pictures beside it: report/*.png)."

# the demo's few-shot figure (configs/demo-fewshot.yaml, written from params.yaml): every demo method on 1, 4 and 16
# shots of every class of world_objects_sketch, one seed; its own output root (demo-fewshot/), the demo's world values.
demo-fewshot: $(STAMP)
	mkdir -p $(SNAKEMAKE_OUTPUT_CACHE)
	.venv/bin/snakemake --cores 2 --scheduler greedy --configfile configs/demo-fewshot.yaml
	@echo "The few-shot report is in demo-fewshot/report/results.md."

# the demo with MMRL++ and TAC beside MMRL (configs/demo-2026.yaml, written from params.yaml): the demo's study, world,
# backbone (from the machine's cache) and recipes, two more methods; its own output root (demo-2026/).
demo-2026: $(STAMP)
	mkdir -p $(SNAKEMAKE_OUTPUT_CACHE)
	.venv/bin/snakemake --cores 2 --scheduler greedy --configfile configs/demo-2026.yaml
	@echo "The report is in demo-2026/report/results.md."

# MaPLe, PromptSRC, MMRL and CLIP-LoRA each with and without DeAR's head roles (configs/demo-roles.yaml, written from
# params.yaml): the demo's world, backbone, profile and recipes; its own output root (demo-roles/). About an hour on
# 2 cores after `make demo` (CLIP-LoRA's two rows are two thirds of it; docs/results.md).
demo-roles: $(STAMP)
	mkdir -p $(SNAKEMAKE_OUTPUT_CACHE)
	.venv/bin/snakemake --cores 2 --scheduler greedy --configfile configs/demo-roles.yaml
	@echo "The report is in demo-roles/report/results.md (what the roles change: its last table)."

# every stage of every protocol on the tiny world and backbone (its measured time: docs/configs.md): numbers that mean nothing.
# The greedy scheduler (demo and smoke): Snakemake's default solves an ILP before each job (~20 s in all for
# the smoke's 62 here); greedy follows the rules' priorities the same way.
smoke: $(STAMP)
	mkdir -p $(SNAKEMAKE_OUTPUT_CACHE)
	.venv/bin/snakemake --cores 2 --scheduler greedy --configfile configs/smoke.yaml
	@echo "Every stage ran: smoke/report/results.md (its numbers mean nothing; make demo runs the demo study)."

# the suite in two parts (docs/testing.md): `test` everything but the end-to-end runs marked `slow` (~5 minutes on
# 2 cores), `test-slow` those (whole tiny studies through both engines, ~15-19 minutes); CI runs both
test: $(STAMP)
	$(PY) -m pytest -n 2 --dist loadgroup -q -m "not slow and not cluster"

test-slow: $(STAMP)
	$(PY) -m pytest -n 2 --dist loadgroup -q -m "slow and not cluster"

# The pipeline on a real one-node Slurm (root; installs slurm-wlm + munge with apt-get on first use).
# Slurm is stopped again even when the tests fail or are interrupted.
test-cluster: $(STAMP)
	scripts/slurm-local.sh install
	scripts/slurm-local.sh start
	trap 'scripts/slurm-local.sh stop' EXIT; trap 'exit 130' INT TERM; \
	SLURM_CONF=$${SLURM_LOCAL_DIR:-/tmp/dear-slurm}/etc/slurm.conf \
	timeout --foreground -s INT 900 $(PY) -m pytest -m cluster -q tests/cluster

bench: $(STAMP)
	$(PY) benchmarks/run.py

# the demo's outputs (data/, runs/ and transfer/ keep their .gitignore: dvc.yaml needs the folders); the cache stays
clean:
	rm -rf .snakemake .dear world backbone roles report logs checkpoints dvc_plots .dvc/tmp .dvc/cache data/* runs/* transfer/* results/* smoke

# the machine's cache of worlds and backbones (every study and clone that used it draws and trains them anew)
clean-cache:
	rm -rf $(SNAKEMAKE_OUTPUT_CACHE)
