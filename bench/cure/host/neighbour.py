"""A co-tenant that eats the host's memory: the data loader or second job the field reports
blame. WORKERS processes (a PyTorch DataLoader's workers are processes too), each growing to
TARGET_MIB / WORKERS MiB over RAMP_S seconds, touching every page, then holding it.

    python3 neighbour.py WORKERS TARGET_MIB RAMP_S

Each worker is smaller than vLLM's own worker process, as a data loader's are beside a
serving GPU process: the OOM killer picks by a process's own size."""

import os
import sys
import time

MIB = 2**20


def grow(share_mib: int, ramp_s: float) -> None:
    held = []
    started = time.monotonic()
    while len(held) < share_mib:
        due = share_mib if ramp_s <= 0 else int(share_mib * min(1.0, (time.monotonic() - started) / ramp_s))
        while len(held) < due:
            held.append(bytearray(b"n" * MIB))
        time.sleep(0.2)
    while True:
        time.sleep(60)


def main() -> None:
    workers, target_mib, ramp_s = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
    for _ in range(workers):
        if os.fork() == 0:
            grow(target_mib // workers, ramp_s)
    for _ in range(workers):
        os.wait()


if __name__ == "__main__":
    main()
