"""The collector process: imports the pipeline module (so the launcher's hooks reach it) and runs it."""

import asyncio
import json
import sys

from tests.crossprocess.services import collect

print(json.dumps(asyncio.run(collect(sys.argv[1], int(sys.argv[2]), int(sys.argv[3])))))
