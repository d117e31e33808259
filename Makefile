# Every target installs what it needs into .venv first, so a fresh clone works.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# Bytecode is written (__pycache__/, ignored by git), whatever the environment says: without it every
# process the suite starts compiles the project's modules again (each xdist worker, Lambda container,
# worker, CLI and moto server), and pytest rewrites every test file again in each worker: collecting
# tests/backends cost 5.1 CPU-s without, 1.6 with; importing the entry points 0.51 CPU-s, 0.31 with.
# (The layer's build copies no __pycache__: shared/build_layer.py compiles its own.)
unexport PYTHONDONTWRITEBYTECODE

.PHONY: test lint typecheck unit tiers bench demo chaos build dev clean openapi cost

# The test tiers (tests/unit/conftest.py says what keeps unit fast). `make test` runs the unit tier
# first (beside the linters), then the server tiers side by side; each prints its wall time
# ("tier unit: 41.2 s, ...").
# Two cores run the server tiers at once, so a tier's budget is its CPU more than its wall time: what
# each test file costs, with every process it starts, is `.ci/cpu_per_file.py tests/<tier>`.
# The server tiers' fixtures start their servers on free ports, per xdist worker; a file's tests stay
# on one worker (module fixtures start once). Every moto server and Lambda container is a fork of a
# zygote that the process (an xdist worker, a `sluice dev`) keeps until it exits: after its first
# stack, a stack's two moto servers and its containers' zygote cost ~0.35 CPU-s to start, not ~2.6
# (sluice_dev/local/forkserver.py). Two lanes, each taking the next tier as it frees. In this
# order they end together (fresh clone, 3132a3e: stack 247 s, backends 202, chaos 162, tooling 107,
# infra 99): stack then chaos in one lane (~410 s), tooling, backends and infra in the other (~410 s);
# the order before (stack, infra, tooling | backends, chaos) ended at 452 s, tooling alone at the end.
# tooling goes early: its browser tests mostly wait, which the other lane's CPU-bound stack fills.
# Three lanes (TIER_LANES=3) were tried on a fresh clone in session 38: 616 s against 604 s for two;
# each tier's CPU rose under the contention (stack 269 -> 297 CPU-s, infra 149 -> 173).
PYTEST := $(BIN)/pytest -q
SERVER_TIERS := stack tooling backends chaos infra
XDIST := -n 2 --dist loadfile
# infra and chaos: their files in their conftest's order (the long files first, one per worker:
# infra's two sam builds, chaos's whole-pipeline runs; tests/ordering.py)
XDIST_infra := -n 2 --dist loadfile --no-loadscope-reorder
XDIST_chaos := -n 2 --dist loadfile --no-loadscope-reorder
# pytest plugins a tier has no test for, kept out of its processes (a controller and two workers each):
# schemathesis' plugin imports hypothesis and trio (only tests/backends/test_gateway_schemathesis.py needs
# it), anyio's imports trio (no test is anyio's), and hypothesis' imports hypothesis at every controller's
# summary. Collecting tests/stack, bytecode cached: 1.9 -> 1.6 CPU-s a process.
NO_PLUGINS := -p no:anyio -p no:schemathesis -p no:hypothesispytest
PLUGINS_unit := -p no:anyio -p no:schemathesis
PLUGINS_backends := -p no:anyio
TIER_LANES ?= 2

$(BIN)/python:
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

# The distribution was named `sluice` until issue 31 (now `sluice-queue`, pyproject.toml): a .venv made
# before keeps the old name's entry point and metadata unless it goes first.
$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/pip uninstall -q -y sluice 2>/dev/null || true
	$(BIN)/pip install -q -e '.[dev]'
	touch $(STAMP)

install: $(STAMP)

lint: $(STAMP)
	$(BIN)/ruff check shared functions infra tests benchmarks
	$(BIN)/lint-imports  # the house's arrows (pyproject.toml [tool.importlinter], docs/design.md)

typecheck: $(STAMP)
	$(BIN)/mypy

# The unit tier runs first, beside lint and typecheck (ruff, lint-imports and mypy take one core for
# about as long as unit's two workers take); the server tiers start once all three have passed.
test: $(STAMP)
	@$(MAKE) --no-print-directory -j3 -Otarget lint typecheck unit
	@$(MAKE) --no-print-directory -k -j$(TIER_LANES) -Otarget tiers

unit: $(STAMP)
	@.ci/tier unit $(PYTEST) $(PLUGINS_unit) $(XDIST) tests/unit

tiers: $(SERVER_TIERS:%=tier-%)

$(SERVER_TIERS:%=tier-%): tier-%: $(STAMP)
	@.ci/tier $* $(PYTEST) $(or $(PLUGINS_$*),$(NO_PLUGINS)) $(or $(XDIST_$*),$(XDIST)) tests/$*

bench: $(STAMP)
	@for f in benchmarks/bench_*.py; do $(BIN)/python $$f || exit 1; done

demo: $(STAMP)
	$(BIN)/sluice demo --jobs 2000

chaos: $(STAMP)
	$(BIN)/sluice chaos --runtime lambda --jobs 10000 --duration 600 --seed 1 --operator

# openapi.json, the REST API's document for other languages' clients, from the routes and models
# (sluice_dev/openapi.py); tests/tooling/test_openapi_file.py fails while it is stale.
openapi: $(STAMP)
	$(BIN)/python -m sluice_dev.openapi openapi.json

# docs/cost.md's generated tables, from the cost model (shared/sluice_dev/cost: prices.toml, the profiles,
# the model); tests/unit/test_cost_doc.py fails while the doc and the model disagree.
cost: $(STAMP)
	$(BIN)/python -m sluice_dev.cost docs/cost.md

build: $(STAMP)
	PYENV_VERSION=3.12.1:3.11.7 PATH=$(CURDIR)/$(BIN):$$PATH sam build --template template.yaml

clean:
	rm -rf $(VENV) .sluice .aws-sam
