"""Rivulet's own sqllogictest runner.

It reads the sqllogictest format the way RisingWave's test files use it:

* ``statement ok`` / ``statement count <n>`` / ``statement error [regex]``, the SQL on the
  following lines up to a blank line. ``statement error`` may instead give the whole
  expected message under ``----``, ended by two blank lines.
* ``query <types> [nosort|rowsort|valuesort] [label]`` with the SQL, ``----`` and the
  expected rows (values separated by whitespace) up to a blank line; ``query error
  [regex]`` like ``statement error``.
* ``# comments``, ``halt``, ``skipif <label>`` / ``onlyif <label>`` (labels: ``rivulet``
  and the driver's name, ``embedded`` or ``pgwire``), ``include <glob>``, ``control
  sortmode <mode>``, ``control substitution on|off`` (``$__TEST_DIR__``, ``$__DATABASE__``),
  ``connection <name>`` (the next record runs on that named connection), ``sleep <n>s|ms``,
  ``hash-threshold <n>``, ``subtest <name>`` (ignored).

Values are printed as RisingWave's runner prints them: ``NULL``, ``t``/``f``, ``(empty)``
for the empty string; floats in their shortest form (``2.5``, ``3``, ``NaN``,
``Infinity``), numerics without trailing zeros, timestamps as ``2024-01-02 03:04:05[.5][+00]``,
intervals as ``1 day 02:00:00``, bytea as ``\\x0102``, jsonb as JSON text, arrays as ``{1,2}``.
Rows compare after collapsing whitespace. An error is matched against
``<SQLSTATE>: <message>`` (then ``DETAIL:`` / ``HINT:`` lines), so a regex may pin the
code: ``statement error 42P01: relation "t" does not exist``.

Rivulet extension: a ``COPY ... FROM STDIN`` statement may carry its data on the lines
after the statement's ``;``, ended by ``\\.``; the pgwire driver streams them to the server.

Run a file by hand: ``python tests/slt/runner.py tests/slt/select.slt [--driver pgwire
--port 4566]``.
"""

from __future__ import annotations

import datetime as dt
import glob
import hashlib
import json
import math
import os
import re
import shutil
import tempfile
import time
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any

# --------------------------------------------------------------------------- records

SORT_MODES = ("nosort", "rowsort", "valuesort")


class SltParseError(Exception):
    pass


class SltFailure(AssertionError):
    """A record did not behave as the file says. ``str()`` is the report pytest shows."""


@dataclass
class Record:
    kind: str  # statement | query | halt | sleep | sortmode | substitution | hash-threshold
    path: str
    line: int
    sql: str = ""
    conditions: list[tuple[str, str]] = field(default_factory=list)
    connection: str = "default"
    # statement: "ok" | "count" | "error"; query: "rows" | "error"
    expect: str = "ok"
    count: int | None = None
    error_regex: str | None = None
    error_exact: str | None = None
    types: str = ""
    sort_mode: str | None = None
    results: list[str] = field(default_factory=list)
    value: Any = None  # sleep seconds, control values, hash threshold

    @property
    def where(self) -> str:
        return f"{self.path}:{self.line}"


def _is_blank(line: str) -> bool:
    return line.strip() == ""


def parse_file(path: str | os.PathLike[str]) -> list[Record]:
    path = str(path)
    with open(path, encoding="utf-8") as f:
        lines = f.read().split("\n")
    return list(_parse_lines(lines, path))


