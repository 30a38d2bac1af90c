"""`python -m profiling ...` (from the repository root): see cli.py or --help."""

import sys

from .cli import main

if __name__ == "__main__":
    sys.exit(main())
