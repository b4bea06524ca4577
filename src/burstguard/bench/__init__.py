"""burstguard.bench"""
