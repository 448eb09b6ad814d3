"""Checks `analyzer scan`'s Parquet rank summaries with DuckDB against docs/RANK_SUMMARIES.md.

Usage: sql_check.py DOC WORK, where WORK holds, per job (overflow, healthy), NAME-summaries/ (scan's files),
NAME-scan.json (scan's report), NAME-merge.json and NAME-merge.code (merge's report and exit status);
scripts/sql-check makes them. Every check that fails is printed; the exit status is 1 if any did.
"""

import json
import re
import sys
from pathlib import Path

import duckdb

DOC_TYPES = {"INT64": "BIGINT", "DOUBLE": "DOUBLE", "BOOLEAN": "BOOLEAN", "STRING": "VARCHAR"}

failures = []
checks = 0


def check(ok, what):
    global checks
    checks += 1
    if not ok:
        failures.append(what)
        print(f"FAIL: {what}", file=sys.stderr)


def section(doc, heading):
    """The text of a `## heading` section, up to the next one."""
    start = doc.index(f"\n## {heading}\n")
    end = doc.find("\n## ", start + 1)
    return doc[start : end if end >= 0 else len(doc)]


def sql_block_after(text, marker):
    """The first ```sql block after `marker`."""
    at = text.index(marker)
    m = re.compile(r"```sql\n(.*?)```", re.S).search(text, at)
    return m.group(1).strip()


def table_rows(text):
    """Cells of a markdown table's body rows whose first cell is `code`."""
    rows = []
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("| `") and len(cells) >= 2:
            rows.append([c.strip("`") for c in cells])
    return rows


