# No hard dependency on the instrumented library: the NeMo Gym preset tolerates its absence
# and any rollout loop can be targeted by configuration, so nothing is listed here.
_instruments: tuple[str, ...] = ()
