"""`sim --retry`: simulated clients that send a request again after a retryable error, as
`bench --retry` does. A burst shed with 429 comes back after its Retry-After and is
served; each request keeps one record, timed from its first try, with its tries listed."""

from __future__ import annotations

import subprocess

from tests.conftest import BURSTGUARD
from tests.unit.test_sim_gateway import ENGINE, EXAMPLE, H100, burst_workload

from burstguard.client.retry import RetryPolicy
from burstguard.core.gateway.config import GatewayConfig
from burstguard.sim.client_retries import ClientRetry
from burstguard.sim.gateway_loop import simulate_gateway


def test_shed_requests_come_back_after_their_retry_after_and_are_served() -> None:
    workload = burst_workload()
    config = GatewayConfig.load(EXAMPLE)
    once = simulate_gateway(workload, ENGINE, H100, config)
    retry = ClientRetry(RetryPolicy("exponential", max_retries=3))
    again = simulate_gateway(workload, ENGINE, H100, config, retry=retry)
    shed = [r for r in once.records if r.status == 429]
    assert len(shed) > 50 and all(r.retries == 0 for r in once.records)
    assert [r.id for r in again.records] == [r.id for r in once.records]  # one per request
    retried = [r for r in again.records if r.retries]
    assert len(retried) >= len(shed)
    assert all(r.retries == 3 for r in again.records if r.status == 429)  # all tries spent
    served = sum(r.ok for r in again.records)
    assert served > sum(r.ok for r in once.records) + len(shed) // 2
    for r in retried:
        assert len(r.attempts) == r.retries <= 3
        assert all(a["error"] in ("http_429", "http_503", "stream_broken") for a in r.attempts)
        # its answer came after every earlier try's Retry-After (in the engine's time)
        waited = sum(a["delay_s"] for a in r.attempts)
        told = [(a["delay_s"], a["retry_after_s"]) for a in r.attempts if a["retry_after_s"]]
        assert all(delay >= min(after, 60.0) for delay, after in told)  # capped at 60 s
        assert r.e2e_s is not None and r.e2e_s >= waited
        if r.ok:  # timed from its first try, as bench counts a retried request's TTFT
            assert r.ttft_s is not None and r.ttft_s >= waited


def test_sim_retry_flags_say_what_is_wrong() -> None:
    res = subprocess.run(
        [*BURSTGUARD, "sim", "--pattern", "poisson", "--rate", "2", "--duration", "5",
         "--retry", "exponential"], capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert res.returncode != 0 and "--retry: needs --gateway or --autoscaler" in res.stderr
    assert "Traceback" not in res.stderr
    res = subprocess.run(
        [*BURSTGUARD, "sim", "--pattern", "poisson", "--rate", "2", "--duration", "5",
         "--gateway", str(EXAMPLE), "--retry", "sometimes"], capture_output=True, text=True,
        timeout=60,
    )  # fmt: skip
    assert res.returncode != 0 and "--retry 'sometimes'" in res.stderr
