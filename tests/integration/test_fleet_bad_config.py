"""Bad fleet configs at `burstguard gateway` start: a clear error naming the field and
exit 2, or — where that is the documented behaviour — a warning and degraded mode; never
a traceback."""

from __future__ import annotations

import json
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

import yaml
from tests.conftest import BURSTGUARD, start_fleet_gateway

from burstguard.procs import free_port


def run_gateway(
    tmp_path: Path, config: dict[str, object], *flags: str
) -> subprocess.CompletedProcess[str]:
    path = tmp_path / "gw.yaml"
    path.write_text(yaml.safe_dump(config))
    argv = [*BURSTGUARD, "gateway", "--config", str(path), "--port", str(free_port()), *flags]
    return subprocess.run(argv, capture_output=True, text=True, timeout=60)


def assert_refused(res: subprocess.CompletedProcess[str], *needles: str) -> None:
    out = res.stdout + res.stderr
    assert res.returncode == 2, out
    assert "Traceback" not in out, out
    for n in needles:
        assert n in out, out


def test_duplicate_backends(tmp_path: Path) -> None:
    res = run_gateway(
        tmp_path, {}, "--backend", "http://127.0.0.1:9", "--backend", "http://127.0.0.1:9/"
    )
    assert_refused(res, "--backend 2", "same backend as --backend 1")
    res = run_gateway(tmp_path, {}, "--backend", "http://127.0.0.1:9", "--backend", "http://a b")
    assert_refused(res, "--backend 2", "'http://a b' is not an http")
    res = run_gateway(tmp_path, {"backends": [{"url": "http://h:1"}, {"url": "HTTP://H:1"}]})
    assert_refused(res, "backends.1", "same backend as backends.0")


def test_unresolvable_dns_name(tmp_path: Path) -> None:
    cfg = {"fleet": {"discovery": {"dns": {"name": "no-such-host.invalid", "port": 8000}}}}
    assert_refused(run_gateway(tmp_path, cfg), "fleet.discovery.dns.name", "no-such-host.invalid")


def test_unreadable_backend_file(tmp_path: Path) -> None:
    cfg = {"fleet": {"discovery": {"file": {"path": str(tmp_path / "missing.txt")}}}}
    assert_refused(run_gateway(tmp_path, cfg), "fleet.discovery.file.path")


def test_required_redis_unreachable_names_the_field(tmp_path: Path) -> None:
    port = free_port()  # nothing listens there
    cfg = {"fleet": {"redis": {"url": f"redis://127.0.0.1:{port}", "required": True}}}
    res = run_gateway(tmp_path, cfg, "--backend", "http://127.0.0.1:9")
    assert_refused(res, "fleet.redis.url", "cannot reach Redis")
    cfg = {"fleet": {"redis": {"url": f"mysql://127.0.0.1:{port}"}}}
    assert_refused(run_gateway(tmp_path, cfg, "--backend", "http://127.0.0.1:9"), "fleet.redis.url")


def test_a_dns_name_the_resolver_cannot_encode_names_the_field(tmp_path: Path) -> None:
    """An empty or over-long label is the resolver's UnicodeError (not an OSError): it was
    a traceback at start."""
    for name in ("a..b", "a" * 300):
        cfg = {"fleet": {"discovery": {"dns": {"name": name, "port": 8000}}}}
        assert_refused(run_gateway(tmp_path, cfg), "fleet.discovery.dns.name", "not a host name")


def test_a_redis_url_its_client_cannot_parse_names_the_field(tmp_path: Path) -> None:
    """A port out of range or a bad option: the client's ValueError was a traceback."""
    for url, why in (("redis://127.0.0.1:99999", "Port out of range"),
                     ("redis://127.0.0.1:1?socket_timeout=abc", "socket_timeout")):  # fmt: skip
        res = run_gateway(tmp_path, {"fleet": {"redis": {"url": url}}}, "--backend", "http://h:1")
        assert_refused(res, "fleet.redis.url", why)


def test_optional_redis_unreachable_serves_degraded(tmp_path: Path, emulator: str) -> None:
    port = free_port()
    cfg = {"fleet": {"redis": {"url": f"redis://127.0.0.1:{port}"}}}
    gw = start_fleet_gateway(tmp_path, [emulator], cfg)
    with gw:
        base = gw.base_url  # type: ignore[attr-defined]
        body = b'{"model": "llama3-8b-h100", "prompt": "hi", "max_tokens": 4}'
        req = urllib.request.Request(
            base + "/v1/completions", body, {"content-type": "application/json"}
        )
        assert urllib.request.urlopen(req, timeout=30).status == 200
        metrics = urllib.request.urlopen(base + "/metrics").read().decode()
        assert "burstguard_shared_state_degraded 1.0" in metrics
    log = (tmp_path / f"gateway-{base.rsplit(':', 1)[1]}.log").read_text()
    assert "Redis unreachable" in log and "Traceback" not in log


def test_ready_while_one_backend_is_healthy(tmp_path: Path, emulator: str) -> None:
    dead = f"http://127.0.0.1:{free_port()}"  # nothing listens there

    def ready(base: str) -> tuple[int, dict[str, object]]:
        try:
            with urllib.request.urlopen(base + "/ready", timeout=5) as resp:
                return resp.status, json.loads(resp.read())
        except urllib.error.HTTPError as exc:
            return exc.code, json.loads(exc.read())

    with start_fleet_gateway(tmp_path, [dead, emulator], {}) as gw:
        base = gw.base_url  # type: ignore[attr-defined]
        time.sleep(1.5)  # three failed probes open the dead one's circuit
        assert ready(base) == (200, {"status": "ready", "healthy_backends": 1})
    with start_fleet_gateway(tmp_path, [dead], {}) as gw:
        time.sleep(1.5)
        status, body = ready(gw.base_url)  # type: ignore[attr-defined]
        assert status == 503 and "no healthy backend" in str(body)


def test_every_backend_down_is_answered_not_held(tmp_path: Path) -> None:
    """Two backends where nothing listens, both circuits open, and a class with no queue
    deadline: a request is answered 429 no_backend with a Retry-After once the outage has
    lasted `max_outage_wait_s`, and the next one at once (it used to be held until the
    client gave up)."""
    dead = [f"http://127.0.0.1:{free_port()}" for _ in range(2)]
    cfg = {"classes": [{"name": "only", "rank": 0}], "default_class": "only",
           "fleet": {"health": {"max_outage_wait_s": 2.0}}}  # fmt: skip
    body = json.dumps({"model": "m", "prompt": "hi", "max_tokens": 3}).encode()

    def post(base: str) -> tuple[int, str | None, dict[str, object], float]:
        req = urllib.request.Request(base + "/v1/completions", data=body)
        t0 = time.monotonic()
        try:
            with urllib.request.urlopen(req, timeout=20) as resp:
                return resp.status, None, json.loads(resp.read()), time.monotonic() - t0
        except urllib.error.HTTPError as exc:
            retry = exc.headers.get("retry-after")
            return exc.code, retry, json.loads(exc.read()), time.monotonic() - t0

    with start_fleet_gateway(tmp_path, dead, cfg) as gw:
        base = gw.base_url  # type: ignore[attr-defined]
        time.sleep(1.5)  # failed probes open both circuits: a request now can only wait
        for within_s in (10.0, 0.5):
            status, retry, answer, took = post(base)
            assert status == 429 and retry is not None and int(retry) >= 1, answer
            assert answer["error"]["code"] == "no_backend", answer  # type: ignore[index]
            assert took < within_s
