"""The seed's load test as burstguard's own data.

burstguard answers a Chinese article on bursty LLM traffic ("Burstiness is all you need for
LLM serving" read as an engineering guide). Its section 5.1 script, `burst_simulator.py`,
sends a burst of 15-30 chat requests at once (`random.randint(15, 30)`), each asking the
prompt below with `max_tokens=512` and `temperature=0.7`, waits for all of them, idles
`random.uniform(5, 15)` seconds and starts over; section 6.1 compares it with a steady test
of 32 concurrent users for 5 minutes. These constants are the defaults of the burst
pattern, the closed-loop cycle and the steady-vs-burst scenario, kept here once so that
every reading of "the seed's load test" agrees.
"""

from __future__ import annotations

from typing import Final

BURST_SIZE: Final = (15, 30)
"""Requests per burst, inclusive (the script's randint(15, 30))."""

IDLE_S: Final = (5.0, 15.0)
"""Idle gap after a burst in seconds (the script's uniform(5, 15))."""

PROMPT: Final = "用通俗的语言解释什么是量子纠缠，并给出三个生活化类比。"
"""The script's PROMPT ("explain quantum entanglement in plain words, with three everyday
analogies"): a short CJK prompt, 27 characters."""

STEADY_USERS: Final = 32
"""Section 6.1's steady leg: fixed concurrency 32."""


def range_text(bounds: tuple[float, float]) -> str:
    """`(15, 30)` as the CLI's `A-B` text ("15-30"; "5-15" for floats that are whole)."""
    return "-".join(f"{b:g}" for b in bounds)
