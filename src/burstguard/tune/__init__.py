"""`burstguard tune`: search engine flags (and autoscaler settings) in virtual time for
the best goodput per replica-second under per-class SLOs. See docs/autoscaling.md."""
