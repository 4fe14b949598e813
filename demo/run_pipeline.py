"""Entry point of the demo pipeline (its modules are imported, so the launcher's hooks reach them)."""

import asyncio
import sys
from pathlib import Path

from rollout_pipeline import main

asyncio.run(main(Path(sys.argv[1])))
