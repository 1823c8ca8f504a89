"""The world simulator: a task trace replayed against a simulated fleet under a scaling policy, scored once."""