def _parse_lines(lines: list[str], path: str) -> Iterator[Record]:
    i = 0
    n = len(lines)
    conditions: list[tuple[str, str]] = []
    connection = "default"

    def err(msg: str, at: int) -> SltParseError:
        return SltParseError(f"{path}:{at + 1}: {msg}")

    def take_sql(start: int) -> tuple[str, int]:
        j = start
        body = []
        while j < n and not _is_blank(lines[j]):
            if lines[j].rstrip() == "----":
                break
            body.append(lines[j])
            j += 1
        if not body:
            raise err("a statement needs SQL on the following lines", start)
        return "\n".join(body), j

    def take_multiline_error(start: int) -> tuple[str, int]:
        # Ends with two consecutive blank lines (or the end of the file).
        j = start
        body: list[str] = []
        while j < n:
            if _is_blank(lines[j]) and (j + 1 >= n or _is_blank(lines[j + 1])):
                break
            body.append(lines[j])
            j += 1
        return "\n".join(body).strip(), j

    while i < n:
        raw = lines[i]
        line = raw.strip()
        if not line or line.startswith("#"):
            i += 1
            continue
        words = line.split()
        head = words[0]
        lineno = i + 1
        if head in ("skipif", "onlyif"):
            if len(words) < 2:
                raise err(f"{head} needs a label", i)
            conditions.append((head, words[1]))
            i += 1
            continue
        if head == "connection":
            if len(words) != 2:
                raise err("connection needs a name", i)
            connection = words[1]
            i += 1
            continue
        if head == "statement":
            if len(words) < 2 or words[1] not in ("ok", "count", "error"):
                raise err(f"bad statement header: {line!r}", i)
            rec = Record("statement", path, lineno, conditions=conditions, connection=connection)
            rec.expect = words[1]
            if words[1] == "ok" and len(words) > 2:
                raise err(f"unexpected words after 'statement ok': {line!r}", i)
            if words[1] == "count":
                if len(words) != 3 or not words[2].isdigit():
                    raise err("statement count needs a number", i)
                rec.count = int(words[2])
            if words[1] == "error":
                regex = raw.strip()[len("statement error") :].strip()
                rec.error_regex = regex or None
            rec.sql, i = take_sql(i + 1)
            if i < n and lines[i].rstrip() == "----":
                if rec.expect != "error":
                    raise err("only 'statement error' may have '----'", i)
                if rec.error_regex is not None:
                    raise err("give either an inline regex or a '----' message", i)
                rec.error_exact, i = take_multiline_error(i + 1)
            _check_regex(rec, err, lineno - 1)
            yield rec
        elif head == "query":
            rec = Record("query", path, lineno, conditions=conditions, connection=connection)
            if len(words) >= 2 and words[1] == "error":
                rec.expect = "error"
                regex = raw.strip()[len("query error") :].strip()
                rec.error_regex = regex or None
            else:
                rec.expect = "rows"
                if len(words) < 2:
                    raise err("query needs its column types (e.g. 'query IT')", i)
                rec.types = words[1]
                if not re.fullmatch(r"[A-Za-z]+", rec.types):
                    raise err(f"bad column types {rec.types!r}", i)
                if len(words) >= 3:
                    if words[2] not in SORT_MODES:
                        raise err(f"unknown sort mode {words[2]!r}", i)
                    rec.sort_mode = words[2]
                # words[3:] is a label: accepted, unused.
            rec.sql, i = take_sql(i + 1)
            if i < n and lines[i].rstrip() == "----":
                if rec.expect == "error":
                    if rec.error_regex is not None:
                        raise err("give either an inline regex or a '----' message", i)
                    rec.error_exact, i = take_multiline_error(i + 1)
                else:
                    i += 1
                    while i < n and not _is_blank(lines[i]):
                        rec.results.append(lines[i])
                        i += 1
            _check_regex(rec, err, lineno - 1)
            yield rec
        elif head == "halt":
            yield Record("halt", path, lineno, conditions=conditions)
            i += 1
        elif head == "include":
            if len(words) != 2:
                raise err("include needs one file pattern", i)
            pattern = os.path.join(os.path.dirname(path), words[1])
            matches = sorted(glob.glob(pattern))
            if not matches:
                raise err(f"include: no file matches {words[1]!r}", i)
            for m in matches:
                yield from parse_file(m)
            i += 1
        elif head == "control":
            if len(words) != 3 or words[1] not in ("sortmode", "substitution"):
                raise err(f"bad control record: {line!r}", i)
            if words[1] == "sortmode":
                if words[2] not in SORT_MODES:
                    raise err(f"unknown sort mode {words[2]!r}", i)
                yield Record("sortmode", path, lineno, value=words[2])
            else:
                if words[2] not in ("on", "off"):
                    raise err("control substitution takes on or off", i)
                yield Record("substitution", path, lineno, value=words[2] == "on")
            i += 1
        elif head == "sleep":
            m = re.fullmatch(r"(\d+(?:\.\d+)?)(ms|s)", words[1] if len(words) > 1 else "")
            if not m:
                raise err("sleep needs a duration like 500ms or 1s", i)
            seconds = float(m.group(1)) / (1000 if m.group(2) == "ms" else 1)
            yield Record("sleep", path, lineno, value=seconds, conditions=conditions)
            i += 1
        elif head == "hash-threshold":
            if len(words) != 2 or not words[1].isdigit():
                raise err("hash-threshold needs a number", i)
            yield Record("hash-threshold", path, lineno, value=int(words[1]))
            i += 1
        elif head == "subtest":
            i += 1
        else:
            raise err(f"unknown record {head!r} (system commands are not supported)", i)
        if head in ("statement", "query", "halt", "sleep"):
            conditions = []
            connection = "default"


