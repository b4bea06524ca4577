"""The GPU step-time model fitted from measured kernels (`kernel_fit` profiles).

A step runs its kernels one after another, so their times add (per GPU of a
tensor-parallel group, each holding 1/tp of the weights, heads and KV):

- linear ops (QKV, output projection, MLP, norms, rope, activation, residual, embedding),
  fitted to measured per-op medians: GEMMs as a roofline whose memory and compute times
  blend by a p-norm (`knee`; p = inf is the hard max) plus elementwise ops as a floor and
  activation bytes per token; then multiplied by the measured/fitted ratio at the
  measured token counts (`correction`: cuBLAS tile steps no smooth curve follows);
- lm_head: its weights read once, its FLOPs once per sampled sequence;
- attention and the KV read: roofline at the fitted efficiencies (no measured kernels);
- tensor-parallel all-reduces: 2 per layer, a latency plus the ring's bytes over the link;
- a serving overhead per step and a cost per request whose prefill starts in the step.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field

from burstguard.core.engine.perf_model import BatchShape
from burstguard.core.engine.specs import ModelShape


def knee(a: float, b: float, p: float) -> float:
    """The p-norm of two times: max(a, b) as p -> inf, a + b at p = 1."""
    if a <= 0 or b <= 0:
        return max(a, b)
    hi, lo = (a, b) if a >= b else (b, a)
    # (hi / hi) ** p is exactly 1.0: one power fewer, the same bits (a step's attention
    # asks for this once per simulated step)
    return hi * (1.0 + (lo / hi) ** p) ** (1.0 / p)


@dataclass(frozen=True, slots=True)
class LinearOps:
    """Time of the linear ops of a step of n tokens, in seconds (per GPU)."""

    weight_read_s: float
    """Dense weights / (bandwidth x mem_efficiency)."""
    flops_per_token_s: float
    """2 x dense params / (peak x compute_efficiency)."""
    knee: float
    elementwise_s: float
    """The fixed cost of the elementwise ops (their kernel launches)."""
    elementwise_per_token_s: float
    correction_tokens: tuple[float, ...] = field(default=(), repr=False)
    correction_ratio: tuple[float, ...] = field(default=(), repr=False)
    _memo: dict[float, float] = field(default_factory=dict, repr=False, compare=False)
    """time(n) by n: a simulator asks for the same few batch sizes millions of times."""

    def smooth(self, n: float) -> float:
        gemm = knee(self.weight_read_s, self.flops_per_token_s * n, self.knee)
        return gemm + self.elementwise_s + self.elementwise_per_token_s * n

    def ratio(self, n: float) -> float:
        """The correction at n: linear between measured token counts, the end values
        beyond them (bisect, not numpy: the simulator asks once per step)."""
        xs, ys = self.correction_tokens, self.correction_ratio
        if not xs:
            return 1.0
        i = bisect.bisect_left(xs, n)
        if i == 0:
            return ys[0]
        if i == len(xs):
            return ys[-1]
        x0, x1 = xs[i - 1], xs[i]
        return ys[i - 1] + (ys[i] - ys[i - 1]) * (n - x0) / (x1 - x0)

    def time(self, n: float) -> float:
        t = self._memo.get(n)
        if t is None:
            t = self._memo[n] = self.smooth(n) * self.ratio(n) if n > 0 else 0.0
        return t


@dataclass(frozen=True, slots=True)
class KernelModel:
    """Step time = serving overhead + linear ops + lm_head + attention + all-reduces +
    per-request cost (module docstring)."""

    linear: LinearOps
    head_read_s: float
    head_flops_per_seq_s: float
    kv_read_per_token_s: float
    attention_per_pair_s: float
    allreduce_step_s: float
    """The all-reduces' latency per step (2 x layers x latency; 0 without TP)."""
    allreduce_per_token_s: float
    step_overhead_s: float
    request_overhead_s: float
    _head_memo: dict[int, float] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )
    """head time by sequences in the step: a few hundred values, asked for once a step."""

    def attention_time(self, batch: BatchShape) -> float:
        return self._attention(batch.context_tokens + batch.num_tokens, batch.attention_pairs)

    def _attention(self, kv_tokens: int, pairs: int) -> float:
        kv = self.kv_read_per_token_s * kv_tokens
        return knee(kv, self.attention_per_pair_s * pairs, self.linear.knee)

    def head_time(self, batch: BatchShape) -> float:
        return self._head(batch.decode_seqs + batch.prefill_seqs)

    def _head(self, seqs: int) -> float:
        t = self._head_memo.get(seqs)
        if t is None:
            t = knee(self.head_read_s, self.head_flops_per_seq_s * seqs, self.linear.knee)
            self._head_memo[seqs] = t
        return t

    def step_time(self, batch: BatchShape) -> float:
        n, seqs = batch.num_tokens, batch.decode_seqs + batch.prefill_seqs
        return self._time(n, seqs, batch.context_tokens + n, batch.attention_pairs,
                          batch.prefill_seqs)  # fmt: skip

    def decode_step_time(self, seqs: int, context_tokens: int) -> float:
        """`step_time` of a pure decode step (the fast-forward's; `PerfModel`): that of
        BatchShape(0, seqs, context_tokens, context_tokens + seqs), without building it."""
        return self._time(seqs, seqs, context_tokens + seqs, context_tokens + seqs, 0)

    def _time(self, n: int, seqs: int, kv_tokens: int, pairs: int, prefill_seqs: int) -> float:
        """A step of `n` tokens for `seqs` sequences, reading `kv_tokens` of KV over `pairs`
        attention pairs, `prefill_seqs` of whose prefills start in it."""
        if n == 0:
            return 0.0
        return (
            self.step_overhead_s
            + self.linear.time(n)
            + self._head(seqs)
            + self._attention(kv_tokens, pairs)
            + self.allreduce_step_s
            + self.allreduce_per_token_s * n
            + self.request_overhead_s * prefill_seqs
        )


