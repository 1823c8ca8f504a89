"""The provisioner: the only FleetPilot service that talks to vast.ai."""
