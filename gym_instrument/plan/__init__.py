"""Plan: the engine. One :class:`~gym_instrument.plan.plan.Plan` per wrapped function, made once
at wrap time; one wrapper per kind of function (``wrappers``); one idempotent end
(:meth:`~gym_instrument.plan.plan.Active.finish`); the :class:`~gym_instrument.plan.engine.Setup`
one ``instrument()`` records with."""
