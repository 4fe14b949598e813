# Every target sets up what it needs: a fresh clone with only Python works.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-$(shell cksum pyproject.toml | cut -d' ' -f1)

.PHONY: venv test demo bench fuzz e2e lint clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --disable-pip-version-check --upgrade pip
	$(BIN)/python -m pip install -q --disable-pip-version-check -e '.[test]'
	rm -f $(VENV)/.installed-*
	touch $(STAMP)

venv: $(STAMP)

test: venv
	$(BIN)/python -m pytest -q

demo: venv
	$(BIN)/python demo/run_demo.py

lint: venv
	$(BIN)/ruff check gym_instrument tests benchmarks demo
	$(BIN)/ruff format --check gym_instrument tests benchmarks demo
	$(BIN)/mypy

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache .hypothesis

bench: venv
	$(BIN)/python benchmarks/run.py

fuzz: venv
	GYM_FUZZ_EXAMPLES=20000 $(BIN)/python -m pytest -q tests/reliability -k property

e2e:
	$(PYTHON) e2e/run.py
