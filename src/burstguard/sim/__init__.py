"""burstguard.sim"""
