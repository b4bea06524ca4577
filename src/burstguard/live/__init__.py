"""burstguard.live"""
