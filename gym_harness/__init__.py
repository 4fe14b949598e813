"""The harness that runs real frameworks for the end-to-end tests and the whole-run benchmark.

Not part of the gym-instrument distribution (pyproject.toml packages ``gym_instrument*`` only): it
lives in the checkout, beside the package, and ``e2e/`` and ``benchmarks/`` import it by name. Its
scripts run from the checkout's root as modules (``python3 -m e2e.run``, ``python3 -m
benchmarks.whole_run``; ``make`` does so), which puts the root on that process's path and nowhere
else. Standard library only, so that any Python 3.10+ runs it before a venv exists.

    paths        where the checkout, e2e's data and a run's work folder are
    processes    starting, waiting for and stopping a run's processes (sessions, a marker variable)
    releases     the NeMo Gym releases, as data; venvs builds and reuses their venvs
    environment  the environment of a run's processes; jsonl reads what NeMo Gym writes
    otlp_json    the OTLP receiver's output read back (spans, metric points)
    model_server a scripted OpenAI-compatible model, run as a program
    bench/       the whole-run benchmark: workload, running, proc, stats, profile, render
"""
