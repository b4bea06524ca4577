"""The Endpoint Picker's side of Envoy's ext_proc exchange, as messages: read a request's
headers and the gateway's hints, name the picked endpoint, echo a streamed body, answer at
once (429, 503).

The protocol (GAIE's 004-endpoint-picker-protocol, and what Envoy 1.40 does with it, checked
against a real Envoy in tests/integration/test_epp_envoy.py): the gateway streams both
bodies (FULL_DUPLEX_STREAMED), so every body chunk the picker is sent must come back as a
`streamed_response` (the last one `end_of_stream`), after the request_headers answer that
carries the pick: the header `x-gateway-destination-endpoint: ip:port[,ip:port...]` (the
rest are fallbacks for the gateway's retries) and the same value in dynamic metadata
`envoy.lb`. Nothing here holds state or awaits: `live.epp.server` drives it.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from urllib.parse import urlsplit

from envoy.config.core.v3 import base_pb2
from envoy.extensions.filters.http.ext_proc.v3 import processing_mode_pb2
from envoy.service.ext_proc.v3 import external_processor_pb2 as pb
from envoy.type.v3 import http_status_pb2
from google.protobuf import struct_pb2

from burstguard.wire import headers as h

__all__ = [
    "CHUNK_BYTES",
    "endpoint_of",
    "header_map",
    "headers_answer",
    "immediate",
    "pick",
    "served_endpoint",
    "streamed_body",
    "subset_hint",
    "trailers_answer",
]

CHUNK_BYTES = 62 * 1024
"""Largest body piece echoed in one message (under gRPC's and Envoy's message limits)."""

_OVERWRITE = base_pb2.HeaderValueOption.OVERWRITE_IF_EXISTS_OR_ADD
_MODES = processing_mode_pb2.ProcessingMode


def endpoint_of(url: str) -> str:
    """A backend URL's `host:port`, the form Envoy's original-destination cluster reads."""
    parts = urlsplit(url)
    host = parts.netloc.rsplit("@", 1)[-1]
    if parts.port is None:
        host += ":443" if parts.scheme == "https" else ":80"
    return host


def header_map(headers: base_pb2.HeaderMap) -> dict[str, str]:
    """Envoy's header list as a dict (lower-case names; Envoy sends `raw_value` bytes)."""
    out: dict[str, str] = {}
    for hv in headers.headers:
        value = hv.raw_value.decode("utf-8", "replace") if hv.raw_value else hv.value
        out[hv.key.lower()] = value
    return out


def _set(headers: Iterable[tuple[str, str]]) -> pb.HeaderMutation:
    return pb.HeaderMutation(
        set_headers=[
            base_pb2.HeaderValueOption(
                header=base_pb2.HeaderValue(key=k, raw_value=v.encode()), append_action=_OVERWRITE
            )
            for k, v in headers
        ]
    )


def pick(
    endpoints: list[str], headers: Iterable[tuple[str, str]] = (), remove: Iterable[str] = ()
) -> pb.ProcessingResponse:
    """The request_headers answer naming `endpoints` (the pick first, then fallbacks) in
    the header and in `envoy.lb` metadata, with `headers` set and `remove` removed."""
    value = ",".join(endpoints)
    meta = struct_pb2.Struct()
    meta.update({h.LB_NAMESPACE: {h.DESTINATION: value}})
    mutation = _set([(h.DESTINATION, value), *headers])
    mutation.remove_headers.extend(remove)
    common = pb.CommonResponse(header_mutation=mutation, clear_route_cache=True)
    return pb.ProcessingResponse(
        request_headers=pb.HeadersResponse(response=common), dynamic_metadata=meta
    )


def headers_answer(phase: str, headers: Iterable[tuple[str, str]] = ()) -> pb.ProcessingResponse:
    """A headers answer for `phase` (request_headers, response_headers), setting `headers`."""
    common = pb.CommonResponse(header_mutation=_set(headers))
    return pb.ProcessingResponse(**{phase: pb.HeadersResponse(response=common)})


