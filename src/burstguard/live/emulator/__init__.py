"""burstguard.live.emulator"""
