"""The HTTP/1.1 client and server that the gateway, bench and calibrate share: asyncio
protocols over httptools, no ASGI layers (docs/design.md, "Layers"). Nothing here knows
the gateway: the server takes its limits as a `ServerLimits`, the client a base URL."""
