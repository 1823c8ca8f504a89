"""What FleetPilot is measured with, beside the stand-ins in sim/ and never imported by services/ or shared/:
a local model runtime (llm/) and the agent evaluation (agent/)."""
