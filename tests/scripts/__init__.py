"""Scripts the Lightning tests run in their own processes (python -m tests.scripts.NAME ...)."""