def _check_regex(rec: Record, err: Any, at: int) -> None:
    if rec.error_regex is not None:
        try:
            re.compile(rec.error_regex)
        except re.error as exc:
            raise err(f"bad error regex {rec.error_regex!r}: {exc}", at) from None


# ------------------------------------------------------------------- formatting values

JSONB_OID = 3802
FLOAT4_OID = 700


def format_value(v: Any, type_code: int | None = None) -> str:
    """A result value as the expected-results text writes it."""
    if v is None:
        return "NULL"
    if type_code == JSONB_OID:
        return json.dumps(v, ensure_ascii=False)
    if isinstance(v, bool):
        return "t" if v else "f"
    if isinstance(v, str):
        return v if v != "" else "(empty)"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        return format_float(v, single=type_code == FLOAT4_OID)
    if isinstance(v, Decimal):
        return format_decimal(v)
    if isinstance(v, dt.datetime):
        return format_timestamp(v)
    if isinstance(v, dt.date):
        return v.isoformat()
    if isinstance(v, dt.time):
        return format_time(v)
    if isinstance(v, dt.timedelta):
        return format_interval(v)
    if isinstance(v, bytes | bytearray | memoryview):
        return "\\x" + bytes(v).hex()
    if isinstance(v, dict):
        return json.dumps(v, ensure_ascii=False)
    if isinstance(v, list | tuple):
        return "{" + ",".join(_array_element(x) for x in v) + "}"
    if isinstance(v, uuid.UUID):
        return str(v)
    return str(v)


def _array_element(x: Any) -> str:
    if x is None:
        return "NULL"
    text = format_value(x)
    if isinstance(x, str) and (x == "" or re.search(r'[\s,{}"\\]', x) or x.upper() == "NULL"):
        return '"' + x.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return text


def format_float(v: float, *, single: bool = False) -> str:
    if math.isnan(v):
        return "NaN"
    if math.isinf(v):
        return "Infinity" if v > 0 else "-Infinity"
    if single:
        import numpy as np

        text = str(np.float32(v))
    else:
        text = repr(v)
    return text[:-2] if text.endswith(".0") else text


def format_decimal(v: Decimal) -> str:
    if v.is_nan():
        return "NaN"
    if v.is_infinite():
        return "Infinity" if v > 0 else "-Infinity"
    if v == v.to_integral_value():
        return str(int(v))
    return format(v.normalize(), "f")


