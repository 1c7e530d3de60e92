"""Progress lines for long waits, on stderr so that stdout stays parseable."""

import sys
import time


def say(message: str) -> None:
    print(f"[lab {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)
