"""Virtual-clock driver for gateway + engine: `burstguard sim --gateway gateway.yaml`.

The same GatewayCore the live server runs (one core, two clocks) sits in front of the same
EngineCore the emulator runs, and this loop plays the server's part with a virtual clock,
event for event, so a policy compared here is the policy deployed:

- an arrival is `submit`ted at its arrival time; a rejection is answered at once (429 with
  Retry-After), evicted queued requests are answered 429 with the server's Retry-After;
- `dispatch` (the server's `pump`) runs after every submit and finish, on every scrape and
  on the 50 ms tick that also `expire`s requests past their class's queue deadline;
- the backend monitor is a scrape of the engine's own gauges (waiting, running, KV usage)
  every `scrape_interval_s`, as the live monitor reads them from /metrics;
- a released request reaches the engine at once (no HTTP hop) with the engine's default
  priority, as the live gateway forwards it; first tokens and finishes flow back to the core.

While nothing is queued, in flight or running, the clock jumps to the next arrival (after
one scrape of the idle engine), so days-long traces do not cost 20 ticks per idle second.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from burstguard.bench.records import RequestRecord
from burstguard.engine.config import EngineConfig
from burstguard.engine.core import EngineCore, EngineRequest, RequestRejected
from burstguard.engine.profile import Profile
from burstguard.gateway.config import GatewayConfig
from burstguard.gateway.core import (
    TICK_S,
    BackendState,
    GatewayCore,
    GatewayRequest,
    GatewayStats,
)
from burstguard.sim.loop import RecordBook, SimResult, served_prompt
from burstguard.workload.spec import Workload

__all__ = ["GatewaySimResult", "gateway_summary", "simulate_gateway"]


@dataclass
class GatewaySimResult(SimResult):
    """SimResult plus the gateway's own counters (outcomes by class, rejection reasons)."""

    gateway: GatewayStats | None = None


def _next_on_grid(t: float, period: float) -> float:
    """The first multiple of `period` at or after `t` (live ticks keep their phase)."""
    return math.ceil(t / period - 1e-9) * period


