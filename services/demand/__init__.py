"""demand: task events and queue snapshots in, a DemandSignal out."""