def trailers_answer(phase: str) -> pb.ProcessingResponse:
    """An unchanged trailers answer for `phase` (request_trailers, response_trailers)."""
    return pb.ProcessingResponse(**{phase: pb.TrailersResponse()})


def streamed_body(phase: str, body: bytes, end: bool) -> Iterator[pb.ProcessingResponse]:
    """`body` streamed back for `phase` (request_body, response_body) in pieces of at most
    CHUNK_BYTES; the last one carries `end` (an empty body: one empty piece)."""
    n = len(body)
    starts = range(0, n, CHUNK_BYTES) if n else range(1)
    for i in starts:
        # set in place: a sixth of the time of building the nested messages (every
        # response piece comes through here)
        answer = pb.ProcessingResponse()
        streamed = getattr(answer, phase).response.body_mutation.streamed_response
        streamed.body = body[i : i + CHUNK_BYTES]
        streamed.end_of_stream = end and i + CHUNK_BYTES >= n
        yield answer


def body_answer(phase: str, body: bytes | None) -> pb.ProcessingResponse:
    """The answer to one body piece in STREAMED (or BUFFERED) mode: unchanged (None), or
    replaced by `body`."""
    if body is None:
        return pb.ProcessingResponse(**{phase: pb.BodyResponse()})
    common = pb.CommonResponse(body_mutation=pb.BodyMutation(body=body))
    return pb.ProcessingResponse(**{phase: pb.BodyResponse(response=common)})


def duplex_response(config: pb.ProtocolConfiguration) -> bool:
    """Whether the gateway streams the response body FULL_DUPLEX_STREAMED (each piece
    echoed as a `streamed_response`; also where it said nothing) rather than STREAMED or
    BUFFERED (each piece answered, replaced where edited)."""
    return config.response_body_mode in (_MODES.FULL_DUPLEX_STREAMED, _MODES.NONE)


def immediate(
    status: int, body: bytes, headers: Iterable[tuple[str, str]] = (), details: str = ""
) -> pb.ProcessingResponse:
    """Answer the client now with `status` and `body`; nothing goes upstream."""
    return pb.ProcessingResponse(
        immediate_response=pb.ImmediateResponse(
            status=http_status_pb2.HttpStatus(code=status),
            headers=_set(headers),
            body=body,
            details=details,
        )
    )


def _metadata_value(md: base_pb2.Metadata, namespace: str, key: str) -> list[str] | None:
    """A string or list-of-strings metadata value, split on commas; None where absent."""
    if namespace not in md.filter_metadata:
        return None
    fields = md.filter_metadata[namespace].fields
    if key not in fields:
        return None
    value = fields[key]
    kind = value.WhichOneof("kind")
    if kind == "string_value":
        items = value.string_value.split(",")
    elif kind == "list_value":
        items = [v.string_value for v in value.list_value.values if v.HasField("string_value")]
    else:
        return None
    return [i.strip() for i in items if i.strip()]


def subset_hint(md: base_pb2.Metadata) -> list[str] | None:
    """The gateway's subset hint (`envoy.lb.subset_hint` /
    `x-gateway-destination-endpoint-subset`): the endpoints (`ip:port`, or `ip`) the pick
    must come from; None where the gateway sent none."""
    return _metadata_value(md, h.SUBSET_NAMESPACE, h.DESTINATION_SUBSET)


def served_endpoint(md: base_pb2.Metadata, headers: Mapping[str, str]) -> str | None:
    """The endpoint that served the request, where the gateway says (metadata `envoy.lb` /
    `x-gateway-destination-endpoint-served`, or that response header): plain Envoy does
    not, so None is the common answer."""
    found = _metadata_value(md, h.LB_NAMESPACE, h.DESTINATION_SERVED)
    if found:
        return found[0]
    return headers.get(h.DESTINATION_SERVED)
