"""burstguard.client"""
