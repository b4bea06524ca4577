"""The seed's troubleshooting order over recorded runs: retry storm, queue, batch building,
KV memory, scaling lag (`burstguard diagnose`)."""
