"""Results stream to the client in bounded server memory, read as fast as the client
takes them; a portal left half-read releases its DuckDB query."""

from __future__ import annotations

import struct
import threading
import time
from collections.abc import Iterator

import psycopg
import pytest
from conftest import ServerFactory, ServerProcess
from wire_client import WireClient, cstring, message, rss_mib

# A DataRow of one binary BIGINT: type, length, column count, value length, value.
_INT8_ROW = 1 + 4 + 2 + 4 + 8


@pytest.fixture
def own_server(server_factory: ServerFactory) -> ServerProcess:
    """A server of this test alone: its memory is this test's."""
    return server_factory()


class PeakRss:
    """Samples a process's RSS in the background; ``peak`` is the highest seen."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.peak = rss_mib(pid)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(0.05):
            self.peak = max(self.peak, rss_mib(self.pid))

    def __enter__(self) -> PeakRss:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


@pytest.fixture
def wire(own_server: ServerProcess) -> Iterator[WireClient]:
    client = WireClient(own_server.host, own_server.port)
    yield client
    client.close()


def test_select_of_200m_rows_streams_in_bounded_memory(
    own_server: ServerProcess, wire: WireClient
) -> None:
    """200M rows (about 5 GB when a result was held whole) go out while the server
    stays within 200 MiB of where it started, however slowly the client reads."""
    n = 200_000_000
    base = rss_mib(own_server.proc.pid)
    with PeakRss(own_server.proc.pid) as rss:
        wire.extended(f"SELECT x FROM generate_series(1, {n}) AS t(x)", binary=True)
        wire.send(message(b"S"))
        # A pause every 16 MiB read: the server must wait for the client, not buffer.
        rows, kind, payload = wire.count_fixed_rows(_INT8_ROW, pause_every=16 << 20, pause=0.05)
    assert kind == b"C", payload
    assert payload == f"SELECT {n}\0".encode()
    assert rows == n
    assert rss.peak - base < 200, f"server RSS rose from {base:.0f} to {rss.peak:.0f} MiB"
    assert wire.read_until(b"Z")[-1][0] == b"Z"


def test_copy_to_stdout_streams_in_bounded_memory(
    own_server: ServerProcess, wire: WireClient
) -> None:
    n = 15_000_000
    base = rss_mib(own_server.proc.pid)
    with PeakRss(own_server.proc.pid) as rss:
        sql = f"COPY (SELECT lpad(x::text, 10, '0') FROM generate_series(1, {n}) AS t(x)) TO STDOUT"
        wire.send(message(b"Q", cstring(sql)))
        # CopyData: type, length, 10 characters and a newline.
        lines, kind, payload = wire.count_fixed_rows(1 + 4 + 11, kind=b"d")
    assert (kind, payload) == (b"C", f"COPY {n}\0".encode())
    assert lines == n
    assert rss.peak - base < 150, f"server RSS rose from {base:.0f} to {rss.peak:.0f} MiB"
    assert wire.read_until(b"Z")[-1] == (b"Z", b"I")


def test_streamed_result_keeps_types_and_order(conn: psycopg.Connection) -> None:
    """A result larger than one batch, of several types, arrives whole and in order."""
    rows = conn.execute(
        "SELECT x, x::text || 'é' AS s, x * 0.5 AS d, DATE '2024-01-01' + (x % 30)::int AS day"
        " FROM generate_series(1, 100000) AS t(x) ORDER BY x DESC"
    ).fetchall()
    assert len(rows) == 100_000
    assert rows[0][0] == 100_000 and rows[0][1] == "100000é" and rows[-1][0] == 1
    assert [r[0] for r in rows] == list(range(100_000, 0, -1))


def test_portal_row_limits_across_a_stream(wire: WireClient) -> None:
    """Execute with max_rows over a streamed result: exactly that many rows each time,
    PortalSuspended until the end, then CommandComplete."""
    n = 50_000
    wire.extended(f"SELECT x FROM generate_series(1, {n}) AS t(x)", binary=True, max_rows=20_000)
    got = []
    while True:
        rows, kind, payload = wire.count_fixed_rows(_INT8_ROW)
        got.append(rows)
        if kind != b"s":
            break
        wire.send(message(b"E", cstring("") + struct.pack("!i", 20_000)), message(b"H"))
    assert kind == b"C", payload
    assert got == [20_000, 20_000, 10_000]
    wire.send(message(b"S"))
    assert wire.read_until(b"Z")[-1] == (b"Z", b"I")


def _open_half_read(client: WireClient, portal: str) -> None:
    """A portal over a large sorted result (DuckDB holds the sort), 10 rows read."""
    sql = "SELECT x FROM generate_series(1, 20000000) AS t(x) ORDER BY x DESC"
    client.send(
        message(b"P", cstring("") + cstring(sql) + struct.pack("!h", 0)),
        message(b"B", cstring(portal) + cstring("") + struct.pack("!hhhh", 0, 0, 1, 1)),
        message(b"E", cstring(portal) + struct.pack("!i", 10)),
        message(b"H"),
    )
    rows, kind, payload = client.count_fixed_rows(_INT8_ROW)
    assert (rows, kind) == (10, b"s"), payload


def test_half_read_portals_release_their_query(own_server: ServerProcess) -> None:
    """Each half-read portal holds a sort of 20M rows in DuckDB (its memory limit is
    1 GB): ended by Sync, by Close or by the client leaving, it must let it go, or the
    next ones run out of memory."""
    base = rss_mib(own_server.proc.pid)
    client = WireClient(own_server.host, own_server.port)
    with PeakRss(own_server.proc.pid) as rss:
        for i in range(8):
            way = i % 3
            if way == 0:  # the implicit transaction ends at Sync: its portal goes
                _open_half_read(client, "")
                client.send(message(b"S"))
                assert client.read_until(b"Z")[-1] == (b"Z", b"I")
            elif way == 1:  # a named portal closed
                _open_half_read(client, "p")
                client.send(message(b"C", b"P" + cstring("p")), message(b"S"))
                assert [k for k, _ in client.read_until(b"Z")] == [b"3", b"Z"]
            else:  # the client vanishes with the portal open
                gone = WireClient(own_server.host, own_server.port)
                _open_half_read(gone, "")
                gone.sock.close()
    client.send(message(b"Q", cstring("SELECT 42")))
    answer = client.read_until(b"Z")
    assert (b"D", struct.pack("!hi", 1, 2) + b"42") in answer
    client.close()
    assert rss.peak - base < 1500, f"server RSS rose from {base:.0f} to {rss.peak:.0f} MiB"


def test_embedded_api_reads_a_streamed_result_whole() -> None:
    import rivulet

    con = rivulet.connect()
    try:
        cur = con.execute("SELECT x FROM generate_series(1, 70000) AS t(x)")
        assert cur.rowcount == 70_000
        assert cur.fetchone() == (1,)
        assert len(cur.fetchall()) == 69_999
        table = con.execute("SELECT x FROM generate_series(1, 70000) AS t(x)").fetch_arrow_table()
        assert table.num_rows == 70_000
    finally:
        con.close()


def test_slow_reader_holds_no_query_thread(own_server: ServerProcess) -> None:
    """A client that stops reading a large result blocks only itself: it holds no
    query thread between batches, so other sessions (more than the pool admits at
    once) go on."""
    stuck = []
    for _ in range(10):
        client = WireClient(own_server.host, own_server.port)
        client.extended("SELECT x FROM generate_series(1, 100000000) AS t(x)", binary=True)
        stuck.append(client)
    time.sleep(1.0)  # their socket buffers fill; each waits for its client
    try:
        with own_server.connect() as con:
            started = time.monotonic()
            for _ in range(5):
                assert con.execute(
                    "SELECT count(*) FROM generate_series(1, 1000) AS t(x)"
                ).fetchone() == (1000,)
            assert time.monotonic() - started < 5
    finally:
        for client in stuck:
            client.sock.close()
