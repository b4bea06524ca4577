"""burstguard.live.scaling"""
