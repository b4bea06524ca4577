"""burstguard.report"""
