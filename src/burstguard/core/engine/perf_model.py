"""Step-time models: how long one engine step takes, given what the batch holds.

Two kinds, both data-driven (figures live in profile YAML files, not here):

- `RooflineModel`: step = overhead + max(memory time, compute time). Memory: the weights
  are read once per step, plus the KV bytes of every context token attended to and every
  token written. Compute: 2 * params FLOPs per token processed plus the attention term
  4 * layers * (heads * head_dim) per (query token, context token) pair.
- `FittedModel`: a linear fit to measured step times (what `burstguard calibrate` writes):
  step = c0 + c_prefill_token * prefill_tokens + c_decode_seq * decode_seqs
         + c_context_token * context_tokens + c_prefill_seq * prefill_seqs
  (the last: a cost per request whose prompt the step prefills — on a real server the
  request's tokenisation and setup, which a burst pays once per request).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol


@dataclass(slots=True, init=False)
class BatchShape:
    """What a step computes, summed over its requests.

    prefill_tokens: tokens of prompt (or recompute) chunks; decode_seqs: requests that
    compute exactly their one newest token; context_tokens: KV tokens already cached that
    the step's attention reads; attention_pairs: (query, key) pairs of all attention;
    prefill_seqs: requests whose prefill starts in this step (their first chunk).

    One per step: its `__init__` is written out because mypyc (setup.py) compiles a
    written one but leaves the generated one to `dataclasses` (~10x slower, frozen ones
    more): the per-step and per-request value classes of the compiled modules do this.
    """

    prefill_tokens: int
    decode_seqs: int
    context_tokens: int
    attention_pairs: int
    prefill_seqs: int

    def __init__(
        self,
        prefill_tokens: int,
        decode_seqs: int,
        context_tokens: int,
        attention_pairs: int,
        prefill_seqs: int = 0,
    ) -> None:
        self.prefill_tokens = prefill_tokens
        self.decode_seqs = decode_seqs
        self.context_tokens = context_tokens
        self.attention_pairs = attention_pairs
        self.prefill_seqs = prefill_seqs

    @property
    def num_tokens(self) -> int:
        return self.prefill_tokens + self.decode_seqs


class PerfModel(Protocol):
    def step_time(self, batch: BatchShape) -> float: ...

    def decode_step_time(self, seqs: int, context_tokens: int) -> float:
        """`step_time` of a pure decode step of `seqs` requests over `context_tokens`
        cached tokens, to the last bit, without building its shape (the simulator's
        fast-forward asks it once per planned step)."""
        ...


@dataclass(frozen=True, slots=True)
class RooflineModel:
    """Roofline step time from model shape and hardware peaks, derated by efficiencies."""

    params: float
    weight_bytes: float
    kv_bytes_per_token: float
    attention_flops_per_pair: float
    mem_bandwidth_bytes_s: float
    peak_flops: float
    mem_efficiency: float
    compute_efficiency: float
    step_overhead_s: float

    def memory_time(self, batch: BatchShape) -> float:
        kv_bytes = self.kv_bytes_per_token * (batch.context_tokens + batch.num_tokens)
        return (self.weight_bytes + kv_bytes) / (self.mem_bandwidth_bytes_s * self.mem_efficiency)

    def compute_time(self, batch: BatchShape) -> float:
        flops = (
            2.0 * self.params * batch.num_tokens
            + self.attention_flops_per_pair * batch.attention_pairs
        )
        return flops / (self.peak_flops * self.compute_efficiency)

    def step_time(self, batch: BatchShape) -> float:
        if batch.num_tokens == 0:
            return 0.0
        return self.step_overhead_s + max(self.memory_time(batch), self.compute_time(batch))

    def decode_step_time(self, seqs: int, context_tokens: int) -> float:
        if seqs == 0:
            return 0.0
        kv_bytes = self.kv_bytes_per_token * (context_tokens + seqs)
        memory = (self.weight_bytes + kv_bytes) / (self.mem_bandwidth_bytes_s * self.mem_efficiency)
        flops = 2.0 * self.params * seqs + self.attention_flops_per_pair * (context_tokens + seqs)
        compute = flops / (self.peak_flops * self.compute_efficiency)
        return self.step_overhead_s + max(memory, compute)


@dataclass(frozen=True, slots=True)
class FittedModel:
    """Linear step-time model fitted from measurements (seconds per unit)."""

    c0_s: float
    c_prefill_token_s: float
    c_decode_seq_s: float
    c_context_token_s: float
    c_prefill_seq_s: float = 0.0

    def step_time(self, batch: BatchShape) -> float:
        if batch.num_tokens == 0:
            return 0.0
        return (
            self.c0_s
            + self.c_prefill_token_s * batch.prefill_tokens
            + self.c_decode_seq_s * batch.decode_seqs
            + self.c_context_token_s * batch.context_tokens
            + self.c_prefill_seq_s * batch.prefill_seqs
        )

    def decode_step_time(self, seqs: int, context_tokens: int) -> float:
        if seqs == 0:
            return 0.0
        return (
            self.c0_s
            + self.c_prefill_token_s * 0
            + self.c_decode_seq_s * seqs
            + self.c_context_token_s * context_tokens
            + self.c_prefill_seq_s * 0
        )
