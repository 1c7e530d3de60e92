#!/usr/bin/env python3
"""Run hostkit's GPU verification on this machine, outside any deploy.

It runs the `gpu` snapshot section's own command (`GpuFact().command()`) with `sh -c`, as
pyinfra would, then the same parser and policy as the `verify_gpu` operation. Prints the
one-line summary (exit 0) or every failed check with expected and actual values (exit 1).

    python3 scripts/gpu_verify.py                        # defaults: a GPU required
    python3 scripts/gpu_verify.py --gpu-count 8 --min-driver 999
    python3 scripts/gpu_verify.py --save-raw gpu.txt     # keep the raw section output
    python3 scripts/gpu_verify.py --from-file gpu.txt    # judge a recorded output
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from hostkit.facts.gpu import GpuFact  # noqa: E402
from hostkit.plan.gpu_policy import GpuPolicy, evaluate  # noqa: E402


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--not-required", action="store_true", help="gpu_required: false")
    parser.add_argument("--gpu-count", type=int, help="gpu_count")
    parser.add_argument("--min-driver", help="gpu_min_driver, e.g. 580.65")
    parser.add_argument(
        "--no-require-persistence", action="store_true", help="gpu_require_persistence: false"
    )
    parser.add_argument("--max-ecc-uncorrected", type=int, default=0)
    parser.add_argument("--max-retired-pages-pending", type=int, default=0)
    parser.add_argument("--max-remapped-rows-pending", type=int, default=0)
    parser.add_argument("--tolerate-xid", type=int, action="append", default=[], metavar="CODE")
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--from-file", type=Path, help="judge this recorded section output")
    source.add_argument("--save-raw", type=Path, help="also write the raw section output here")
    return parser.parse_args(argv)


def policy_from_args(args: argparse.Namespace) -> GpuPolicy:
    return GpuPolicy(
        required=not args.not_required,
        count=args.gpu_count,
        min_driver=args.min_driver,
        require_persistence=not args.no_require_persistence,
        max_ecc_uncorrected=args.max_ecc_uncorrected,
        max_retired_pages_pending=args.max_retired_pages_pending,
        max_remapped_rows_pending=args.max_remapped_rows_pending,
        tolerated_xids=frozenset(args.tolerate_xid),
    )


def section_output(args: argparse.Namespace) -> str:
    if args.from_file:
        return args.from_file.read_text()
    result = subprocess.run(
        ["sh", "-c", GpuFact().command()], capture_output=True, text=True, check=False
    )
    if args.save_raw:
        args.save_raw.write_text(result.stdout)
    return result.stdout


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    facts = GpuFact().process(section_output(args).splitlines())
    verdict = evaluate(policy_from_args(args), facts)
    print(("PASS " if verdict.ok else "FAIL ") + verdict.report())
    return 0 if verdict.ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
