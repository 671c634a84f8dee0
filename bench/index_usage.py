"""Which index serves which statement: every index on the hot tables, with the statements the code
sends that PostgreSQL plans through it (issue #26, part 5).

Two steps:

1. capture: run tests that drive the code paths (the protocol's kinds, the steps and drains,
   retention, the admin, the console, the resource API) on PostgreSQL with this module as a
   pytest plugin; every statement Django sends, with its parameters, is appended to a file::

       SQL_CAPTURE=/tmp/sql.jsonl PYTHONPATH=bench DATABASE_URL=postgresql://…/resonate_x \\
           .venv/bin/pytest -p index_usage -q tests/kinds/test_conformance.py \\
               tests/engine/test_steps.py …

2. explain: each distinct statement shape on the hot tables (IN lists folded), one instance with
   its parameters, goes through ``EXPLAIN (FORMAT JSON)`` (never executed) on a database of
   realistic size (``make bench``'s growth database, or bench/djtool.py load-trees, plus
   ``--fill``: outbox messages, callbacks and listeners in proportion), with the planner's
   defaults and again with sequential scans off (the index the planner *can* use, for tables
   still small here). Prints each index with the statements that use it; an index no statement
   uses is flagged::

       .venv/bin/python bench/index_usage.py /tmp/sql.jsonl --db postgresql://…/resonate_growth \\
           [--fill] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import re
from pathlib import Path
from typing import Any

HOT = (
    "promises_promise",
    "tasks_app_task",
    "outbox_message",
    "promises_callback",
    "promises_listener",
)

# --- 1. capture (pytest plugin) ------------------------------------------------------------------


def pytest_configure(config: Any) -> None:
    from django.db.backends.signals import connection_created

    out = os.environ.get("SQL_CAPTURE")
    if not out:
        return

    def wrapper(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        if not many:
            try:
                line = json.dumps({"sql": sql, "params": _plain(params)})
            except TypeError:
                line = ""
            if line:
                with open(out, "a") as f:
                    f.write(line + "\n")
        return execute(sql, params, many, context)

    def install(sender: Any, connection: Any, **kwargs: Any) -> None:
        if wrapper not in connection.execute_wrappers:
            connection.execute_wrappers.append(wrapper)

    connection_created.connect(install, weak=False)


def _plain(params: Any) -> Any:
    """Parameters as JSON: psycopg's Jsonb wrappers become their object, tagged."""
    if params is None:
        return None
    out: list[Any] = []
    for p in params:
        obj = getattr(p, "obj", None)
        if obj is not None and type(p).__name__ in ("Jsonb", "Json"):
            out.append({"__jsonb__": obj})
        elif isinstance(p, (list, tuple)):
            out.append(list(p))
        else:
            out.append(p if isinstance(p, (str, int, float, bool)) or p is None else str(p))
    return out


# --- 2. explain ---------------------------------------------------------------------------------

SKIP = re.compile(
    r"^\s*(BEGIN|COMMIT|ROLLBACK|SAVEPOINT|RELEASE|SET|SHOW|CREATE|ALTER|DROP|TRUNCATE)", re.I
)


def shape(sql: str) -> str:
    s = re.sub(r"%s(\s*,\s*%s)+", "%s…", sql)
    s = re.sub(r"'[^']*'", "'?'", s)
    return re.sub(r"\s+", " ", s).strip()


def index_names(plan: Any) -> set[str]:
    found: set[str] = set()
    if isinstance(plan, dict):
        if "Index Name" in plan:
            found.add(plan["Index Name"])
        for v in plan.values():
            found |= index_names(v)
    elif isinstance(plan, list):
        for v in plan:
            found |= index_names(v)
    return found


