"""How fast this machine runs Python right now: ``whole_run.py`` runs this beside its collections.

    python3 benchmarks/speed_probe.py OUT [--interval SECONDS]

Every ``--interval`` seconds (0.05 by default) it runs the same small piece of pure-Python work
(dict stores and string building, about half a millisecond) and appends one line to OUT:
``<time.monotonic()> <CPU nanoseconds the piece took>``. The work never changes, so its CPU time
changes only with the machine: on a shared host a virtual CPU runs the same instructions up to
twice as slowly when the host gives its core's other hyperthread to a neighbour, and it flips
between the two speeds every few seconds. A collection's CPU time rises and falls with it; the
probe's mean over a collection's window says by how much. It costs about 1% of one core.
"""

from __future__ import annotations

import argparse
import time


def piece() -> int:
    """The fixed piece of work: the same instructions every time."""
    table: dict[int, str] = {}
    for number in range(3000):
        table[number & 511] = str(number) + "x"
    return sum(len(text) for text in table.values())


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out", help="file the samples are appended to")
    parser.add_argument("--interval", type=float, default=0.05, help="seconds between samples")
    options = parser.parse_args(argv)
    with open(options.out, "a", buffering=1) as out:
        while True:
            before = time.thread_time_ns()
            piece()
            spent = time.thread_time_ns() - before
            out.write(f"{time.monotonic():.4f} {spent}\n")
            time.sleep(options.interval)


if __name__ == "__main__":
    main()
