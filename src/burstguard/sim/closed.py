"""Closed-loop clients in virtual time: `sim --concurrency N` (users with think time, the
seed's steady leg) and `sim --burst-cycle` (the seed's script: a burst, wait for all of it,
idle). Unlike a trace, the next arrival depends on when earlier requests finish, so the
driver (`sim.loop.DirectSim`, the open loop's) asks the client after every finish, and
runs of decode steps are not fast-forwarded past one.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Protocol

from burstguard.engine.config import EngineConfig
from burstguard.engine.profile import Profile
from burstguard.sim.loop import DirectSim, SimResult
from burstguard.workload.cycle import Burst, BurstCycle
from burstguard.workload.spec import RequestSpec, Workload


class Client(Protocol):
    """Arrivals in, given finishes: `start()` the first ones, `finished(id, t)` the ones a
    finish at `t` causes (each arrival is a RequestSpec whose `arrival_s` is its time);
    `shapes` is the pool its requests are drawn from (its prefix block size counts)."""

    shapes: Workload

    def start(self) -> list[RequestSpec]: ...

    def finished(self, request_id: str, now: float) -> list[RequestSpec]: ...


@dataclass
class Users:
    """N users; each sends its next request `think_s` after its previous one ended, until
    `duration_s`. User starts are spread over `ramp_up_s`, as bench's closed loop does."""

    shapes: Workload
    users: int
    duration_s: float
    think_s: float = 0.0
    ramp_up_s: float = 0.0

    def __post_init__(self) -> None:
        self._n = 0
        self._owner: dict[str, int] = {}

    def _send(self, user: int, at: float) -> list[RequestSpec]:
        if at >= self.duration_s:
            return []
        spec = replace(self.shapes.spec(self._n % len(self.shapes)), id=f"c{self._n}",
                       arrival_s=at)  # fmt: skip
        self._owner[spec.id] = user
        self._n += 1
        return [spec]

    def start(self) -> list[RequestSpec]:
        return [
            s for u in range(self.users) for s in self._send(u, self.ramp_up_s * u / self.users)
        ]

    def finished(self, request_id: str, now: float) -> list[RequestSpec]:
        return self._send(self._owner.pop(request_id), now + self.think_s)


@dataclass
class Cycle:
    """The seed's burst cycle (`workload.cycle.BurstCycle`) as a sim client."""

    shapes: Workload
    cycle: BurstCycle

    def __post_init__(self) -> None:
        self._n = 0
        self._open: set[str] = set()

    def _burst(self, burst: Burst | None) -> list[RequestSpec]:
        if burst is None:
            return []
        specs = []
        for i in range(burst.size):
            spec = self.shapes.spec(self._n % len(self.shapes))
            specs.append(replace(spec, id=f"b{burst.index}-{i}", arrival_s=burst.start_s))
            self._n += 1
        self._open = {s.id for s in specs}
        return specs

    def start(self) -> list[RequestSpec]:
        return self._burst(self.cycle.first())

    def finished(self, request_id: str, now: float) -> list[RequestSpec]:
        self._open.discard(request_id)
        return [] if self._open else self._burst(self.cycle.next(now))


def simulate_closed(
    client: Client, config: EngineConfig, profile: Profile, fast_forward: bool = True
) -> SimResult:
    """Runs the client's requests to completion on one engine in virtual time (records in
    the order the client made them). `fast_forward` as in `sim.loop.simulate`: runs of
    decode steps end at the first finish, since a finish sends the next request."""
    sim = DirectSim(config, profile, client.shapes.prefix_block_tokens, fast_forward,
                    client.finished)  # fmt: skip
    sim.send(client.start())
    return sim.run()
