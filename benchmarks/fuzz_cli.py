"""A long fuzz of the CLI: N generated command lines (default 10,000), counting the ones that fail.

    python benchmarks/fuzz_cli.py [--examples 10000] [--seed 1]

Prints the count of failures and the first few of each kind, and the five slowest command lines; the same cases and check as the test suite's
fuzz (tests/fuzzing.py), many more of them. Exits 1 when any failed.
"""

from __future__ import annotations

import argparse
import collections
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from hypothesis import HealthCheck, given, seed, settings  # noqa: E402

from tests.fuzzing import command_lines, timed_check  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", type=int, default=10_000)
    parser.add_argument("--seed", type=int, default=1)
    options = parser.parse_args()
    failures: dict[str, list] = collections.defaultdict(list)
    count = 0
    slowest: list = []
    start = time.perf_counter()

    @seed(options.seed)
    @settings(max_examples=options.examples, deadline=None, database=None, suppress_health_check=list(HealthCheck))
    @given(command_lines())
    def run(args):
        nonlocal count
        count += 1
        problem, seconds = timed_check(args)
        slowest.append((seconds, args))
        slowest.sort(key=lambda x: -x[0])
        del slowest[5:]
        if problem is not None:
            failures[problem.split(":")[0]].append((args, problem))

    run()
    elapsed = time.perf_counter() - start
    total = sum(len(v) for v in failures.values())
    print(f"{count} command lines in {elapsed:.0f} s: {total} failed")
    for kind, cases in sorted(failures.items()):
        print(f"  {len(cases)} x {kind}")
        for args, problem in cases[:3]:
            print(f"      {' '.join(args)[:200]}\n        -> {problem[:300]}")
    print("slowest: " + "; ".join(f"{s:.1f} s {' '.join(a)[:120]}" for s, a in slowest))
    return 1 if total else 0


if __name__ == "__main__":
    sys.exit(main())
