"""Index stress, long form: rounds of concurrent purges, S3 events (the purge's own, duplicated, out of order,
stale) and a foreign writer, on PostgreSQL and DynamoDB, versioned and unversioned buckets; after every round the
index is compared with a fresh index of what S3 holds (tests/support/stress.py).

Run from the repository root::

    .venv/bin/python bench/index_stress.py                      # 200 rounds per backend and bucket kind
    .venv/bin/python bench/index_stress.py --minutes 5          # or as many rounds as fit in 5 min each
    .venv/bin/python bench/index_stress.py --backend postgres --versioned yes --seed 1234 --rounds 50

Starts its own moto server and PostgreSQL cluster. Prints, per run, the rounds done, the interleavings met (purge
outcomes, stale reports, write conflicts, events delivered, duplicated, replayed, writer overwrites and deletes)
and every finding: the rows missing from or extra in the index, the objects indexed at the wrong version, and the
trace of what every thread did to those objects. Exit status 1 when anything was found.
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=int(os.environ.get("LAKEPURGE_STRESS_ROUNDS", "200")))
    parser.add_argument("--minutes", type=float, default=0.0, help="stop each run after this long (0: no limit)")
    parser.add_argument("--backend", choices=["postgres", "dynamodb", "both"], default="both")
    parser.add_argument("--versioned", choices=["yes", "no", "both"], default="both")
    parser.add_argument("--seed", type=int, default=None, help="first seed (default: random)")
    parser.add_argument("--no-writer", action="store_true", help="purges and events only, no foreign writer")
    parser.add_argument("--stop", action="store_true", help="stop a run at its first finding")
    args = parser.parse_args(argv)

    from lakepurge.local.moto import DUMMY_CREDENTIALS

    os.environ.update(DUMMY_CREDENTIALS)
    for leaked in ("AWS_PROFILE", "AWS_ENDPOINT_URL"):
        os.environ.pop(leaked, None)

    from lakepurge.local.moto import start_moto
    from lakepurge.local.postgres import start_postgres
    from tests.support.lakes import index_toml
    from tests.support.stress import Stress, StressOptions

    backends = ["postgres", "dynamodb"] if args.backend == "both" else [args.backend]
    kinds = {"both": [False, True], "yes": [True], "no": [False]}[args.versioned]
    seed = args.seed if args.seed is not None else random.randrange(1_000_000)
    postgres = start_postgres() if "postgres" in backends else None
    moto = start_moto()
    results = []
    try:
        for backend in backends:
            for versioned in kinds:
                body = index_toml(backend, postgres.dsn if postgres else None, table=f"stress-{seed}")
                deadline = time.monotonic() + args.minutes * 60 if args.minutes else None
                print(f"== {backend}, {'versioned' if versioned else 'unversioned'}, seed {seed}", flush=True)
                options = StressOptions(rounds=args.rounds, writer=not args.no_writer, stop_on_finding=args.stop)
                stress = Stress(body, seed, versioned, options, log=lambda line: print(line, flush=True))
                try:
                    result = stress.run(deadline)
                finally:
                    stress.close()
                print(result.describe(), flush=True)
                results.append(result)
                seed += 1
    finally:
        moto.stop()
        if postgres is not None:
            postgres.stop()
    found = sum(len(r.findings) for r in results)
    print(f"\n{sum(r.rounds for r in results)} rounds, {found} findings", flush=True)
    for result in results:
        print(result.describe())
        for finding in result.findings:
            print("  " + finding.summary().replace("\n", "\n  "))
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
