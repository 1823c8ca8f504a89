"""Decider policies: pure strategies from (signal, snapshot, now, config) to a Recommendation, one per module."""

from services.decider.policy.base import (
    LaunchPlan,
    Policy,
    PolicyFigures,
    Recommendation,
    RemovalPlan,
    RemovalVerb,
    TunablePolicy,
)
from services.decider.policy.config import PolicyConfig
from services.decider.policy.predictive import PredictivePolicy, recommend

__all__ = [
    "LaunchPlan",
    "Policy",
    "PolicyConfig",
    "PolicyFigures",
    "PredictivePolicy",
    "Recommendation",
    "RemovalPlan",
    "RemovalVerb",
    "TunablePolicy",
    "recommend",
]
