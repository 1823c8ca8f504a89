"""Scaling policies the world can run: FleetPilot's predictive policy (the real decider core) and the baselines."""
