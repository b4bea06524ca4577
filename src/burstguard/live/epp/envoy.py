"""An Envoy bootstrap that puts `burstguard epp` in front of a pool, as GAIE's gateways do.

The shape of the conformance gateways' and llm-d's development configs: an ext_proc filter
streaming both bodies (FULL_DUPLEX_STREAMED, trailers sent) to the picker, then the router
to an ORIGINAL_DST cluster that reads the destination from the header the picker sets.
The tests and the benchmark run a real Envoy on it; docs/epp.md shows it. `message_timeout`
is long because the picker answers a request's headers only once the core releases it
(a queued request waits there), and the route has no timeout (streams run long).
"""

from __future__ import annotations

from typing import Any

from burstguard.wire import headers as h

_HCM = "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3."
_EXT_PROC = "type.googleapis.com/envoy.extensions.filters.http.ext_proc.v3.ExternalProcessor"
_ROUTER = "type.googleapis.com/envoy.extensions.filters.http.router.v3.Router"
_HTTP_OPTIONS = "type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions"


def _address(host: str, port: int) -> dict[str, Any]:
    return {"socket_address": {"address": host, "port_value": port}}


def bootstrap(
    listen_port: int, admin_port: int, picker_port: int | None, *, host: str = "127.0.0.1",
    picker_host: str = "127.0.0.1", direct: str | None = None,
    response_body_mode: str = "FULL_DUPLEX_STREAMED",
) -> dict[str, Any]:  # fmt: skip
    """Envoy on `host:listen_port` with the picker at `picker_host:picker_port`. Without a
    picker (`picker_port` None), Envoy alone: a round-robin cluster over `direct`
    (comma-separated `ip:port`), the benchmark's baseline. `response_body_mode`: what
    GAIE's gateways use, or STREAMED or NONE (the benchmark's comparison; the request body
    stays FULL_DUPLEX_STREAMED: in STREAMED, Envoy waits for the headers answer, which the
    picker gives only once it has read the body)."""
    filters: list[dict[str, Any]] = []
    if picker_port is not None:
        filters.append({
            "name": "envoy.filters.http.ext_proc",
            "typed_config": {
                "@type": _EXT_PROC,
                "grpc_service": {"envoy_grpc": {"cluster_name": "epp"}, "timeout": "3600s"},
                "processing_mode": {
                    "request_header_mode": "SEND", "response_header_mode": "SEND",
                    "request_body_mode": "FULL_DUPLEX_STREAMED",
                    "response_body_mode": response_body_mode,
                    "request_trailer_mode": "SEND", "response_trailer_mode": "SEND",
                },
                "message_timeout": "3600s",
                "failure_mode_allow": False,
            },
        })  # fmt: skip
    filters.append({"name": "envoy.filters.http.router", "typed_config": {"@type": _ROUTER}})
    upstream = "pool" if picker_port is not None else "direct"
    hcm = {
        "@type": _HCM + "HttpConnectionManager",
        "stat_prefix": "inference",
        "stream_idle_timeout": "0s",
        "route_config": {
            "name": "route",
            "virtual_hosts": [{
                "name": "all", "domains": ["*"],
                "routes": [{"match": {"prefix": "/"},
                            "route": {"cluster": upstream, "timeout": "0s"}}],
            }],
        },
        "http_filters": filters,
    }  # fmt: skip
    h2_only = {"@type": _HTTP_OPTIONS, "explicit_http_config": {"http2_protocol_options": {}}}
    h2 = {"envoy.extensions.upstreams.http.v3.HttpProtocolOptions": h2_only}
    clusters: list[dict[str, Any]] = []
    if picker_port is not None:
        clusters += [
            {
                "name": "pool", "type": "ORIGINAL_DST", "lb_policy": "CLUSTER_PROVIDED",
                "connect_timeout": "2s",
                "original_dst_lb_config": {"use_http_header": True,
                                           "http_header_name": h.DESTINATION},
                "circuit_breakers": {"thresholds": [{"max_connections": 100000,
                    "max_pending_requests": 100000, "max_requests": 100000}]},
            },
            {
                "name": "epp", "type": "STATIC", "connect_timeout": "2s",
                "typed_extension_protocol_options": h2,
                "load_assignment": {"cluster_name": "epp", "endpoints": [{"lb_endpoints": [
                    {"endpoint": {"address": _address(picker_host, picker_port)}}]}]},
            },
        ]  # fmt: skip
    else:
        eps = [ep.rsplit(":", 1) for ep in (direct or "").split(",") if ep]
        clusters.append({
            "name": "direct", "type": "STATIC", "lb_policy": "ROUND_ROBIN",
            "connect_timeout": "2s",
            "circuit_breakers": {"thresholds": [{"max_connections": 100000,
                "max_pending_requests": 100000, "max_requests": 100000}]},
            "load_assignment": {"cluster_name": "direct", "endpoints": [{"lb_endpoints": [
                {"endpoint": {"address": _address(a, int(p))}} for a, p in eps]}]},
        })  # fmt: skip
    return {
        "admin": {"address": _address(host, admin_port)},
        "static_resources": {
            "listeners": [{
                "name": "inference", "address": _address(host, listen_port),
                "filter_chains": [{"filters": [{
                    "name": "envoy.filters.network.http_connection_manager",
                    "typed_config": hcm}]}],
            }],
            "clusters": clusters,
        },
    }  # fmt: skip
