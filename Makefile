# Every target sets up what it needs: a fresh clone with only Python works.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-$(shell cksum pyproject.toml | cut -d' ' -f1)

.PHONY: venv test demo bench bench-e2e bench-e2e-smoke bench-e2e-profile fuzz e2e e2e-nemo-gym e2e-verifiers lint clean ui-venv demo-ui demo-ui-stop chromium e2e-ui readme-test

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

# A whole real NeMo Gym 0.7.0 run three ways (none / contrib / full), in e2e's venv; not part of `make test`.
# It waits up to 10 minutes for a quiet machine, then refuses: BENCH_E2E_ARGS=--force runs anyway (and says so).
bench-e2e:
	$(PYTHON) benchmarks/whole_run.py --wait 600 $(BENCH_E2E_ARGS)

# The same harness at tiny sizes, busy machine or not: proves it runs, writes nothing into RESULTS.md.
bench-e2e-smoke:
	$(PYTHON) benchmarks/whole_run.py --quick --force --no-output

# yappi in every Gym server for one collection per configuration: where the servers' CPU goes.
bench-e2e-profile:
	$(PYTHON) benchmarks/whole_run.py --profile $(BENCH_E2E_ARGS)

fuzz: venv
	GYM_FUZZ_EXAMPLES=20000 $(BIN)/python -m pytest -q tests/reliability -k property

# Both real frameworks from PyPI: NeMo Gym 0.4.0 and 0.7.0, then verifiers 0.4.0 (vf-eval).
e2e: e2e-nemo-gym e2e-verifiers

e2e-nemo-gym:
	$(PYTHON) e2e/run.py

e2e-verifiers:
	$(PYTHON) e2e/run_verifiers.py

# The trace viewer (Arize Phoenix), alone in its own venv: it brings its own pins of what .venv also has.
UI_VENV := .venv-ui
UI_STAMP := $(UI_VENV)/.installed-$(shell cksum demo/requirements-ui.txt | cut -d' ' -f1)
UI_PORT ?= 6006
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

$(UI_STAMP): demo/requirements-ui.txt
	$(PYTHON) -m venv $(UI_VENV)
	$(UI_VENV)/bin/python -m pip install -q --disable-pip-version-check --upgrade pip
	$(UI_VENV)/bin/python -m pip install -q --disable-pip-version-check -r demo/requirements-ui.txt
	rm -f $(UI_VENV)/.installed-*
	touch $(UI_STAMP)

ui-venv: $(UI_STAMP)

# The demo in Phoenix on 127.0.0.1:$(UI_PORT), kept running until Ctrl-C; DETACH=1 returns and leaves it running.
demo-ui: venv ui-venv
	$(BIN)/python demo/run_demo_ui.py --phoenix $(UI_VENV)/bin/phoenix --port $(UI_PORT) $(if $(DETACH),--detach)

demo-ui-stop: venv
	$(BIN)/python demo/run_demo_ui.py --stop

# Debian's Chromium, for the browser test.
chromium:
	@command -v chromium >/dev/null 2>&1 || { $(SUDO) apt-get update -qq && $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium; }

# make demo-ui against a real Phoenix: spans read back through its API, the trace page in headless Chromium.
e2e-ui: venv ui-venv chromium
	$(BIN)/python -m pytest -q -s -p no:cacheprovider e2e/test_ui.py

# The shell blocks of README.md and docs/*.md, as written, in a fresh venv on a copy of the checkout (skips say why).
readme-test: venv
	README_PYTHON=$(PYTHON) $(BIN)/python -m pytest -q -s -p no:cacheprovider e2e/test_readme.py
