"""A stand-in for the job system (a proving cluster): tasks from a trace, run by workers on rented instances."""
