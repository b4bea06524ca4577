"""`burstguard epp`: the gateway's core as a Gateway API Inference Extension Endpoint Picker."""
