"""`burstguard epp`'s ext_proc side against a fake stream, for what a real Envoy (the
integration tests) cannot easily be made to do: bodies past the limit, bad keys and JSON,
a subset hint, an upstream 5xx, a shed and a hang-up in the queue, exact message shapes."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import grpc
import pytest
from envoy.config.core.v3 import base_pb2
from envoy.service.ext_proc.v3 import external_processor_pb2 as pb
from google.protobuf import struct_pb2

from burstguard.core.gateway.classify import Classifier
from burstguard.core.gateway.config import GatewayConfig
from burstguard.core.gateway.epp import epp_config
from burstguard.errors import ConfigError
from burstguard.live.epp import protocol
from burstguard.live.epp.server import EndpointPicker

A, B = "http://10.0.0.1:8000", "http://10.0.0.2:8000"


class FakeStream:
    """Envoy's side of one ext_proc stream: messages fed in, answers collected."""

    def __init__(self) -> None:
        self.inbox: asyncio.Queue[Any] = asyncio.Queue()
        self.out: list[pb.ProcessingResponse] = []
        self.wrote = asyncio.Event()

    async def read(self) -> Any:
        return await self.inbox.get()

    async def write(self, msg: pb.ProcessingResponse) -> None:
        self.out.append(msg)
        self.wrote.set()

    def send(self, msg: pb.ProcessingRequest) -> None:
        self.inbox.put_nowait(msg)

    def end(self) -> None:
        self.inbox.put_nowait(grpc.aio.EOF)


def headers(path: str = "/v1/completions", method: str = "POST", eos: bool = False,
            subset: list[str] | None = None, **extra: str) -> pb.ProcessingRequest:  # fmt: skip
    hs = {":path": path, ":method": method, "content-type": "application/json", **extra}
    hmap = base_pb2.HeaderMap(headers=[base_pb2.HeaderValue(key=k, raw_value=v.encode())
                                       for k, v in hs.items()])  # fmt: skip
    md = base_pb2.Metadata()
    if subset is not None:
        st = struct_pb2.Struct()
        st.update({"x-gateway-destination-endpoint-subset": subset})
        md.filter_metadata["envoy.lb.subset_hint"].CopyFrom(st)
    return pb.ProcessingRequest(
        request_headers=pb.HttpHeaders(headers=hmap, end_of_stream=eos), metadata_context=md
    )


def body(data: bytes, eos: bool = True, response: bool = False) -> pb.ProcessingRequest:
    part = pb.HttpBody(body=data, end_of_stream=eos)
    return pb.ProcessingRequest(**{"response_body" if response else "request_body": part})


def response_headers(status: int) -> pb.ProcessingRequest:
    status_header = base_pb2.HeaderValue(key=":status", raw_value=str(status).encode())
    hmap = base_pb2.HeaderMap(headers=[status_header])
    return pb.ProcessingRequest(response_headers=pb.HttpHeaders(headers=hmap))


COMPLETION = json.dumps({"model": "m", "prompt": "hello", "max_tokens": 4}).encode()


def picker(**config: Any) -> EndpointPicker:
    cfg = GatewayConfig.from_dict({"backends": [{"url": A}, {"url": B}], **config})
    p = EndpointPicker(cfg)
    p.fleet.set_backends(cfg.backend_urls(), p._clock())
    return p


async def run(p: EndpointPicker, *msgs: pb.ProcessingRequest) -> list[pb.ProcessingResponse]:
    s = FakeStream()
    for m in msgs:
        s.send(m)
    s.end()
    await asyncio.wait_for(p.process(s), 5)  # type: ignore[arg-type]
    return s.out


def immediate(out: list[pb.ProcessingResponse]) -> tuple[int, dict[str, str], dict[str, Any]]:
    assert len(out) == 1 and out[0].WhichOneof("response") == "immediate_response", out
    ir = out[0].immediate_response
    hs = {h.header.key: h.header.raw_value.decode() for h in ir.headers.set_headers}
    return ir.status.code, hs, json.loads(ir.body)


def picked(out: list[pb.ProcessingResponse]) -> str:
    first = out[0]
    assert first.WhichOneof("response") == "request_headers"
    hs = {h.header.key: h.header.raw_value.decode()
          for h in first.request_headers.response.header_mutation.set_headers}  # fmt: skip
    meta = first.dynamic_metadata.fields["envoy.lb"].struct_value.fields
    assert (
        meta["x-gateway-destination-endpoint"].string_value == hs["x-gateway-destination-endpoint"]
    )
    return hs["x-gateway-destination-endpoint"]


