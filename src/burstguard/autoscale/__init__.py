"""Autoscaler policies (KEDA+HPA, Knative KPA, predictive) and the fleet they size.

Pure cores: events in, effects out, `now` passed in. See docs/autoscaling.md.
"""

from burstguard.autoscale.cold_start import COLD_START_PRESETS, ColdStartModel, Phase
from burstguard.autoscale.config import PRESETS, ScalingPolicy, load_policy
from burstguard.autoscale.controller import ScalingController
from burstguard.autoscale.fleet import (
    DrainReplica,
    Fleet,
    FleetCounts,
    FleetEffect,
    FleetSample,
    ReplicaReady,
    StartReplica,
    StopReplica,
    count_reversals,
)
from burstguard.autoscale.policy import Autoscaler, Decision, Signals

__all__ = [
    "COLD_START_PRESETS",
    "PRESETS",
    "Autoscaler",
    "ColdStartModel",
    "Decision",
    "DrainReplica",
    "Fleet",
    "FleetCounts",
    "FleetEffect",
    "FleetSample",
    "Phase",
    "ReplicaReady",
    "ScalingController",
    "ScalingPolicy",
    "Signals",
    "StartReplica",
    "StopReplica",
    "count_reversals",
    "load_policy",
]
