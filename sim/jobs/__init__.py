"""A stand-in for the job system (a proving cluster): tasks arrive from a trace, workers on rented instances run them."""
