"""Where the Endpoint Picker's CPU goes: the picker in this process behind a real Envoy.

An instant emulator and Envoy (bench_epp.py's, FULL_DUPLEX_STREAMED) as children, the
picker (`EndpointPicker`) in this process, and a child client holding `--concurrency`
closed-loop streaming completions (bench_gateway.py's: 32-token prompt, 64 output tokens)
through Envoy for `--seconds`. Prints the response pieces per request and the CPU per
request of the picker (this process) and of Envoy; with `--profile`, the picker's
cProfile by own time. `--pieces`: instead, the picker's own Python per response piece
timed apart from gRPC (parse the message, relay, answer, serialize) on a 64-token chat
stream.

Run it alone (a timing): flock /work/notes/bench.lock .venv/bin/python
benchmarks/profile_epp.py [--concurrency 64] [--seconds 6] [--profile] [--pieces]
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import multiprocessing as mp
import pstats
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import bench_epp as be
import bench_gateway as bg
from envoy.config.core.v3 import base_pb2
from envoy.service.ext_proc.v3 import external_processor_pb2 as pb

from burstguard.core.gateway.config import GatewayConfig
from burstguard.live.epp import server
from burstguard.procs import ManagedProcess, free_port


def _client(base: str, concurrency: int, seconds: float, out: Any) -> None:
    args = argparse.Namespace(concurrency=concurrency, phase_seconds=seconds, think_s=0.0,
                              step_ms=0.0, output_tokens=64)  # fmt: skip
    phase = asyncio.run(bg.run_phase("envoy+epp", base, args, bg.body(64), {}))
    out.put((len(phase.samples), phase.errors, phase.wall))


def live(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        e_port, grpc_port = free_port(), free_port()
        direct = f"http://127.0.0.1:{e_port}"
        emulator = ManagedProcess(
            [sys.executable, "-m", "burstguard.cli", "emulate", "--profile",
             bg.engine_profile(tmp / "profile.yaml", 0.0), "--port", str(e_port),
             "--served-model-name", bg.MODEL, "--max-num-seqs", "1024",
             "--max-num-batched-tokens", "65536"], f"{direct}/health",
        )  # fmt: skip
        cap = 4 * args.concurrency
        cfg = GatewayConfig.from_dict({
            "backends": [{"url": direct}], "log_requests": False,
            "admission": {"max_in_flight": cap, "adapt": False, "max_queue_requests": cap},
            "epp": {"grpc_port": grpc_port, "metrics_port": free_port()},
        })  # fmt: skip
        proxy = be.envoy(tmp, "envoy-epp", grpc_port, None)
        picker = server.EndpointPicker(cfg)
        pieces = 0
        relay = picker._response_body

        def counted(st: Any, body: Any) -> Any:
            nonlocal pieces
            pieces += 1
            return relay(st, body)

        picker._response_body = counted  # type: ignore[method-assign]
        prof = cProfile.Profile() if args.profile else None

        async def serve() -> None:
            await picker.start()
            try:
                with proxy:
                    assert proxy.proc is not None
                    results: Any = mp.Queue()
                    base = proxy.base_url  # type: ignore[attr-defined]
                    load = (base, args.concurrency, args.seconds, results)
                    client = mp.Process(target=_client, args=load)
                    client.start()
                    envoy0, cpu0 = bg.proc_cpu(proxy.proc.pid), time.process_time()
                    if prof is not None:
                        prof.enable()
                    while client.is_alive():
                        await asyncio.sleep(0.1)
                    if prof is not None:
                        prof.disable()
                    cpu, envoy_cpu = (
                        time.process_time() - cpu0,
                        bg.proc_cpu(proxy.proc.pid) - envoy0,
                    )
                    n, errors, wall = results.get()
                    each = f"picker {cpu / n * 1e3:.3f} ms, Envoy {envoy_cpu / n * 1e3:.3f} ms"
                    print(f"{n} requests ({errors} errors) in {wall:.1f} s, {pieces / n:.1f} "
                          f"response pieces per request; CPU per request: {each}")  # fmt: skip
            finally:
                await picker.stop()

        with emulator:
            asyncio.run(serve())
        if prof is not None:
            pstats.Stats(prof).sort_stats("tottime").print_stats(20)


def own_python(rounds: int) -> None:
    """The picker's Python per response piece, apart from gRPC."""
    cfg = GatewayConfig.from_dict({"backends": [{"url": "http://127.0.0.1:9"}],
                                   "log_requests": False})  # fmt: skip
    picker = server.EndpointPicker(cfg)
    picker.event = lambda event: None  # type: ignore[method-assign]  # not the core's cost
    head = ('{"id":"chatcmpl-0123456789abcdef","object":"chat.completion.chunk",'
            '"created":1765000000,"model":"llama3-8b-h100"')  # fmt: skip
    events = [f'{head},"choices":[{{"index":0,"delta":{{"role":"assistant","content":""}},'
              '"finish_reason":null}]}']  # fmt: skip
    events += [f'{head},"choices":[{{"index":0,"delta":{{"content":" tok{i}"}},'
               '"finish_reason":null}]}' for i in range(64)]  # fmt: skip
    events += [f'{head},"choices":[],"usage":{{"prompt_tokens":32,"completion_tokens":64,'
               '"total_tokens":96}}}', "[DONE]"]  # fmt: skip
    raw = [pb.ProcessingRequest(response_body=pb.HttpBody(
        body=f"data: {e}\n\n".encode(), end_of_stream=i == len(events) - 1,
    )).SerializeToString() for i, e in enumerate(events)]  # fmt: skip
    status = base_pb2.HeaderValue(key=":status", raw_value=b"200")
    headers = pb.ProcessingRequest(response_headers=pb.HttpHeaders(
        headers=base_pb2.HeaderMap(headers=[status]))).SerializeToString()  # fmt: skip

    def stream() -> None:
        ex = server._Exchange("r", "standard", "t", "/v1/chat/completions", True, 0.0, 32)
        st = server._Stream(ex=ex)
        picker._response_headers(st, pb.ProcessingRequest.FromString(headers))
        for r in raw:
            msg = pb.ProcessingRequest.FromString(r)
            for answer in picker._response_body(st, msg.response_body):
                answer.SerializeToString()

    stream()
    t0 = time.process_time()
    for _ in range(rounds):
        stream()
    per = (time.process_time() - t0) / (rounds * len(raw))
    print(f"the picker's Python per response piece: {per * 1e6:.2f} us ({rounds} streams)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--seconds", type=float, default=6.0)
    parser.add_argument("--profile", action="store_true", help="the picker under cProfile")
    parser.add_argument("--pieces", action="store_true",
                        help="the picker's Python per piece, apart from gRPC")  # fmt: skip
    args = parser.parse_args()
    if args.pieces:
        own_python(2000)
        return
    if not be.ENVOY.is_file():
        parser.error(f"{be.ENVOY} not found: run `make envoy`")
    live(args)


if __name__ == "__main__":
    main()
