"""burstguard.core.gateway"""
