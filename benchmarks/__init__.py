"""`make bench`: one module per subject, each runnable alone as `python -m benchmarks.<name>`."""
