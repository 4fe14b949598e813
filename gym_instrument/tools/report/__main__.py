"""``python -m gym_instrument.tools.report PATH...``: the same as ``gym-instrument report PATH...``."""

import sys

from gym_instrument.tools.cli import main

sys.exit(main(["report", *sys.argv[1:]]))
