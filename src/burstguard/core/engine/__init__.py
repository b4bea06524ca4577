"""burstguard.core.engine"""
