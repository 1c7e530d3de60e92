"""Write README.md's inventory key tables from hostkit's profile (hostkit.profile.keys_table).

    python3 scripts/readme_keys.py          # rewrite the tables in README.md
    python3 scripts/readme_keys.py --check  # exit 1 when they are not what the profile gives
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from hostkit.profile.keys_table import with_tables  # noqa: E402

README = Path(__file__).resolve().parents[1] / "README.md"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true")
    args = parser.parse_args()
    current = README.read_text()
    wanted = with_tables(current)
    if args.check:
        if wanted != current:
            print("README.md's key tables are not the profile's: run python3 scripts/readme_keys.py")
            return 1
        return 0
    README.write_text(wanted)
    return 0


if __name__ == "__main__":
    sys.exit(main())
