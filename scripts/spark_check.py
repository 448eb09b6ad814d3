"""Runs docs/RANK_SUMMARIES.md's first-anomaly query in Spark SQL and compares it with `analyzer merge`.

Usage: spark_check.py DOC WORK, WORK as scripts/sql-check leaves it (NAME-summaries/, NAME-merge.json and
NAME-merge.code per job). The view statement is the page's Spark one with the path replaced; the query is
the page's, unchanged.
"""

import json
import sys
from pathlib import Path

from pyspark.sql import SparkSession

from sql_check import section, sql_block_after


def main(doc_path, work):
    sql = section(Path(doc_path).read_text(), "The first anomaly in SQL")
    view = sql_block_after(sql, "Spark SQL").rstrip(";")
    query = sql_block_after(sql, "The query:")
    spark = (
        SparkSession.builder.master("local[1]")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.session.timeZone", "UTC")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    failed = 0
    for job in ("overflow", "healthy"):
        files = Path(work) / f"{job}-summaries"
        spark.catalog.dropTempView("rank_summaries")
        spark.sql(view.replace("summaries/*.parquet", f"{files}/*.parquet"))
        rows = [tuple(r) for r in spark.sql(query).collect()]
        merge = json.loads((Path(work) / f"{job}-merge.json").read_text())
        expected = [(o["rank"], o["step"], o["op"]) for o in merge["origins"]][:1]
        got = [(r[0], r[1], r[5]) for r in rows]
        ok = got == expected
        failed += not ok
        print(f"spark-check: {job}: Spark SQL answers {got}, merge {expected}: {'ok' if ok else 'FAIL'}", file=sys.stderr)
    print(f"spark-check: Spark {spark.version}: {2 - failed} of 2 jobs agree with merge", file=sys.stderr)
    spark.stop()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