def _fraction(us: int) -> str:
    return ("." + f"{us:06d}").rstrip("0") if us else ""


def format_time(v: dt.time) -> str:
    return v.strftime("%H:%M:%S") + _fraction(v.microsecond)


def format_timestamp(v: dt.datetime) -> str:
    text = f"{v.year:04d}-{v.month:02d}-{v.day:02d} " + format_time(v.time())
    offset = v.utcoffset()
    if offset is not None:
        total = int(offset.total_seconds())
        sign = "-" if total < 0 else "+"
        hours, rest = divmod(abs(total), 3600)
        minutes = rest // 60
        text += f"{sign}{hours:02d}" + (f":{minutes:02d}" if minutes else "")
    return text


def format_interval(v: dt.timedelta) -> str:
    """PostgreSQL's output style: ``1 day 02:00:00``, ``-1 days -00:00:01``, ``00:00:00``."""
    total = (v.days * 86_400 + v.seconds) * 1_000_000 + v.microseconds
    neg = total < 0
    days, rest = divmod(abs(total), 86_400_000_000)
    sign = "-" if neg else ""
    parts = []
    if days:
        parts.append(f"{sign}{days} day" + ("" if days == 1 and not neg else "s"))
    if rest or not days:
        secs, us = divmod(rest, 1_000_000)
        hh, secs = divmod(secs, 3600)
        mm, ss = divmod(secs, 60)
        parts.append(f"{sign if rest else ''}{hh:02d}:{mm:02d}:{ss:02d}{_fraction(us)}")
    return " ".join(parts)


def normalize_line(line: str) -> str:
    return " ".join(line.split())


# ----------------------------------------------------------------------- drivers


@dataclass
class SqlError(Exception):
    """An error the database reported for a statement."""

    sqlstate: str
    message: str
    hint: str | None = None
    detail: str | None = None

    def text(self) -> str:
        out = f"{self.sqlstate}: {self.message}"
        if self.detail:
            out += f"\nDETAIL: {self.detail}"
        if self.hint:
            out += f"\nHINT: {self.hint}"
        return out

    def __str__(self) -> str:
        return self.text()


@dataclass
class Outcome:
    """What a statement returned: column (name, type code) pairs and rows for a query."""

    columns: list[tuple[str, int | None]] | None
    rows: list[Sequence[Any]]
    rowcount: int


class Connection:
    def run(self, sql: str, copy_data: str | None = None) -> Outcome:
        raise NotImplementedError

    def close(self) -> None:
        pass


class Instance:
    """One fresh database for one file; hands out connections (sessions) to it."""

    def connect(self) -> Connection:
        raise NotImplementedError

    def close(self) -> None:
        pass


class Driver:
    name = "driver"

    def open(self) -> Instance:
        raise NotImplementedError


class EmbeddedConnection(Connection):
    def __init__(self, con: Any) -> None:
        self.con = con

    def run(self, sql: str, copy_data: str | None = None) -> Outcome:
        import rivulet

        try:
            cur = self.con.execute(sql)
        except rivulet.Error as exc:
            raise SqlError(exc.sqlstate, exc.message, exc.hint, exc.detail) from None
        if cur.description is None:
            return Outcome(None, [], cur.rowcount)
        columns = [(d[0], d[1]) for d in cur.description]
        return Outcome(columns, cur.fetchall(), cur.rowcount)

    def close(self) -> None:
        self.con.close()


class EmbeddedInstance(Instance):
    """A fresh data directory: every connection of the file opens the same engine."""

    def __init__(self) -> None:
        self.directory = tempfile.mkdtemp(prefix="rivulet-slt-")
        self.connections: list[EmbeddedConnection] = []

    def connect(self) -> Connection:
        import rivulet

        con = EmbeddedConnection(rivulet.connect(self.directory))
        self.connections.append(con)
        return con

    def close(self) -> None:
        for con in self.connections:
            con.close()
        shutil.rmtree(self.directory, ignore_errors=True)