class _GatewaySim:
    """One run: the gateway core, the engine core, the records and the virtual clock."""

    def __init__(
        self, workload: Workload, engine: EngineConfig, profile: Profile, gateway: GatewayConfig
    ) -> None:
        self.workload = workload
        self.config = gateway
        self.gw = GatewayCore(gateway)
        self.engine = EngineCore(engine, profile)
        self.book = RecordBook()
        self.state: BackendState | None = None
        self.max_tokens: dict[str, int] = {}
        self.steps = 0

    # -- the server's part -------------------------------------------------------------

    def scrape(self) -> None:
        s = self.engine.stats
        self.state = BackendState(s.num_waiting, s.num_running, s.kv_cache_usage)

    def pump(self, now: float) -> None:
        """`Gateway.pump`: release what the core allows; each goes straight to the engine."""
        for r in self.gw.dispatch(now, self.state):
            rec = self.book.records[r.id]
            try:
                self.engine.add_request(
                    EngineRequest(r.id, rec.prompt_tokens, self.max_tokens[r.id], now), now
                )
            except RequestRejected:  # the backend's 400 passes through to the client
                self.gw.fail(r.id, now)
                rec.status, rec.error, rec.e2e_s = 400, "http_400", now - rec.scheduled_s

    def shed(self, req: GatewayRequest, now: float) -> None:
        """`Gateway._shed`: a queued request answered 429 (evicted or past its deadline)."""
        rec = self.book.records[req.id]
        cost = req.prompt_tokens + (req.max_tokens or self.config.predictor.default_max_tokens)
        retry = self.gw.retry_after(req.priority_class, now, cost)
        self._rejected(rec, now, retry)

    @staticmethod
    def _rejected(rec: RequestRecord, now: float, retry_after_s: float | None) -> None:
        rec.status, rec.error = 429, "rejected"
        rec.e2e_s = now - rec.scheduled_s  # when the 429 reached the client
        rec.retry_after_s = retry_after_s

    def arrive(self, i: int) -> None:
        spec = self.workload.spec(i)
        now = spec.arrival_s
        cls = self.config.class_by_name(spec.priority_class).name
        rec = self.book.open(spec, served_prompt(spec, self.engine.profile), priority_class=cls)
        self.max_tokens[spec.id] = spec.max_tokens
        req = GatewayRequest(spec.id, now, spec.prompt_tokens, spec.max_tokens, cls, spec.tenant)
        adm = self.gw.submit(req, now)
        for victim in adm.evicted:
            self.shed(victim, now)
        if not adm.accepted:
            self._rejected(rec, now, adm.retry_after_s)
            return
        self.pump(now)

    def tick(self, now: float) -> None:
        for r in self.gw.expire(now):
            self.shed(r, now)
        self.pump(now)

    def end_step(self) -> float:
        result = self.engine.end_step()
        self.steps += 1
        now = result.end_s
        events = self.book.apply(result)
        for rid in events.first_token:
            self.gw.on_first_token(rid, now)
        for rid in events.finished:
            self.gw.on_finish(rid, now, self.book.produced.get(rid, 0))
        if events.finished:
            self.pump(now)
        return now

    def idle(self) -> bool:
        s = self.gw.stats
        return (
            not self.engine.step_in_flight
            and not self.engine.has_unfinished
            and s.in_flight_requests == 0
            and not any(s.queue_depth.values())
        )

    # -- the clock ---------------------------------------------------------------------

    def run(self) -> GatewaySimResult:
        arrivals = self.workload.arrival_s.tolist()
        n = len(arrivals)
        interval = self.config.scrape_interval_s
        i, now = 0, 0.0
        step_end: float | None = None
        next_tick, next_scrape = TICK_S, 0.0
        while True:
            if step_end is None and self.idle():
                if i >= n:
                    break
                if arrivals[i] > max(next_tick, next_scrape):  # nothing to happen till then
                    self.scrape()
                    next_tick = _next_on_grid(arrivals[i], TICK_S)
                    next_scrape = _next_on_grid(arrivals[i], interval)
            # the next event; ties: step end, arrivals, scrape, tick (as numbered)
            events = [
                (step_end if step_end is not None else math.inf, 0),
                (arrivals[i] if i < n else math.inf, 1),
                (next_scrape, 2),
                (next_tick, 3),
            ]
            now, kind = min(events)
            if kind == 0:
                self.end_step()
                step_end = None
            elif kind == 1:
                while i < n and arrivals[i] <= now:
                    self.arrive(i)
                    i += 1
            elif kind == 2:
                self.scrape()
                self.pump(now)
                next_scrape += interval
            else:
                self.tick(now)
                next_tick += TICK_S
            if step_end is None:
                step_end = self.engine.begin_step(now)
        records = [self.book.records[self.workload.request_id(k)] for k in range(n)]
        return GatewaySimResult(
            records=records,
            preemptions=self.engine.stats.num_preemptions_total,
            steps=self.steps,
            end_s=now,
            gateway=self.gw.stats,
        )


def simulate_gateway(
    workload: Workload, engine: EngineConfig, profile: Profile, gateway: GatewayConfig
) -> GatewaySimResult:
    """Runs `workload` through the gateway policies of `gateway` into one engine, in
    virtual time; every request ends completed, rejected (429) or refused by the engine."""
    return _GatewaySim(workload, engine, profile, gateway).run()


def gateway_summary(
    result: GatewaySimResult, config: GatewayConfig, source: str = ""
) -> dict[str, Any]:
    """The summary's `gateway` block: per class, what was shed and who met its TTFT target
    (a shed request counts as a miss: the promise is to the caller, not to the engine)."""
    classes: dict[str, Any] = {}
    for c in sorted(config.classes, key=lambda c: c.rank):
        mine = [r for r in result.records if r.priority_class == c.name]
        shed = sum(1 for r in mine if r.status == 429)
        met = None
        if c.ttft_target_s is not None and mine:
            target = c.ttft_target_s
            hit = sum(1 for r in mine if r.ok and r.ttft_s is not None and r.ttft_s <= target)
            met = hit / len(mine)
        classes[c.name] = {
            "requests": len(mine),
            "completed": sum(1 for r in mine if r.ok),
            "rejected": shed,
            "shed_fraction": shed / len(mine) if mine else None,
            "ttft_target_s": c.ttft_target_s,
            "ttft_target_attainment": met,
        }
    rejections = result.gateway.rejections if result.gateway is not None else {}
    return {"config": source, "classes": classes, "rejections": rejections}
