# Every target sets up what it needs: a fresh clone with only Python works.
# The e2e and whole-run scripts import the harness (gym_harness/) by name: they run as modules
# (`python -m e2e.run`) from the repository's root, which `-m` puts on the path of that process
# alone (unlike PYTHONPATH, which every NeMo Gym server and Ray process would inherit); pytest
# runs as `python -m pytest` from the root too.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-$(shell cksum pyproject.toml | cut -d' ' -f1)

.PHONY: venv test demo demo-venv bench bench-instructions valgrind bench-e2e bench-e2e-smoke bench-e2e-profile fuzz e2e e2e-nemo-gym e2e-verifiers e2e-inspect e2e-envlib e2e-openenv e2e-score-after lint clean ui-venv demo-ui demo-ui-stop chromium e2e-ui readme-test

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --disable-pip-version-check --upgrade pip
	$(BIN)/python -m pip install -q --disable-pip-version-check -e '.[test]'
	rm -f $(VENV)/.installed-*
	touch $(STAMP)

venv: $(STAMP)

# The package's unit tests (tests/) and the harness's (harness_tests/).
test: venv
	$(BIN)/python -m pytest -q tests harness_tests

# The demo in a venv of its own: the package with its report extra, the SDK's launcher and the
# OTLP/HTTP exporter (demo/requirements.txt); none of the test toolchain .venv holds.
DEMO_VENV := .venv-demo
DEMO_BIN := $(DEMO_VENV)/bin
DEMO_STAMP := $(DEMO_VENV)/.installed-$(shell cat pyproject.toml demo/requirements.txt | cksum | cut -d' ' -f1)

$(DEMO_STAMP): pyproject.toml demo/requirements.txt
	$(PYTHON) -m venv $(DEMO_VENV)
	$(DEMO_BIN)/python -m pip install -q --disable-pip-version-check --upgrade pip
	$(DEMO_BIN)/python -m pip install -q --disable-pip-version-check -e '.[report]' -r demo/requirements.txt
	rm -f $(DEMO_VENV)/.installed-*
	touch $(DEMO_STAMP)

demo-venv: $(DEMO_STAMP)

demo: demo-venv
	$(DEMO_BIN)/python demo/run_demo.py

lint: venv
	$(BIN)/ruff check gym_instrument tests benchmarks demo gym_harness harness_tests e2e
	$(BIN)/ruff format --check gym_instrument tests benchmarks demo gym_harness harness_tests e2e
	$(BIN)/mypy

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache .hypothesis

bench: venv
	$(BIN)/python benchmarks/run.py

# The instructions each judged `make bench` row's two sides execute per call (cachegrind): figures
# this machine's changing speed barely moves. Its own section of RESULTS.md; not part of `make test`.
bench-instructions: venv valgrind
	$(BIN)/python benchmarks/instructions.py

valgrind:
	@command -v valgrind >/dev/null 2>&1 || { $(SUDO) apt-get update -qq && $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq valgrind; }

# A whole real NeMo Gym 0.7.0 run four ways (none / contrib / full / lean), in e2e's venv; not part of `make test`.
# It waits up to 10 minutes for a quiet machine, then refuses: BENCH_E2E_ARGS=--force runs anyway (and says so).
bench-e2e:
	$(PYTHON) -m benchmarks.whole_run --wait 600 $(BENCH_E2E_ARGS)

# The same harness at tiny sizes, busy machine or not: proves it runs, writes nothing into RESULTS.md.
bench-e2e-smoke:
	$(PYTHON) -m benchmarks.whole_run --quick --force --no-output

# yappi in every Gym server for one collection per configuration: where the servers' CPU goes.
bench-e2e-profile:
	$(PYTHON) -m benchmarks.whole_run --profile $(BENCH_E2E_ARGS)

fuzz: venv
	GYM_FUZZ_EXAMPLES=20000 $(BIN)/python -m pytest -q tests/reliability -k property

# The real frameworks from PyPI: NeMo Gym 0.4.0 and 0.7.0, verifiers 0.4.0 (vf-eval), inspect-ai 0.3.285,
# gymnasium 1.4.0, openenv-core 0.3.0 and reasoning-gym 0.1.25 (each in a venv of its own).
e2e: e2e-nemo-gym e2e-verifiers e2e-inspect e2e-envlib e2e-openenv e2e-score-after

e2e-nemo-gym:
	$(PYTHON) -m e2e.run

e2e-verifiers:
	$(PYTHON) -m e2e.run_verifiers

e2e-inspect:
	$(PYTHON) -m e2e.run_inspect

e2e-envlib:
	$(PYTHON) -m e2e.run_envlib

e2e-openenv:
	$(PYTHON) -m e2e.run_openenv

e2e-score-after:
	$(PYTHON) -m e2e.run_score_after

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
demo-ui: demo-venv ui-venv
	$(DEMO_BIN)/python demo/run_demo_ui.py --phoenix $(UI_VENV)/bin/phoenix --port $(UI_PORT) $(if $(DETACH),--detach)

demo-ui-stop: demo-venv
	$(DEMO_BIN)/python demo/run_demo_ui.py --stop

# Debian's Chromium, for the browser test.
chromium:
	@command -v chromium >/dev/null 2>&1 || { $(SUDO) apt-get update -qq && $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium; }

# make demo-ui (in .venv-demo) against a real Phoenix: spans and the rollouts' verdict and reward
# annotations read back through its API, the trace list and a trace in headless Chromium; then the
# report and compare pages in headless Chromium. Screenshots stay in .e2e-work/. Tests run in .venv (pytest).
e2e-ui: venv demo-venv ui-venv chromium
	$(BIN)/python -m pytest -q -s -p no:cacheprovider e2e/test_ui.py e2e/test_report_page.py

# The shell blocks of README.md and docs/*.md, as written, in a fresh venv on a copy of the checkout (skips say why).
readme-test: venv
	README_PYTHON=$(PYTHON) $(BIN)/python -m pytest -q -s -p no:cacheprovider e2e/test_readme.py
