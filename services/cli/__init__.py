"""The `fleetpilot` command line: run services, simulators, benchmarks, and talk to the fleet."""
