"""burstguard.live.gateway"""
