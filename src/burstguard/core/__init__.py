"""burstguard.core"""
