"""Case F, run in a fresh process: ``instrument()`` with the NeMo Gym preset armed, NeMo Gym absent.

Prints one JSON object: how long ``import gym_instrument`` and ``instrument()`` took, which modules
``instrument()`` imported, whether any target module was imported, and which hooks are armed.
The SDK is imported first: a zero-code start has it loaded before instrumentors run.
"""

from __future__ import annotations

import importlib.util
import json
import sys
import time

from opentelemetry.sdk.trace import TracerProvider


def main() -> None:
    provider = TracerProvider()
    nemo_gym_importable = importlib.util.find_spec("nemo_gym") is not None

    before_import = set(sys.modules)
    start = time.perf_counter()
    from gym_instrument import GymInstrumentor  # as the launcher's entry point loads it
    from gym_instrument.config.declare import preset_targets

    import_ms = (time.perf_counter() - start) * 1e3
    imported_by_import = sorted(set(sys.modules) - before_import)

    before = set(sys.modules)
    start = time.perf_counter()
    GymInstrumentor().instrument(tracer_provider=provider)
    instrument_ms = (time.perf_counter() - start) * 1e3
    imported_by_instrument = sorted(set(sys.modules) - before)

    target_packages = {target.module.split(".")[0] for target in preset_targets("nemo_gym")}
    target_modules = sorted(name for name in sys.modules if name.split(".")[0] in target_packages)
    from gym_instrument.target import patcher as targets

    pending = sorted(getattr(targets, "_PENDING_HOOKS", ()))
    print(
        json.dumps(
            {
                "nemo_gym_importable": nemo_gym_importable,
                "import_ms": import_ms,
                "instrument_ms": instrument_ms,
                "imported_by_import": len(imported_by_import),
                "imported_by_instrument": imported_by_instrument,
                "target_packages": sorted(target_packages),
                "target_modules_imported": target_modules,
                "pending_hooks": pending,
            }
        )
    )


if __name__ == "__main__":
    main()
