"""`burstguard calibrate`: fit an emulator profile from a real engine's measured behaviour."""
