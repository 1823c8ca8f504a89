"""Which module builds each service: `fleetpilot run <service>` starts it, `fleetpilot asyncapi` documents it."""

from __future__ import annotations

# service name -> module whose `create_app(settings)` builds its ASGI app
SERVICES = {
    "bench": "services.bench.app",
    "decider": "services.decider.app",
    "demand": "services.demand.app",
    "fleet": "services.fleet.app",
    "provisioner": "services.provisioner.app",
}