def main(doc_path, work):
    doc = Path(doc_path).read_text()
    columns = table_rows(section(doc, "Columns"))
    keys = [r[0] for r in table_rows(section(doc, "File"))]
    sql = section(doc, "The first anomaly in SQL")
    view = sql_block_after(sql, "DuckDB:")
    query = sql_block_after(sql, "The query:")
    completeness = sql_block_after(sql, "The completeness query:")
    check(len(columns) >= 20 and len(keys) == 9, f"the page's tables were found ({len(columns)} columns, {len(keys)} keys)")
    # The series files' columns: the rows of the Series section's tables that give a type.
    series_columns = [r for r in table_rows(section(doc, "Series")) if len(r) >= 4 and r[1] in DOC_TYPES]
    check(len(series_columns) == 13, f"the page's series columns were found ({len(series_columns)})")
    series_keys = ["accutrace.summary_version", "accutrace.run", "accutrace.rank", "accutrace.series_points"]

    answers = {}
    for job in ["overflow", "healthy"]:
        summaries = Path(work) / f"{job}-summaries"
        scan = json.loads((Path(work) / f"{job}-scan.json").read_text())
        merge = json.loads((Path(work) / f"{job}-merge.json").read_text())
        merge_code = int((Path(work) / f"{job}-merge.code").read_text())
        con = duckdb.connect()
        con.execute(view.replace("summaries/", f"{summaries}/"))

        # The columns, in order, with the documented types; those never null are not.
        described = con.execute("DESCRIBE rank_summaries").fetchall()
        got = [(name, ty) for name, ty, *_ in described]
        want = [(c[0], DOC_TYPES.get(c[1], c[1])) for c in columns]
        check(got == want, f"{job}: columns as documented:\n  got  {got}\n  want {want}")
        for c in columns:
            if c[2] == "never":
                nulls = con.execute(f"SELECT COUNT(*) FROM rank_summaries WHERE {c[0]} IS NULL").fetchone()[0]
                check(nulls == 0, f"{job}: column {c[0]} is never null (found {nulls})")

        # Metadata: the documented keys, this version, the rank and event count of each file.
        written = {s["rank"]: s for s in scan["summaries"]}
        check(sorted(written) == [0, 1, 2, 3], f"{job}: scan wrote ranks 0-3: {sorted(written)}")
        kv = con.execute(
            f"SELECT file_name, decode(key), decode(value) FROM parquet_kv_metadata('{summaries}/*.parquet')"
        ).fetchall()
        by_file = {}
        for file, key, value in kv:
            by_file.setdefault(Path(file).name, {})[key] = value
        check(len(by_file) == 4, f"{job}: 4 files read: {sorted(by_file)}")
        for name, meta in by_file.items():
            check(sorted(meta) == sorted(keys), f"{job}/{name}: metadata keys {sorted(meta)} == {sorted(keys)}")
            rank = int(meta.get("accutrace.rank", -1))
            check(name == f"rank{rank:06}.parquet", f"{job}/{name}: named after its rank {rank}")
            check(meta.get("accutrace.summary_version") == "3", f"{job}/{name}: summary version 3")
            events = con.execute(
                f"SELECT COUNT(DISTINCT event), MAX(event) + 1 FROM read_parquet('{summaries}/{name}')"
            ).fetchone()
            said = written.get(rank, {}).get("events")
            check(
                events == (said, said) and str(said) == meta.get("accutrace.events"),
                f"{job}/{name}: {events} events in the rows, scan said {said}, metadata {meta.get('accutrace.events')}",
            )
            problems = json.loads(meta.get("accutrace.problems", "null"))
            check(problems == [], f"{job}/{name}: no input problems: {problems}")
            selection = json.loads(meta.get("accutrace.selection", "null"))
            check(selection == {"steps": [], "ranks": [], "ops": []}, f"{job}/{name}: no selection: {selection}")
            check(meta.get("accutrace.job_ranks") == "4", f"{job}/{name}: a job of 4 ranks: {meta.get('accutrace.job_ranks')}")
            made = json.loads(meta.get("accutrace.communicators", "null"))
            check(
                isinstance(made, list)
                and any(c.get("comm_size") == 4 and c.get("comm_rank") == rank and c.get("comm", "").startswith("root-") for c in made),
                f"{job}/{name}: made a communicator spanning the 4 ranks: {made}",
            )

        # The completeness query: every rank here, every collective's members; over two files, not.
        present = con.execute(completeness).fetchall()
        check(present == [(4, merge["calls"], 0)], f"{job}: completeness over every file: {present}")
        part = duckdb.connect()
        two = ", ".join(f"'{summaries}/rank{r:06}.parquet'" for r in (0, 1))
        part.execute(f"CREATE VIEW rank_summaries AS SELECT * FROM read_parquet([{two}])")
        partial = part.execute(completeness).fetchall()
        check(
            len(partial) == 1 and partial[0][0] == 2 and partial[0][2] > 0,
            f"{job}: completeness over ranks 0-1 says ranks and members are missing: {partial}",
        )

        # Every collective's output is the same on all its members (a healthy reduction), by hash.
        disagreeing = con.execute(
            "SELECT comm, seq FROM rank_summaries WHERE kind = 'collective' AND io = 'output' "
            "GROUP BY comm, seq HAVING COUNT(DISTINCT hash) > 1"
        ).fetchall()
        check(disagreeing == [], f"{job}: collective outputs agree across members: {disagreeing}")
        calls = con.execute(
            "SELECT COUNT(*) FROM (SELECT DISTINCT rank, event FROM rank_summaries WHERE kind = 'collective')"
        ).fetchone()[0]
        check(calls == merge["calls"], f"{job}: {calls} HCCL calls in the files, merge counted {merge['calls']}")

        # The series files: columns and metadata as documented, a loss per rank and step, inf/NaN only
        # where the overflow put them.
        series = Path(summaries) / "series"
        con.execute(f"CREATE VIEW rank_series AS SELECT * FROM read_parquet('{series}/*.parquet')")
        got = [(name, ty) for name, ty, *_ in con.execute("DESCRIBE rank_series").fetchall()]
        want = [(c[0], DOC_TYPES.get(c[1], c[1])) for c in series_columns]
        check(got == want, f"{job}: series columns as documented:\n  got  {got}\n  want {want}")
        for c in series_columns:
            if c[2] == "never":
                nulls = con.execute(f"SELECT COUNT(*) FROM rank_series WHERE {c[0]} IS NULL").fetchone()[0]
                check(nulls == 0, f"{job}: series column {c[0]} is never null (found {nulls})")
        kv = con.execute(
            f"SELECT file_name, decode(key), decode(value) FROM parquet_kv_metadata('{series}/*.parquet')"
        ).fetchall()
        by_file = {}
        for file, key, value in kv:
            by_file.setdefault(Path(file).name, {})[key] = value
        check(len(by_file) == 4, f"{job}: 4 series files read: {sorted(by_file)}")
        for name, meta in by_file.items():
            check(sorted(meta) == sorted(series_keys), f"{job}/series/{name}: metadata keys {sorted(meta)}")
            rank = int(meta.get("accutrace.rank", -1))
            check(name == f"rank{rank:06}.parquet", f"{job}/series/{name}: named after its rank {rank}")
            check(meta.get("accutrace.summary_version") == "3", f"{job}/series/{name}: summary version 3")
            check(meta.get("accutrace.series_points") == "512", f"{job}/series/{name}: 512 points")
            rows = con.execute(f"SELECT COUNT(*) FROM read_parquet('{series}/{name}')").fetchone()[0]
            said = written.get(rank, {}).get("series_rows")
            check(rows == said and rows > 0, f"{job}/series/{name}: {rows} rows, scan said {said}")
        losses = con.execute(
            "SELECT rank, SUM(value_count), MIN(first_step), MAX(last_step) FROM rank_series "
            "WHERE series = 'loss' GROUP BY rank ORDER BY rank"
        ).fetchall()
        check(losses == [(r, 2, 0, 1) for r in range(4)], f"{job}: a loss at each of the 2 steps per rank: {losses}")
        overflowing = con.execute(
            "SELECT rank, first_step FROM rank_series WHERE series = 'nonfinite' AND max_value > 0 "
            "ORDER BY first_step, rank"
        ).fetchall()
        if job == "healthy":
            check(overflowing == [], f"healthy: no inf/NaN in the series: {overflowing}")
        else:
            first_step = overflowing[0][1] if overflowing else None
            at_first = {r for r, s in overflowing if s == first_step}
            check(first_step == 1 and 2 in at_first, f"overflow: inf/NaN from step 1, rank 2 among them: {overflowing}")

        rows = con.execute(query).fetchall()
        answers[job] = (rows, merge, merge_code)

    # The page's query gives the answer merge gives.
    rows, merge, code = answers["overflow"]
    origin = merge["origins"][0] if merge["origins"] else None
    check(code == 1 and origin is not None, f"overflow: merge found an origin (exit {code})")
    if origin is not None:
        check(
            [(r[0], r[1], r[5]) for r in rows] == [(origin["rank"], origin["step"], origin["op"])],
            f"overflow: the query's answer {rows} is merge's first origin "
            f"(rank {origin['rank']}, step {origin['step']}, {origin['op']})",
        )
        check(
            origin["findings"][0]["kind"] == "overflow",
            f"overflow: merge's first origin is an overflow: {origin['findings']}",
        )
    check(
        [(r[0], r[1], r[5]) for r in rows] == [(2, 1, "model/layer_1/mlp/fc2/MatMul")],
        f"overflow: the query names the injected rank, step and op: {rows}",
    )
    rows, merge, code = answers["healthy"]
    check(rows == [] and code == 0 and merge["origins"] == [], f"healthy: no anomaly ({rows}, merge exit {code})")

    print(f"sql-check: {checks - len(failures)} passed, {len(failures)} failed", file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