FILL = """
INSERT INTO outbox_message (key, kind, address, task_id, version, promise, created_at, revision,
  attempts, next_attempt_at, last_error, poll_route, dead_at, undeliverable_at)
SELECT 'fill-' || g || CASE WHEN g % 2 = 0 THEN ':notify:poll://uni@c/' || g ELSE '' END,
  CASE WHEN g % 2 = 0 THEN 'unblock' ELSE 'execute' END,
  CASE WHEN g % 5 = 0 THEN 'http://127.0.0.1:9/' ELSE 'poll://any@g' || (g % 50) END,
  CASE WHEN g % 2 = 1 THEN 'fill-' || g END, CASE WHEN g % 2 = 1 THEN 1 END,
  NULL, g, 1, 0, g, '',
  CASE WHEN g % 5 <> 0 THEN 'any@g' || (g % 50) END,
  CASE WHEN g % 40 = 0 THEN g END, CASE WHEN g % 80 = 0 THEN g END
FROM generate_series(1, 100000) g
ON CONFLICT DO NOTHING;
INSERT INTO promises_callback (awaited_id, awaiter_id, ready)
SELECT p.id, (p.tags ->> 'resonate:origin'), (row_number() OVER () % 20 = 0)
FROM promises_promise p WHERE p.id LIKE '%:1' LIMIT 50000
ON CONFLICT DO NOTHING;
INSERT INTO promises_listener (awaited_id, address, ready)
SELECT p.id, 'poll://uni@c/' || p.id, (row_number() OVER () % 20 = 0)
FROM promises_promise p WHERE p.id NOT LIKE '%:%' LIMIT 50000
ON CONFLICT DO NOTHING;
INSERT INTO promises_promise (id, state, param_headers, param_data, value_headers, value_data,
  tags, timeout_at, created_at, settled_at, target, timer, external, branch, parent, function)
SELECT 'pend-' || g, 'pending', '{}', 'e30=', NULL, NULL,
  jsonb_build_object('resonate:origin', 'pend-' || (g - g % 3), 'resonate:scope',
                     CASE WHEN g % 3 = 0 THEN 'global' ELSE 'local' END)
    || CASE WHEN g % 3 = 0 THEN '{"resonate:target": "poll://any@bench"}'::jsonb ELSE '{}' END,
  4102444800000 + g, 1796000000000 + g, NULL,
  CASE WHEN g % 3 = 0 THEN 'poll://any@bench' END, false, g % 3 = 0,
  'pend-' || (g - g % 3), 'pend-' || (g - g % 3), CASE WHEN g % 3 = 0 THEN 'bench_workflow' END
FROM generate_series(1, 60000) g
ON CONFLICT DO NOTHING;
INSERT INTO tasks_app_task (id, state, version, ttl, pid, expires_at, retry_at, resumes,
  release_count, last_release_at, last_pid)
SELECT 'pend-' || g, CASE WHEN g % 2 = 0 THEN 'pending' ELSE 'acquired' END, 1,
  CASE WHEN g % 2 = 1 THEN 60000 END, CASE WHEN g % 2 = 1 THEN 'w' END,
  CASE WHEN g % 2 = 1 THEN 1796000000000 + g END, CASE WHEN g % 2 = 0 THEN 1796000000000 + g END,
  '[]', CASE WHEN g % 12 = 0 THEN 2 ELSE 0 END, NULL, NULL
FROM generate_series(3, 60000, 3) g
ON CONFLICT DO NOTHING;
ANALYZE promises_promise, tasks_app_task, outbox_message, promises_callback, promises_listener;
"""


def literal(conn: Any, sql: str, params: list[Any] | None) -> str:
    from psycopg import ClientCursor
    from psycopg.types.json import Jsonb

    if not params:
        return sql.replace("%%", "%")
    values = [
        Jsonb(p["__jsonb__"]) if isinstance(p, dict) and "__jsonb__" in p else p for p in params
    ]
    with ClientCursor(conn) as cur:
        return str(cur.mogrify(sql, values))


def explain(db: str, capture: Path, fill: bool) -> dict[str, Any]:
    import psycopg

    shapes: dict[str, dict[str, Any]] = {}
    for line in capture.read_text().splitlines():
        row = json.loads(line)
        sql = row["sql"]
        if SKIP.match(sql) or not any(t in sql for t in HOT) or "pg_catalog" in sql:
            continue
        if sql.lstrip().upper().startswith("INSERT") and "ON CONFLICT" not in sql.upper():
            continue
        key = shape(sql)
        shapes.setdefault(key, {"sql": sql, "params": row["params"], "count": 0})["count"] += 1
    with psycopg.connect(db, autocommit=True) as conn:
        if fill:
            conn.execute(FILL.encode())
        indexes = {
            name: (table, ddl)
            for name, table, ddl in conn.execute(
                "SELECT i.indexrelid::regclass::text, t.relname, pg_get_indexdef(i.indexrelid)"
                " FROM pg_index i JOIN pg_class t ON t.oid = i.indrelid"
                " WHERE t.relname = ANY(%s) ORDER BY 2, 1",
                [list(HOT)],
            )
        }
        uses: dict[str, dict[str, list[str]]] = {
            n: {"default": [], "no_seqscan": []} for n in indexes
        }
        failed: list[str] = []
        for key, s in shapes.items():
            try:
                text = literal(conn, s["sql"], s["params"])
                for mode in ("default", "no_seqscan"):
                    with conn.transaction(force_rollback=True):
                        if mode == "no_seqscan":
                            conn.execute("SET LOCAL enable_seqscan = off")
                        plan = conn.execute(("EXPLAIN (FORMAT JSON) " + text).encode()).fetchone()
                    for name in index_names(plan[0] if plan else None):
                        if name in uses and key not in uses[name][mode]:
                            uses[name][mode].append(key)
            except Exception as exc:  # a statement whose captured parameters no longer bind
                failed.append(
                    f"{key[:120]}: {type(exc).__name__}: {str(exc).splitlines()[0][:120]}"
                )
        needed = redundancy(conn, shapes, indexes, uses)
    return {
        "statements": len(shapes),
        "failed": failed,
        "indexes": {
            n: {"table": t, "ddl": d, **uses[n], **needed.get(n, {})}
            for n, (t, d) in indexes.items()
        },
    }


