# Two commands do all the set-up on a fresh machine:
#   make run    installs what is missing, then runs the main job (attnsim run csm)
#   make test   installs what is missing, then runs the tests
VENV ?= .venv
PY := $(VENV)/bin/python
export HF_HUB_OFFLINE := 1
export TOKENIZERS_PARALLELISM := false

.PHONY: install run test clean

install: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	python3 -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install -e ".[test]"
	touch $@

run: install
	$(VENV)/bin/attnsim run csm $(ARGS)

test: install
	$(PY) -m pytest $(PYTEST_ARGS)

clean:
	rm -rf $(VENV) mlruns
