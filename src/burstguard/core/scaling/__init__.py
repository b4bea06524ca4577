"""Autoscaler policies (KEDA+HPA, Knative KPA, predictive) and the fleet they size.

Pure cores: events in, effects out, `now` passed in. See docs/autoscaling.md.
"""

from burstguard.core.scaling.cold_start import COLD_START_PRESETS, ColdStartModel, Phase
from burstguard.core.scaling.config import PRESETS, ScalingPolicy, load_policy
from burstguard.core.scaling.controller import ScalingController
from burstguard.core.scaling.policy import Autoscaler, Decision, Signals
from burstguard.core.scaling.replica_pool import (
    DrainReplica,
    FleetCounts,
    FleetEffect,
    FleetSample,
    ReplicaPool,
    ReplicaReady,
    StartReplica,
    StopReplica,
    count_reversals,
)

__all__ = [
    "COLD_START_PRESETS",
    "PRESETS",
    "Autoscaler",
    "ColdStartModel",
    "Decision",
    "DrainReplica",
    "FleetCounts",
    "FleetEffect",
    "FleetSample",
    "Phase",
    "ReplicaPool",
    "ReplicaReady",
    "ScalingController",
    "ScalingPolicy",
    "Signals",
    "StartReplica",
    "StopReplica",
    "count_reversals",
    "load_policy",
]
