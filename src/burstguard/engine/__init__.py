"""burstguard.engine"""
