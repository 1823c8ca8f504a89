"""`python -m services.bench.gpu_suite`: the suite run as the served script runs it on a rented machine."""

from __future__ import annotations

import sys

from services.bench.gpu_suite.cli import main

if __name__ == "__main__":
    sys.exit(main())
