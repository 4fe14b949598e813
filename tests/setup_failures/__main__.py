"""Run the set-up failures pipeline (its module imported, so the launcher's hooks reach it)."""

import sys
from pathlib import Path

from tests.setup_failures.pipeline import main

main(Path(sys.argv[1]))
