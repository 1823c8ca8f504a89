"""decider: wakes on triggers, runs the predictive policy (and the agent), passes every action through guardrails."""

SERVICE = "decider"  # the source of what the decider publishes, and its queue group
