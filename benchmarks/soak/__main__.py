"""Run the soak: ``python -m benchmarks.soak --help``."""

import sys

from benchmarks.soak.main import main

sys.exit(main())
