"""decider: wakes on triggers, runs the predictive policy (and the agent), passes every action through guardrails."""
