"""What a traced process loads at start: only what its path uses.

The modules below are needed only off the traced path (a misspelled target's "did you mean"
message, an output name too long for a file name, the ``gym-instrument`` commands): importing the
package and ``instrument()`` never load them, under the launcher or from a script.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from gym_instrument import semconv
from tests.test_zero_code import MAIN, TARGETS, run_instrumented

# Modules the package imports only where they are used, off the traced path.
OFF_THE_PATH = ("difflib", "pkgutil", "hashlib")
# The package's own modules a traced process never uses: the commands' tools.
TOOLS = "gym_instrument.tools"


def loaded_off_the_path(modules: list[str]) -> list[str]:
    return sorted(name for name in modules if name in OFF_THE_PATH or name == TOOLS or name.startswith(TOOLS + "."))


def test_a_traced_run_under_the_launcher_loads_nothing_off_its_path(tmp_path: Path) -> None:
    # The loop's spans show the package ran; the modules it ends with show what it loaded. The other
    # instrumentations installed here are off, as in the benchmarks' `gym` configuration (FastAPI's loads hashlib).
    main = MAIN + "\nimport json, sys\n\nprint('MODULES', json.dumps(sorted(sys.modules)))\n"
    process, spans = run_instrumented(
        tmp_path, main, OTEL_PYTHON_GYM_TARGETS=TARGETS, OTEL_PYTHON_DISABLED_INSTRUMENTATIONS="aiohttp-client,fastapi"
    )
    assert process.returncode == 0, process.stderr
    names = [span["name"] for span in spans]
    assert (names.count(semconv.SPAN_DISPATCH), names.count(semconv.SPAN_VERIFY), names.count(semconv.SPAN_HEALTH)) == (4, 4, 4)
    modules = json.loads(process.stdout.split("MODULES ", 1)[1].splitlines()[0])
    assert "gym_instrument.instrumentor" in modules
    assert loaded_off_the_path(modules) == []


SCRIPT = """
import json, sys
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.trace import TracerProvider

before = set(sys.modules)
import gym_instrument

instrumentor = gym_instrument.GymInstrumentor()
instrumentor.instrument(tracer_provider=TracerProvider(), meter_provider=MeterProvider())
print(json.dumps({"instrumented": instrumentor.is_instrumented_by_opentelemetry, "added": sorted(set(sys.modules) - before)}))
"""


def test_import_and_instrument_with_the_default_presets_load_nothing_off_the_path() -> None:
    # The SDK is loaded first, as a script that makes its providers has it: what is added after is the package's.
    environment = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    process = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, env=environment, timeout=120)
    assert process.returncode == 0, process.stderr
    result = json.loads(process.stdout)
    assert result["instrumented"] is True
    assert "gym_instrument.frameworks.nemo_gym.preset" in result["added"]  # the default presets were armed
    assert loaded_off_the_path(result["added"]) == []


DECORATED = """
import json, sys
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

exporter = InMemorySpanExporter()
provider = TracerProvider()
provider.add_span_processor(SimpleSpanProcessor(exporter))
trace.set_tracer_provider(provider)
before = set(sys.modules)
import gym_instrument


@gym_instrument.dispatch
def play(row):
    return {"reward": 1.0}


play({"task_id": "t0"})
spans = [(span.name, dict(span.attributes)) for span in exporter.get_finished_spans()]
print(json.dumps({"spans": spans, "added": sorted(set(sys.modules) - before)}))
"""

# What only instrument() uses: OpenTelemetry's instrumentor base (and its requirement parsing), the
# configuration layer and the framework presets.
INSTRUMENTING = (
    "gym_instrument.instrumentor",
    "gym_instrument.config",
    "gym_instrument.frameworks",
    "opentelemetry.instrumentation.instrumentor",
    "packaging",
)


def test_a_script_that_only_decorates_never_loads_the_instrumentor() -> None:
    environment = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    process = subprocess.run([sys.executable, "-c", DECORATED], capture_output=True, text=True, env=environment, timeout=120)
    assert process.returncode == 0, process.stderr
    result = json.loads(process.stdout)
    assert result["spans"] == [[semconv.SPAN_DISPATCH, {semconv.TASK_ID: "t0"}]]  # the decorator still traces
    added = result["added"]
    assert [name for name in added if name.split(".")[0] == "packaging" or name.startswith(INSTRUMENTING)] == []
    assert loaded_off_the_path(added) == []


def test_the_instrumentor_is_the_package_attribute_the_entry_point_names() -> None:
    import gym_instrument
    from gym_instrument.instrumentor import GymInstrumentor

    assert gym_instrument.GymInstrumentor is GymInstrumentor
    assert "GymInstrumentor" in dir(gym_instrument) and "GymInstrumentor" in gym_instrument.__all__