async def test_a_release_names_the_endpoint_and_echoes_the_body_edited() -> None:
    p = picker()
    stream = json.dumps({"model": "m", "prompt": "x", "max_tokens": 3, "stream": True}).encode()
    out = await run(p, headers(), body(stream[:10], eos=False), body(stream[10:]))
    assert picked(out) in ("10.0.0.1:8000", "10.0.0.2:8000")
    echoed = b"".join(o.request_body.response.body_mutation.streamed_response.body
                      for o in out[1:])  # fmt: skip
    assert out[-1].request_body.response.body_mutation.streamed_response.end_of_stream
    sent = json.loads(echoed)  # usage asked for on a stream, so tokens are counted exactly
    assert sent["stream_options"] == {"include_usage": True}
    hs = {h.header.key: h.header.raw_value.decode()
          for h in out[0].request_headers.response.header_mutation.set_headers}  # fmt: skip
    assert hs["content-length"] == str(len(echoed))
    # the stream ended before its answer did: the client went away
    assert p.core.stats.outcomes["standard"]["cancelled"] == 1


async def test_a_big_body_is_echoed_in_pieces_the_last_ending_it() -> None:
    p = picker()
    big = json.dumps({"model": "m", "prompt": "y" * 200_000, "max_tokens": 1}).encode()
    out = await run(p, headers(), body(big))
    pieces = [o.request_body.response.body_mutation.streamed_response for o in out[1:]]
    assert len(pieces) == 4 and all(len(x.body) <= protocol.CHUNK_BYTES for x in pieces)
    assert [x.end_of_stream for x in pieces] == [False, False, False, True]


async def test_refusals_before_the_queue() -> None:
    p = picker(max_body_bytes=1024, api_keys=[{"key": "k" * 16, "tenant": "t",
                                                "tier": "standard"}])  # fmt: skip
    status, _, err = immediate(await run(p, headers(), body(b"x" * 2000)))
    assert (status, err["error"]["code"]) == (413, "body_too_large")
    status, hs, err = immediate(await run(p, headers(), body(COMPLETION)))
    assert (status, err["error"]["type"]) == (401, "authentication_error")
    assert hs["www-authenticate"] == "Bearer"
    auth = {"authorization": "Bearer " + "k" * 16}
    status, _, err = immediate(await run(p, headers(**auth), body(b"{not json")))
    assert (status, err["error"]["code"]) == (400, "invalid_request")
    assert p.core.stats.in_flight_requests == 0 and sum(p.core.stats.queue_depth.values()) == 0


async def test_the_subset_hint_is_honoured() -> None:
    p = picker()
    for _ in range(4):
        assert picked(await run(p, headers(subset=["10.0.0.2:8000"]), body(COMPLETION))) == (
            "10.0.0.2:8000")  # fmt: skip
    assert picked(await run(p, headers(subset=["10.0.0.1"]), body(COMPLETION))) == (
        "10.0.0.1:8000")  # fmt: skip
    status, _, err = immediate(await run(p, headers(subset=["10.9.9.9:1"]), body(COMPLETION)))
    assert (status, err["error"]["code"]) == (503, "no_endpoint_in_subset")


async def test_an_upstream_5xx_is_the_backends_failure() -> None:
    p = picker()
    out = await run(p, headers(), body(COMPLETION), response_headers(500),
                    body(b'{"error": "boom"}', response=True))  # fmt: skip
    failed = picked(out)
    assert out[-1].response_body.response.body_mutation.streamed_response.body == (
        b'{"error": "boom"}'
    )  # fmt: skip (the answer is passed on as it came)
    stats = {s.url: s for s in p.fleet.stats(p._clock())}
    url = A if failed.startswith("10.0.0.1") else B
    assert stats[url].failures == {"status_5xx": 1}
    assert p.core.stats.outcomes["standard"]["failed"] == 1


async def test_a_json_answer_completes_with_its_usage() -> None:
    p = picker()
    answer = json.dumps({"choices": [{"text": "a b"}], "usage": {"completion_tokens": 2}})
    await run(p, headers(), body(COMPLETION), response_headers(200),
              body(answer.encode()[:5], eos=False, response=True),
              body(answer.encode()[5:], response=True))  # fmt: skip
    assert p.core.stats.outcomes["standard"]["completed"] == 1
    assert p.metrics.output_tokens_of("standard")._value.get() == 2


