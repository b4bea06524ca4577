"""burstguard: reproduce, absorb, plan for and guard against bursty LLM traffic."""

__version__ = "0.1.0"