def linear_ops(
    shape: ModelShape,
    *,
    tp: int,
    bandwidth_bytes_s: float,
    peak_flops: float,
    mem_efficiency: float,
    compute_efficiency: float,
    knee: float,
    elementwise_s: float,
    activation_bytes_per_token: float,
    correction: tuple[tuple[float, ...], tuple[float, ...]] = ((), ()),
) -> LinearOps:
    """The linear ops of `shape` on one GPU of `tp`, from the fitted figures."""
    bw, fl = bandwidth_bytes_s * mem_efficiency, peak_flops * compute_efficiency
    return LinearOps(
        weight_read_s=shape.dense_params * shape.dtype_bytes / tp / bw,
        flops_per_token_s=2.0 * shape.dense_params / tp / fl,
        knee=knee,
        elementwise_s=elementwise_s,
        elementwise_per_token_s=activation_bytes_per_token / bw,
        correction_tokens=correction[0],
        correction_ratio=correction[1],
    )


def kernel_model(
    shape: ModelShape,
    linear: LinearOps,
    *,
    tp: int,
    bandwidth_bytes_s: float,
    peak_flops: float,
    mem_efficiency: float,
    compute_efficiency: float,
    interconnect_bytes_s: float | None,
    allreduce_latency_s: float,
    allreduce_efficiency: float,
    step_overhead_s: float,
    request_overhead_s: float,
) -> KernelModel:
    """The whole step model: `linear` plus the roofline terms the kernel table lacks."""
    bw, fl = bandwidth_bytes_s * mem_efficiency, peak_flops * compute_efficiency
    ring_step = per_token = 0.0
    if tp > 1:
        if interconnect_bytes_s is None:
            raise ValueError("tensor parallelism needs the GPU's interconnect_bytes_s")
        allreduces = 2 * shape.num_layers
        ring_bytes = 2.0 * (tp - 1) / tp * shape.hidden_size * shape.dtype_bytes
        ring_step = allreduces * allreduce_latency_s
        per_token = allreduces * ring_bytes / (interconnect_bytes_s * allreduce_efficiency)
    return KernelModel(
        linear=linear,
        head_read_s=shape.head_params * shape.dtype_bytes / tp / bw,
        head_flops_per_seq_s=2.0 * shape.head_params / tp / fl,
        kv_read_per_token_s=shape.kv_bytes_per_token / tp / bw,
        attention_per_pair_s=shape.attention_flops_per_pair / tp / fl,
        allreduce_step_s=ring_step,
        allreduce_per_token_s=per_token,
        step_overhead_s=step_overhead_s,
        request_overhead_s=request_overhead_s,
    )
