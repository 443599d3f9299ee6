"""Fault injection, long form: purges under many random fault schedules (S3 503 SlowDown, 500, resets before
forwarding and after S3 applied a request, bodies cut midway, slow answers, on the lake's data keys and the reports
bucket; PostgreSQL restarted or shut down for a few requests), in-process and on Spark, on PostgreSQL and DynamoDB.
After each run the checks of tests/support/faultsuite.py: no other user's byte changed, nothing certified while a
version holds the users, the certificate's counts equal what the lake shows erased, and a rerun without faults
verified, every placeholder recorded. tests/integration/test_fault_injection.py is the short form.

Run from the repository root::

    .venv/bin/python bench/fault_stress.py                          # 40 schedules per engine and backend
    .venv/bin/python bench/fault_stress.py --minutes 10             # or as many as fit in 10 min each
    .venv/bin/python bench/fault_stress.py --engine inline --backend postgres --seed 1234 --cases 5

Starts its own moto server, PostgreSQL cluster and (for --engine spark or both) a local Spark session. Prints each
schedule with a finding (a seed replays the same schedules; the threads' timing still varies), then a summary.
Exit status 1 when anything was found.
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
    parser.add_argument("--cases", type=int, default=40, help="schedules per engine and backend")
    parser.add_argument("--minutes", type=float, default=0.0, help="stop each engine and backend after this long")
    parser.add_argument("--engine", choices=["inline", "spark", "both"], default="both")
    parser.add_argument("--backend", choices=["postgres", "dynamodb", "both"], default="both")
    parser.add_argument("--seed", type=int, default=None, help="first seed (default: random)")
    args = parser.parse_args(argv)

    from lakepurge.local.moto import DUMMY_CREDENTIALS

    os.environ.update(DUMMY_CREDENTIALS)
    for leaked in ("AWS_PROFILE", "AWS_ENDPOINT_URL"):
        os.environ.pop(leaked, None)

    from lakepurge.local.moto import start_moto
    from lakepurge.local.postgres import start_postgres
    from tests.support.faults import FaultProxy
    from tests.support.faultsuite import FaultCase, Outcome, random_schedule

    engines = ["inline", "spark"] if args.engine == "both" else [args.engine]
    backends = ["postgres", "dynamodb"] if args.backend == "both" else [args.backend]
    seed = args.seed if args.seed is not None else random.randrange(1_000_000)
    moto = start_moto()
    postgres = start_postgres() if "postgres" in backends else None
    proxy = FaultProxy(moto.endpoint)
    spark = None
    if "spark" in engines:
        from lakepurge.core.sparkutil import local_session

        spark = local_session("lakepurge-fault-stress")
        spark.sparkContext.setLogLevel("OFF")
    found: list[tuple[str, str, int, Outcome]] = []
    runs = 0
    try:
        for engine in engines:
            for backend in backends:
                rng = random.Random(seed)  # a test schedule, not security
                print(f"== {engine}, {backend}, seed {seed}", flush=True)
                deadline = time.monotonic() + args.minutes * 60 if args.minutes else None
                for number in range(args.cases):
                    if deadline is not None and time.monotonic() > deadline:
                        break
                    schedule = random_schedule(rng, backend)
                    started = time.monotonic()
                    case = FaultCase(backend, postgres.dsn if postgres else None, postgres, seed=rng.randrange(1000))
                    outcome = case.run(schedule, proxy, spark if engine == "spark" else None)
                    runs += 1
                    state = {True: "verified", False: "not verified", None: "raised"}[outcome.verified]
                    mark = "FINDING" if outcome.findings else "ok"
                    print(
                        f"  {number:3d} {mark:7s} {state:12s} {len(outcome.fired):2d} faults fired"
                        f" {time.monotonic() - started:5.1f} s  {schedule.name}",
                        flush=True,
                    )
                    if outcome.verified is None and not outcome.findings:  # raised before erasing anything
                        print(f"      raised: {outcome.error}", flush=True)
                    if outcome.findings:
                        print("      " + outcome.describe().replace("\n", "\n      "), flush=True)
                        found.append((engine, backend, number, outcome))
                    moto.reset()
                seed += 1
    finally:
        proxy.stop()
        if spark is not None:
            spark.stop()
        moto.stop()
        if postgres is not None:
            postgres.stop()
    print(f"\n{runs} schedules, {len(found)} with findings", flush=True)
    for engine, backend, number, outcome in found:
        print(f"- {engine}, {backend}, #{number}: {outcome.describe()}")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
