"""The whole-run benchmark (``make bench-e2e``), one job per module; ``benchmarks/whole_run.py`` is its command.

workload        what runs: the release, the mcqa tasks, the configurations, the order of the rounds
running         a run: every configuration started, its collections timed, the report made
proc            what processes spend, from /proc and wait4; a run stopped and resumed as one
stats           one collection's figures, and the ratios, intervals and speed fit over rounds
profile         yappi's profiles read back, by where the code lives
render          the report's Markdown; render_profile its profile part
span_price      OpenTelemetry's own price of the package's spans, run in the e2e venv
"""