class EmbeddedDriver(Driver):
    """The embedded DB-API (``rivulet.connect``)."""

    name = "embedded"

    def open(self) -> Instance:
        return EmbeddedInstance()


_COPY_TO_STDOUT = re.compile(r"^\s*copy\b.*\bto\s+stdout\b", re.I | re.S)


class PsycopgConnection(Connection):
    def __init__(self, conn: Any) -> None:
        self.conn = conn

    def run(self, sql: str, copy_data: str | None = None) -> Outcome:
        import psycopg

        try:
            with self.conn.cursor() as cur:
                if copy_data is not None:
                    with cur.copy(sql) as copy:
                        copy.write(copy_data)
                    return Outcome(None, [], cur.rowcount)
                if _COPY_TO_STDOUT.match(sql):
                    out = bytearray()
                    with cur.copy(sql) as copy:
                        for block in copy:
                            out += block
                    rows: list[Sequence[Any]] = [
                        [None if v == "\\N" else v for v in line.split("\t")]
                        for line in out.decode().splitlines()
                    ]
                    width = len(rows[0]) if rows else 0
                    return Outcome([(f"c{i}", None) for i in range(width)], rows, cur.rowcount)
                cur.execute(sql)
                # Several statements: keep the last one's result, as the embedded API does.
                while cur.nextset():
                    pass
                if cur.description is None:
                    return Outcome(None, [], cur.rowcount)
                columns = [(d.name, d.type_code) for d in cur.description]
                return Outcome(columns, cur.fetchall(), cur.rowcount)
        except psycopg.Error as exc:
            diag = exc.diag
            raise SqlError(
                exc.sqlstate or "",
                diag.message_primary or str(exc),
                diag.message_hint,
                diag.message_detail,
            ) from None

    def close(self) -> None:
        self.conn.close()


class PsycopgInstance(Instance):
    """A running server shared by every file: it is emptied of tables before a file runs
    and every file gets new connections (new sessions)."""

    def __init__(self, dsn: str) -> None:
        self.dsn = dsn
        self.connections: list[PsycopgConnection] = []
        admin = self.connect()
        assert isinstance(admin, PsycopgConnection)
        names = admin.run("SHOW TABLES").rows
        for (name,) in names:
            admin.run(f'DROP TABLE IF EXISTS "{name.replace(chr(34), chr(34) * 2)}"')
        left = admin.run("SHOW TABLES").rows
        if left:
            raise RuntimeError(f"could not empty the server before the file: {left}")
        admin.close()
        self.connections.clear()

    def connect(self) -> Connection:
        import psycopg

        conn = psycopg.connect(self.dsn, autocommit=True, connect_timeout=10)
        con = PsycopgConnection(conn)
        self.connections.append(con)
        return con

    def close(self) -> None:
        for con in self.connections:
            try:
                con.close()
            except Exception:
                pass


class PsycopgDriver(Driver):
    """A real server over the PostgreSQL wire protocol, through psycopg."""

    name = "pgwire"

    def __init__(self, host: str, port: int, user: str = "root", dbname: str = "dev") -> None:
        self.dsn = f"host={host} port={port} user={user} dbname={dbname}"

    def open(self) -> Instance:
        return PsycopgInstance(self.dsn)


# ------------------------------------------------------------------------ running


_COPY_FROM_STDIN = re.compile(r"^\s*copy\b[^;]*\bfrom\s+stdin\b[^;]*;", re.I | re.S)


def split_copy(sql: str) -> tuple[str, str | None]:
    """``COPY ... FROM STDIN;`` followed by data lines (up to ``\\.``): the two parts."""
    m = _COPY_FROM_STDIN.match(sql)
    if m is None:
        return sql, None
    rest = sql[m.end() :]
    if not rest.strip():
        return sql, None
    data_lines = []
    for line in rest.lstrip("\n").split("\n"):
        if line == "\\.":
            break
        data_lines.append(line)
    return m.group(0).rstrip(";").strip(), "".join(line + "\n" for line in data_lines)


