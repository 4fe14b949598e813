"""``python -m gym_instrument report|replay ...``: the same as the ``gym-instrument`` command."""

import sys

from gym_instrument.tools.cli import main

sys.exit(main())
