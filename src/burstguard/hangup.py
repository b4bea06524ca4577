"""Noticing a client that hangs up, for ASGI handlers that would otherwise keep working.

Neither uvicorn nor Starlette cancels a handler whose client went away; a server that holds
a request (an engine generating, a gateway queueing) must watch the `receive` channel itself,
as vLLM's API server does, or the work of abandoned requests keeps holding KV blocks."""

from __future__ import annotations

from starlette.types import Receive


async def until_hangup(receive: Receive) -> None:
    """Returns once the client has disconnected (call only after the body has been read)."""
    while (await receive())["type"] != "http.disconnect":
        pass