async def test_a_queue_past_its_room_sheds_429_and_a_hang_up_there_cancels() -> None:
    p = picker(admission={"max_in_flight": 1, "min_in_flight": 1, "adapt": False,
                          "max_queue_requests": 1})  # fmt: skip
    first, second = FakeStream(), FakeStream()
    for s in (first, second):
        s.send(headers())
        s.send(body(COMPLETION))
    t1 = asyncio.ensure_future(p.process(first))  # type: ignore[arg-type]
    await asyncio.wait_for(first.wrote.wait(), 5)  # released: it holds the slot
    t2 = asyncio.ensure_future(p.process(second))  # type: ignore[arg-type]
    for _ in range(100):
        if sum(p.core.stats.queue_depth.values()):
            break
        await asyncio.sleep(0.01)
    assert sum(p.core.stats.queue_depth.values()) == 1 and not second.out
    status, hs, err = immediate(await run(p, headers(), body(COMPLETION)))
    assert (status, err["error"]["type"], err["error"]["code"]) == (
        429, "rate_limit_exceeded", "queue_full")  # fmt: skip
    assert int(hs["retry-after"]) >= 1
    t2.cancel()  # Envoy resets the queued request's stream: its client hung up
    with pytest.raises(asyncio.CancelledError):
        await t2
    assert sum(p.core.stats.queue_depth.values()) == 0
    assert p.core.stats.outcomes["standard"]["cancelled"] == 1
    first.end()
    await asyncio.wait_for(t1, 5)
    assert p.core.stats.in_flight_requests == 0


async def test_other_routes_go_to_a_healthy_endpoint_without_the_queue() -> None:
    p = picker()
    out = await run(p, headers("/v1/models", "GET", eos=True))
    assert len(out) == 1 and picked(out) in ("10.0.0.1:8000", "10.0.0.2:8000")
    assert sum(sum(c.values()) for c in p.core.stats.outcomes.values()) == 0


def test_what_needs_the_proxy_is_off_and_redis_is_refused() -> None:
    cfg = GatewayConfig.from_dict({
        "backends": [{"url": A, "resume": True}],
        "classes": [{"name": "standard", "rank": 0},
                    {"name": "batch", "rank": 1, "preemptible": True}],
    })  # fmt: skip
    out, notes = epp_config(cfg)
    assert not any(c.preemptible for c in out.classes) and not out.backends[0].resume
    assert not out.backend_deadlines.enabled  # Envoy holds the upstream call
    assert len(notes) == 3
    # epp.preempt: end keeps them preemptible: cut with an error, never resumed
    ends = cfg.model_copy(update={"epp": cfg.epp.model_copy(update={"preempt": "end"})})
    out, notes = epp_config(ends)
    assert [c.preemptible for c in out.classes] == [False, True] and not out.backends[0].resume
    assert "not resumed" in notes[0]
    shared = {"redis": {"url": "redis://127.0.0.1:1"}}
    redis = GatewayConfig.from_dict({"backends": [{"url": A}], "fleet": shared})
    with pytest.raises(ConfigError, match="Redis"):
        epp_config(redis)


def test_objectives_and_ttft_objectives_name_classes() -> None:
    cfg = GatewayConfig.from_dict({
        "classes": [{"name": "interactive", "rank": 0, "ttft_target_s": 0.5},
                    {"name": "standard", "rank": 1, "ttft_target_s": 5},
                    {"name": "batch", "rank": 2}],
        "epp": {"objectives": {"chat-premium": "interactive"}},
    })  # fmt: skip
    c = Classifier(cfg)
    assert c.objective("chat-premium") == "interactive"
    assert c.objective("batch") == "batch" and c.objective("nope") is None
    assert c.for_ttft_slo("10000") == "standard"  # the cheapest class that meets it
    assert c.for_ttft_slo("600") == "interactive"
    assert c.for_ttft_slo("100") == "interactive"  # none meets it: the best there is
    assert c.for_ttft_slo("soon") is None and c.for_ttft_slo("-1") is None
    with pytest.raises(ConfigError, match=r"epp\.objectives"):
        GatewayConfig.from_dict({"epp": {"objectives": {"x": "gold"}}})


def test_protocol_shapes() -> None:
    assert protocol.endpoint_of("http://10.1.2.3:8000") == "10.1.2.3:8000"
    assert protocol.endpoint_of("http://[fd00::1]:80") == "[fd00::1]:80"
    assert protocol.endpoint_of("http://10.1.2.3") == "10.1.2.3:80"
    md = base_pb2.Metadata()
    assert protocol.subset_hint(md) is None
    st = struct_pb2.Struct()
    st.update({"x-gateway-destination-endpoint-subset": "10.0.0.1:80, 10.0.0.2:80"})
    md.filter_metadata["envoy.lb.subset_hint"].CopyFrom(st)
    assert protocol.subset_hint(md) == ["10.0.0.1:80", "10.0.0.2:80"]
    assert protocol.served_endpoint(base_pb2.Metadata(), {}) is None
    served = {"x-gateway-destination-endpoint-served": "10.0.0.2:80"}
    assert protocol.served_endpoint(base_pb2.Metadata(), served) == "10.0.0.2:80"