def cost(conn: Any, text: str, no_seqscan: bool) -> float:
    if no_seqscan:
        conn.execute("SET LOCAL enable_seqscan = off")
    plan = conn.execute(("EXPLAIN (FORMAT JSON) " + text).encode()).fetchone()
    if no_seqscan:
        conn.execute("SET LOCAL enable_seqscan = on")
    return float(plan[0][0]["Plan"]["Total Cost"])


def redundancy(
    conn: Any,
    shapes: dict[str, dict[str, Any]],
    indexes: dict[str, tuple[str, str]],
    uses: dict[str, dict[str, list[str]]],
) -> dict[str, dict[str, Any]]:
    """For each index that is not a constraint's: drop it inside a transaction that is rolled
    back, and plan again every statement that used it. ``worst`` is the largest ratio of a
    statement's estimated cost without the index over its cost with it (1.0: another index
    serves it as well; the statement named is the one that would lose most)."""
    constraint = {
        name
        for (name,) in conn.execute(
            "SELECT conindid::regclass::text FROM pg_constraint WHERE conindid <> 0"
        )
    }
    out: dict[str, dict[str, Any]] = {}
    for name, users in uses.items():
        if name in constraint:
            out[name] = {"constraint": True}
            continue
        worst, worst_key = 1.0, ""
        by_mode = {"default": 1.0, "no_seqscan": 1.0}
        for mode, keys in users.items():
            for key in keys:
                s = shapes[key]
                text = literal(conn, s["sql"], s["params"])
                with conn.transaction(force_rollback=True):
                    before = cost(conn, text, mode == "no_seqscan")
                    conn.execute(f"DROP INDEX {name}".encode())
                    after = cost(conn, text, mode == "no_seqscan")
                ratio = after / before if before else 1.0
                by_mode[mode] = max(by_mode[mode], ratio)
                if ratio > worst:
                    worst, worst_key = ratio, key
        out[name] = {
            "worst_cost_ratio_without": worst,
            "worst_statement": worst_key,
            "worst_by_mode": by_mode,
        }
    return out


def verdict(r: dict[str, Any]) -> str:
    if not r["default"] and not r["no_seqscan"]:
        return "serves no statement"
    if r.get("constraint"):
        return "a constraint's (kept)"
    worst = r.get("worst_cost_ratio_without", 1.0)
    if worst < 1.05:
        return "redundant: planned as cheaply without it"
    default = r.get("worst_by_mode", {}).get("default", worst)
    if default >= 1.05:
        return f"needed: a statement costs x{default:,.1f} without it"
    # Only with sequential scans off (disable_cost): at this data size a scan is cheaper, at
    # production size this is the one index for the statement.
    return "needed: the only index path for a statement (else a sequential scan)"


def markdown(res: dict[str, Any]) -> str:
    """One row per index: the statements it serves, what they would cost without it, and one
    of them (the one that would lose most)."""
    out = [
        f"{res['statements']} statement shapes on the hot tables, planned by EXPLAIN "
        "(bench/index_usage.py).",
        "",
        "| index | statements (+ with seq scans off) | verdict | e.g. |",
        "|---|---|---|---|",
    ]
    for name, r in res["indexes"].items():
        extra = len(set(r["no_seqscan"]) - set(r["default"]))
        example = r.get("worst_statement") or (r["default"] or r["no_seqscan"] or [""])[0]
        where = example.find(" WHERE ")
        example = (example[where + 7 :] if where >= 0 else example)[:140].replace("|", "\\|")
        out.append(
            f"| {r['table']}.{name} | {len(r['default'])} (+{extra}) | {verdict(r)} | `{example}` |"
        )
    return "\n".join(out) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("capture", type=Path)
    parser.add_argument("--db", required=True)
    parser.add_argument("--fill", action="store_true", help="add outbox, callback, listener rows")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--markdown", type=Path, help="a table: index, statements, verdict")
    args = parser.parse_args()
    res = explain(args.db, args.capture, args.fill)
    if args.json:
        args.json.write_text(json.dumps(res, indent=2) + "\n")
    if args.markdown:
        args.markdown.write_text(markdown(res))
    print(
        f"{res['statements']} statement shapes on the hot tables; "
        f"{len(res['failed'])} not explained"
    )
    for name, r in res["indexes"].items():
        default, forced = r["default"], r["no_seqscan"]
        flag = "" if default or forced else "   <-- serves no statement"
        if not flag and not r.get("constraint") and r.get("worst_cost_ratio_without", 2) < 1.05:
            flag = "   <-- redundant: every statement it serves is planned as cheaply without it"
        print(
            f"\n{r['table']}.{name}: {len(default)} statements (+{len(set(forced) - set(default))} "
            f"with seq scans off){flag}\n  {r['ddl']}"
        )
        if r.get("worst_statement"):
            print(
                f"  without it: cost x{r['worst_cost_ratio_without']:.1f} for "
                f"{r['worst_statement'][:160]}"
            )
        for key in default[:6]:
            print(f"    {key[:200]}")
        for key in [k for k in forced if k not in default][:4]:
            print(f"    (seq scans off) {key[:200]}")


if __name__ == "__main__":
    main()
