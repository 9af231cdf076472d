"""Start every rank of a script as a direct child and report each one's exit status, for tests that
must see how every process ended (Lightning's own launcher does not wait for the ranks it starts):

    python -m tests.scripts.launch NUM_PROCESSES MODULE [ARGS...]   (from the repository root)

Each rank runs ``python -m MODULE ARGS...`` with the environment of an external launcher (``torchrun``
style: ``MASTER_ADDR``, ``MASTER_PORT``, ``WORLD_SIZE``, ``NODE_RANK``, ``LOCAL_RANK``, ``RANK``), so Lightning
starts no processes of its own. Prints ``rank R exited with S`` per rank and exits 1 if any was not 0.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def main(num_processes: int, module: str, args: list[str]) -> int:
    port = _free_port()
    ranks = []
    for rank in range(num_processes):
        env = {
            **os.environ,
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": str(port),
            "WORLD_SIZE": str(num_processes),
            "NODE_RANK": "0",
            "LOCAL_RANK": str(rank),
            "RANK": str(rank),
        }
        ranks.append(subprocess.Popen([sys.executable, "-m", module, *args], env=env))
    codes = [process.wait() for process in ranks]
    for rank, code in enumerate(codes):
        print(f"rank {rank} exited with {code}", flush=True)
    return 0 if all(code == 0 for code in codes) else 1


if __name__ == "__main__":
    sys.exit(main(int(sys.argv[1]), sys.argv[2], sys.argv[3:]))
