"""burstguard.workload"""
