"""The whole-run benchmark (``make bench-e2e``), one job per module; ``benchmarks/whole_run.py`` is its command.

workload        what runs: the release, the mcqa tasks, the configurations, the order of the rounds
running         a run: every configuration started, its collections timed, the report made
proc            what processes spend, from /proc and wait4; a run stopped and resumed as one
stats           one collection's figures, and the ratios, intervals and speed fit over rounds
profile         yappi's profiles read back, by where the code lives
render          the report's Markdown; render_profile its profile part, render_sizes a --sizes run's
span_price      OpenTelemetry's own price of the package's spans, run in the e2e venv
launch          what a process's start costs under the launcher, and with this package on it
hand/           the hand configuration: the package's spans written by hand (patch.py, run in the e2e venv)
                and the check that hand and gym exported the same spans per rollout (likeness)
"""
