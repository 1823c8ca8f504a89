"""FleetPilot services: each folder is one service (pure core, app wiring, metrics)."""
