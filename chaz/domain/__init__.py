"""Domain models and rules of chaz: pure Python, no I/O."""