class Runner:
    def __init__(self, driver: Driver) -> None:
        self.driver = driver
        self.labels = {"rivulet", driver.name}

    def run_file(self, path: str | os.PathLike[str]) -> int:
        """Run every record of a file on a fresh instance. Returns the records run; raises
        ``SltFailure`` at the first record that does not behave as written."""
        records = parse_file(path)
        instance = self.driver.open()
        try:
            return self._run(records, instance)
        finally:
            instance.close()

    def _run(self, records: list[Record], instance: Instance) -> int:
        connections: dict[str, Connection] = {}
        sort_mode = "nosort"
        substitute = False
        hash_threshold = 0
        test_dir = tempfile.mkdtemp(prefix="rivulet-slt-dir-")
        ran = 0
        try:
            for rec in records:
                if self._skipped(rec):
                    continue
                if rec.kind == "halt":
                    break
                if rec.kind == "sortmode":
                    sort_mode = rec.value
                    continue
                if rec.kind == "substitution":
                    substitute = rec.value
                    continue
                if rec.kind == "hash-threshold":
                    hash_threshold = rec.value
                    continue
                if rec.kind == "sleep":
                    time.sleep(rec.value)
                    continue
                con = connections.get(rec.connection)
                if con is None:
                    con = connections[rec.connection] = instance.connect()
                sql = rec.sql
                if substitute:
                    sql = sql.replace("$__TEST_DIR__", test_dir).replace("$__DATABASE__", "dev")
                self._run_record(rec, con, sql, sort_mode, hash_threshold)
                ran += 1
        finally:
            shutil.rmtree(test_dir, ignore_errors=True)
        return ran

    def _skipped(self, rec: Record) -> bool:
        for kind, label in rec.conditions:
            if kind == "skipif" and label in self.labels:
                return True
            if kind == "onlyif" and label not in self.labels:
                return True
        return False

    def _run_record(
        self, rec: Record, con: Connection, sql: str, sort_mode: str, hash_threshold: int
    ) -> None:
        statement, copy_data = split_copy(sql)
        try:
            outcome = con.run(statement, copy_data)
        except SqlError as exc:
            if rec.expect == "error":
                self._check_error(rec, sql, exc)
                return
            raise self._fail(rec, sql, "unexpected error", actual=exc.text()) from None
        except SltFailure:
            raise
        except Exception as exc:  # a driver or client failure: report it with the record
            raise self._fail(
                rec, sql, "the driver failed", actual=f"{type(exc).__name__}: {exc}"
            ) from exc
        if rec.expect == "error":
            shown = self._render(outcome)
            raise self._fail(
                rec,
                sql,
                "expected an error, but the statement succeeded",
                expected=rec.error_exact or rec.error_regex or "(any error)",
                actual=shown,
            )
        if rec.kind == "statement":
            if rec.expect == "count" and outcome.rowcount != rec.count:
                raise self._fail(
                    rec,
                    sql,
                    "wrong row count",
                    expected=str(rec.count),
                    actual=str(outcome.rowcount),
                )
            return
        self._check_rows(rec, sql, outcome, rec.sort_mode or sort_mode, hash_threshold)

    @staticmethod
    def _render(outcome: Outcome) -> str:
        if outcome.columns is None:
            return f"(no rows; row count {outcome.rowcount})"
        return "\n".join(Runner._lines(outcome)) or "(zero rows)"

    @staticmethod
    def _lines(outcome: Outcome) -> list[str]:
        codes = [c[1] for c in outcome.columns or []]
        return [
            normalize_line(" ".join(format_value(v, code) for v, code in zip(row, codes)))
            for row in outcome.rows
        ]

    def _check_error(self, rec: Record, sql: str, exc: SqlError) -> None:
        text = exc.text()
        if rec.error_exact is not None:
            if normalize_line(rec.error_exact) != normalize_line(text) and (
                normalize_line(rec.error_exact) != normalize_line(exc.message)
            ):
                raise self._fail(rec, sql, "wrong error", expected=rec.error_exact, actual=text)
        elif rec.error_regex is not None and re.search(rec.error_regex, text) is None:
            raise self._fail(
                rec,
                sql,
                "the error does not match",
                expected=f"/{rec.error_regex}/",
                actual=text,
            )

    def _check_rows(
        self, rec: Record, sql: str, outcome: Outcome, sort_mode: str, hash_threshold: int
    ) -> None:
        if outcome.columns is None:
            raise self._fail(
                rec,
                sql,
                "a query record needs a statement that returns rows",
                actual=self._render(outcome),
            )
        if len(rec.types) != len(outcome.columns):
            raise self._fail(
                rec,
                sql,
                f"the query returned {len(outcome.columns)} columns, the record declares"
                f" {len(rec.types)} ({rec.types})",
                actual=", ".join(c[0] for c in outcome.columns),
            )
        actual = self._lines(outcome)
        expected = [normalize_line(line) for line in rec.results]
        if sort_mode == "rowsort":
            actual, expected = sorted(actual), sorted(expected)
        elif sort_mode == "valuesort":
            actual = sorted(v for line in actual for v in line.split(" ") if line)
            expected = sorted(v for line in expected for v in line.split(" ") if line)
        values = sum(len(line.split(" ")) for line in actual if line)
        if (
            hash_threshold
            and len(expected) == 1
            and (m := re.fullmatch(r"(\d+) values hashing to ([0-9a-f]{32})", expected[0]))
        ):
            flat = [v for line in actual for v in line.split(" ")]
            digest = hashlib.md5("".join(v + "\n" for v in flat).encode()).hexdigest()
            got = f"{values} values hashing to {digest}"
            if got != expected[0] or int(m.group(1)) != values:
                raise self._fail(rec, sql, "result hash differs", expected=expected[0], actual=got)
            return
        if actual != expected:
            raise self._fail(
                rec,
                sql,
                "query result mismatch" + (f" ({sort_mode})" if sort_mode != "nosort" else ""),
                expected="\n".join(expected) or "(zero rows)",
                actual="\n".join(actual) or "(zero rows)",
            )

    def _fail(
        self,
        rec: Record,
        sql: str,
        what: str,
        *,
        expected: str | None = None,
        actual: str | None = None,
    ) -> SltFailure:
        parts = [f"{rec.where}: {what} [driver {self.driver.name}]", "[SQL]", sql]
        if expected is not None:
            parts += ["[expected]", expected]
        if actual is not None:
            parts += ["[actual]", actual]
        return SltFailure("\n".join(parts))


def slt_files(root: str | os.PathLike[str]) -> list[Path]:
    """Every ``.slt`` file under ``root`` (files only ``include``d by others start with
    ``_``, and are not run on their own)."""
    return sorted(p for p in Path(root).rglob("*.slt") if not p.name.startswith("_"))


def main(argv: Sequence[str] | None = None) -> int:
    import argparse

    ap = argparse.ArgumentParser(description="Run sqllogictest files against Rivulet.")
    ap.add_argument("files", nargs="+")
    ap.add_argument("--driver", choices=["embedded", "pgwire"], default="embedded")
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=4566)
    args = ap.parse_args(argv)
    driver: Driver = (
        EmbeddedDriver() if args.driver == "embedded" else PsycopgDriver(args.host, args.port)
    )
    runner = Runner(driver)
    failed = 0
    for f in args.files:
        try:
            count = runner.run_file(f)
            print(f"ok   {f} ({count} records)")
        except (SltFailure, SltParseError) as exc:
            failed += 1
            print(f"FAIL {f}\n{exc}\n")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
