"""FleetPilot's own shared package: the contract, subject names, streams, settings, clock and bus helpers."""
