"""Engine configuration: the vLLM scheduler and cache flags, validated the way vLLM does.

Names and defaults follow vLLM's engine arguments so that a configuration tuned in
`burstguard sim` can be pasted onto `vllm serve`.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal

from burstguard.errors import ConfigError

SchedulingPolicy = Literal["fcfs", "priority"]
SCHEDULING_POLICIES: tuple[str, ...] = ("fcfs", "priority")


class EngineConfigError(ConfigError, ValueError):
    """An engine setting vLLM would refuse; the message names the flag and the fix."""


@dataclass(frozen=True, slots=True)
class EngineConfig:
    """vLLM-named engine settings. `max_model_len=None` takes the profile's model length."""

    max_num_seqs: int = 256
    max_num_batched_tokens: int = 8192
    max_model_len: int | None = None
    gpu_memory_utilization: float = 0.9
    enable_chunked_prefill: bool = True
    scheduling_policy: SchedulingPolicy = "fcfs"
    block_size: int = 16
    enable_prefix_caching: bool = False
    num_gpu_blocks_override: int | None = None
    """KV blocks regardless of the profile's memory (vLLM's flag of that name)."""

    def __post_init__(self) -> None:
        if self.max_num_seqs < 1:
            raise EngineConfigError(f"--max-num-seqs must be >= 1 (got {self.max_num_seqs})")
        if self.max_num_batched_tokens < 1:
            raise EngineConfigError(
                f"--max-num-batched-tokens must be >= 1 (got {self.max_num_batched_tokens})"
            )
        if self.max_num_batched_tokens < self.max_num_seqs:
            raise EngineConfigError(
                f"--max-num-batched-tokens ({self.max_num_batched_tokens}) must be >= "
                f"--max-num-seqs ({self.max_num_seqs}), as vLLM requires"
            )
        if self.max_model_len is not None and self.max_model_len < 2:
            raise EngineConfigError(f"--max-model-len must be >= 2 (got {self.max_model_len})")
        if not 0.0 < self.gpu_memory_utilization <= 1.0:
            raise EngineConfigError(
                f"--gpu-memory-utilization must be in (0, 1] (got {self.gpu_memory_utilization})"
            )
        if self.num_gpu_blocks_override is not None and self.num_gpu_blocks_override < 1:
            raise EngineConfigError(
                f"--num-gpu-blocks-override must be >= 1 (got {self.num_gpu_blocks_override})"
            )
        if self.scheduling_policy not in SCHEDULING_POLICIES:
            raise EngineConfigError(
                f"--scheduling-policy must be one of {', '.join(SCHEDULING_POLICIES)} "
                f"(got {self.scheduling_policy!r})"
            )
        if self.block_size not in (1, 8, 16, 32, 64, 128):
            raise EngineConfigError(
                f"block_size must be one of 1, 8, 16, 32, 64, 128 (got {self.block_size})"
            )
        self._check_model_len()

    def _check_model_len(self) -> None:
        """Without chunked prefill a prompt runs in one step, so vLLM demands a token
        budget of at least the model length."""
        if (
            self.max_model_len is not None
            and not self.enable_chunked_prefill
            and self.max_num_batched_tokens < self.max_model_len
        ):
            raise EngineConfigError(
                f"--max-num-batched-tokens ({self.max_num_batched_tokens}) is smaller than "
                f"--max-model-len ({self.max_model_len}) with chunked prefill off: a prompt "
                "would never fit one step. Raise --max-num-batched-tokens, lower "
                "--max-model-len, or pass --enable-chunked-prefill"
            )

    def resolved(self, model_max_len: int) -> EngineConfig:
        """This config with `max_model_len` filled in from the model, validated again."""
        if self.max_model_len is None:
            return replace(self, max_model_len=model_max_len)
        if self.max_model_len > model_max_len:
            raise EngineConfigError(
                f"--max-model-len ({self.max_model_len}) is longer than the model's "
                f"maximum ({model_max_len})"
            )
        return self
