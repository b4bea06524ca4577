"""burstguard.gateway"""
