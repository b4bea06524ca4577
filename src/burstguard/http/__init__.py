"""HTTP shared by the gateway, bench, calibrate and the local fleet: the HTTP/1.1 client
(`client`) and server (`server`), asyncio protocols over httptools with no ASGI layers, and
what an OpenAI-compatible target serves (`preflight`). Nothing here imports the gateway
(docs/design.md, "Layers"): the server takes its limits as a `ServerLimits`, the client a
base URL."""
