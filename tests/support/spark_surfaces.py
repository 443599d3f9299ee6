"""A purge on Spark in a process of its own, with what Spark shows and writes about it switched on: the UI (whose REST
API's answers are saved before the session stops), the event log, and the JVM's log at INFO. The shared test session
has the UI and the event log off, and a process holds one SparkContext.

    python -m tests.support.spark_surfaces CONFIG_TOML OUT_DIR CONTROL USER...

Writes OUT_DIR/events/ (the event log), OUT_DIR/jvm.log (the JVM's log at INFO), OUT_DIR/rest-<endpoint>.json and
OUT_DIR/request_id. CONTROL is a string put where those surfaces show it (a configuration property, a job-local
property): a search that finds it there would find an id there too. Run by tests/integration/
test_sealed_ids_on_spark.py, with the test's moto and PostgreSQL.
"""

from __future__ import annotations

import os
import sys
import urllib.request
from pathlib import Path

ENDPOINTS = ("jobs", "stages?details=true", "environment", "executors", "sql")
# The JVM's whole log, at INFO, to OUT_DIR/jvm.log (Spark's default profile, and its filter on the console of a
# Python session, show warnings only); warnings still reach stderr.
LOG4J2 = """rootLogger.level = info
rootLogger.appenderRef.file.ref = file
rootLogger.appenderRef.stderr.ref = console
appender.file.type = File
appender.file.name = file
appender.file.fileName = {path}
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = %d{{HH:mm:ss}} %p %c{{1}}: %m%n
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{{HH:mm:ss}} %p %c{{1}}: %m%n
"""


def main(argv: list[str]) -> int:
    config, out_dir, control, *users = argv
    out = Path(out_dir)
    (out / "events").mkdir(parents=True, exist_ok=True)
    from pyspark.sql import SparkSession

    from lakepurge.core.config import load_settings
    from lakepurge.core.logs import root_logger
    from lakepurge.core.sparkutil import check_java
    from lakepurge.ops.manual_purge import purge_users

    root_logger(stream=sys.stderr)  # the library's logs, at INFO, as a job's entry point has them
    check_java()
    (out / "log4j2.properties").write_text(LOG4J2.format(path=out / "jvm.log"))
    os.environ["PYSPARK_PYTHON"] = sys.executable  # the workers run this interpreter, as local_session has them
    spark = (
        SparkSession.builder.master("local[2]")
        .appName("lakepurge-sealed-surfaces")
        .config("spark.ui.enabled", "true")
        .config("spark.ui.port", "0")
        .config("spark.eventLog.enabled", "true")
        .config("spark.eventLog.dir", (out / "events").as_uri())
        .config("spark.eventLog.compress", "false")  # searchable as it is written
        .config("spark.python.worker.reuse", "true")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.extraJavaOptions", f"-Dlog4j2.configurationFile=file:{out / 'log4j2.properties'}")
        .config("spark.log.level", "INFO")
        .config("spark.lakepurge.test.control", control)
        .getOrCreate()
    )
    spark.sparkContext.setLocalProperty("lakepurge.test.control", control)
    run = purge_users(load_settings(Path(config)), users, dry_run=False, force=True, engine="spark", say=print)
    assert run.result is not None and run.result.verified, "the purge did not verify"
    (out / "request_id").write_text(run.request_id)
    base = f"{spark.sparkContext.uiWebUrl}/api/v1/applications/{spark.sparkContext.applicationId}"
    for endpoint in ENDPOINTS:
        with urllib.request.urlopen(f"{base}/{endpoint}", timeout=30) as answer:
            (out / f"rest-{endpoint.split('?')[0]}.json").write_bytes(answer.read())
    spark.stop()  # the event log is complete once the application ends
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
