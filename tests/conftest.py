"""Every test, and every process a test starts, runs single-threaded BLAS: the machines have 2 cores."""

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")
