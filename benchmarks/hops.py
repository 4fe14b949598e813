"""What the ``hops`` case wraps: a client's one request function (``inject``) and a server's request
cycle (``receive``), in NeMo Gym's and uvicorn's shapes, doing nothing themselves."""

from __future__ import annotations

from typing import Any


async def request(method: str, url: str, **kwargs: Any) -> Any:
    """``nemo_gym.server_utils.request``'s shape: what it would send."""
    return kwargs.get("headers")


class RequestResponseCycle:
    """uvicorn's request cycle: the ASGI scope on the instance, the application as the argument."""

    def __init__(self, headers: list[tuple[bytes, bytes]]) -> None:
        self.scope = {"type": "http", "headers": headers}

    async def run_asgi(self, app: Any) -> Any:
        return app


BARE_REQUEST = request
BARE_RUN_ASGI = RequestResponseCycle.run_asgi
