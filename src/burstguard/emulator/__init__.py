"""burstguard.emulator"""
