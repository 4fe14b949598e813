"""The engine's state: the :class:`Setup` one ``instrument()`` records with, swapped as a whole."""

from __future__ import annotations

from functools import partial

from gym_instrument import semconv
from gym_instrument.link.files import LinkFiles
from gym_instrument.link.memory import DispatchLinks
from gym_instrument.record.job import JobContext
from gym_instrument.record.recorder import Recorder
from gym_instrument.role.base import Hops

DEFAULT_HOPS = Hops()  # the package carries contexts itself; server frameworks' own telemetry left on


class Setup:
    """What one ``instrument()`` records with: the recorder, the dispatch memory, the baggage setting,
    whether ended dispatches are remembered (only when a health function could ask for them), the
    job context of the process's environment that root dispatch spans are tied to, the persisted
    links (ended dispatches written for a health pass in another process; None: off), and what the
    package does at a framework's hops (``inject`` and ``receive`` targets)."""

    __slots__ = ("hops", "job", "link_files", "links", "propagate_baggage", "recorder", "remembers")

    def __init__(
        self,
        recorder: Recorder,
        links: DispatchLinks,
        propagate_baggage: bool,
        remembers: bool = True,
        job: JobContext | None = None,
        link_files: LinkFiles | None = None,
        hops: Hops = DEFAULT_HOPS,
    ) -> None:
        self.recorder = recorder
        self.links = links
        self.propagate_baggage = propagate_baggage
        self.remembers = remembers
        self.job = job
        self.link_files = link_files  # persisted links (None: off)
        self.hops = hops
        links.on_evicted = partial(recorder.count, semconv.METRIC_LINK_EVICTIONS, None)


class Engine:
    """The current :class:`Setup`; ``instrument()`` swaps it, ``uninstrument()`` resets it."""

    def __init__(self) -> None:
        self.setup = Setup(Recorder(), DispatchLinks(1_000_000), True)
        self.health_decorated = False  # a function of a role that uses links was decorated: dispatches are remembered

    def configure(self, setup: Setup) -> None:
        """Record with ``setup`` from now on (remembering dispatches anyway once a @health exists)."""
        setup.remembers = setup.remembers or self.health_decorated
        if self.health_decorated:
            setup.links.by_task = True  # (its records may name rollouts by task id and repeat)
        self.setup = setup

    def expect_verdicts(self) -> None:
        """A function of a role that looks up dispatches (``@health``) was decorated: remember dispatches from
        now on, whatever the configuration."""
        self.health_decorated = True
        self.setup.remembers = True
        self.setup.links.by_task = True  # (its records may name rollouts by task id and repeat, the generic schema's)

    @property
    def links(self) -> DispatchLinks:
        return self.setup.links

    @property
    def propagate_baggage(self) -> bool:
        return self.setup.propagate_baggage


ENGINE = Engine()
