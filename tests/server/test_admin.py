"""The admin endpoint is not a way in: it wants the server's token, refuses what a web
page can send, bounds what a request may cost, and checks what it is asked to do."""

from __future__ import annotations

import json
import os
import socket
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import ServerFactory, ServerProcess, free_port

from rivulet.server.admin import runtime_token_path


class Admin:
    def __init__(self, srv: ServerProcess, port: int, token_file: Path) -> None:
        self.srv = srv
        self.port = port
        self.token_file = token_file

    @property
    def token(self) -> str:
        return self.token_file.read_text().strip()

    def raw(self, request: bytes, timeout: float = 30.0) -> tuple[int, dict[str, object], str]:
        """Send ``request`` as it is; (status, JSON body, head) of the answer."""
        with socket.create_connection(("127.0.0.1", self.port), timeout=timeout) as sock:
            sock.sendall(request)
            data = b""
            while chunk := sock.recv(65536):
                data += chunk
        head, _, body = data.partition(b"\r\n\r\n")
        status = int(head.split(b" ", 2)[1])
        return status, json.loads(body), head.decode()

    def request(
        self,
        method: str,
        path: str,
        body: bytes | None = None,
        *,
        headers: dict[str, str] | None = None,
        token: bool = True,
    ) -> tuple[int, dict[str, object]]:
        fields = {"Host": f"127.0.0.1:{self.port}"}
        if token:
            fields["Authorization"] = f"Bearer {self.token}"
        if body is not None:
            fields["Content-Type"] = "application/json"
            fields["Content-Length"] = str(len(body))
        fields.update(headers or {})
        head = f"{method} {path} HTTP/1.1\r\n" + "".join(
            f"{k}: {v}\r\n" for k, v in fields.items() if v is not None
        )
        status, payload, _ = self.raw(head.encode() + b"\r\n" + (body or b""))
        return status, payload

    def workers(self) -> list[dict[str, object]]:
        status, payload = self.request("GET", "/workers")
        assert status == 200, payload
        return payload  # type: ignore[return-value]


@pytest.fixture(scope="module")
def admin(session_server_factory: ServerFactory) -> Iterator[Admin]:
    port = free_port()
    srv = session_server_factory(args=("--workers", "1", "--slots", "2", "--admin-port", str(port)))
    token_file = runtime_token_path(port)
    banner = srv.wait_output(f"admin token: {token_file}\n")
    assert f"admin token: {token_file}\n" in banner, banner
    yield Admin(srv, port, token_file)
    assert srv.stop() == 0
    assert not token_file.exists()  # removed at shutdown


def test_the_token_file_is_private(admin: Admin) -> None:
    info = admin.token_file.stat()
    assert stat.S_IMODE(info.st_mode) == 0o600
    assert stat.S_IMODE(admin.token_file.parent.stat().st_mode) == 0o700
    assert info.st_uid == os.getuid()
    assert len(admin.token) >= 40


def test_a_request_without_the_token_is_refused(admin: Admin) -> None:
    status, payload = admin.request("GET", "/workers", token=False)
    assert status == 401
    assert "admin token" in payload["error"]  # type: ignore[operator]
    assert str(admin.token_file) in payload["hint"]  # type: ignore[operator]
    for wrong in ("Bearer nope", f"Basic {admin.token}", f"Bearer {admin.token}x", "Bearer"):
        status, _ = admin.request("GET", "/workers", headers={"Authorization": wrong}, token=False)
        assert status == 401, wrong
    status, payload = admin.raw(
        f"POST /workers HTTP/1.1\r\nHost: 127.0.0.1:{admin.port}\r\n"
        'Content-Type: application/json\r\nContent-Length: 12\r\n\r\n{"slots": 4}'.encode()
    )[:2]
    assert status == 401
    assert len(admin.workers()) == 1


def test_hosts_that_are_not_loopback_are_refused(admin: Admin) -> None:
    for host in ("evil.example", f"evil.example:{admin.port}", "127.0.0.1", "127.0.0.1:1"):
        status, payload = admin.request("GET", "/workers", headers={"Host": host})
        assert status == 421, (host, payload)
    assert admin.raw(b"GET /workers HTTP/1.0\r\n\r\n")[0] == 421  # no Host at all
    for host in (f"localhost:{admin.port}", f"[::1]:{admin.port}", f"LOCALHOST:{admin.port}"):
        assert admin.request("GET", "/workers", headers={"Host": host})[0] == 200, host


def test_a_cross_site_post_changes_nothing(admin: Admin) -> None:
    """What a web page can send without a preflight: a form-like POST with an Origin."""
    body = b'{"slots": 256}'
    for content_type in ("text/plain", "application/x-www-form-urlencoded"):
        status, payload = admin.request(
            "POST",
            "/workers",
            body,
            headers={"Content-Type": content_type, "Origin": "http://evil.example"},
            token=False,
        )
        assert status == 403, payload
    # Even with the token: an Origin means a page sent it.
    status, _ = admin.request("POST", "/workers", body, headers={"Origin": "null"})
    assert status == 403
    status, payload = admin.request(
        "POST", "/workers", body, headers={"Content-Type": "text/plain"}
    )
    assert status == 415, payload
    assert len(admin.workers()) == 1


@pytest.mark.parametrize(
    "body",
    [
        b'{"slots": true}',
        b'{"slots": "4"}',
        b'{"slots": 0}',
        b'{"slots": -1}',
        b'{"slots": 257}',
        b'{"slots": 100000000000000000000000}',
        b'{"slots": 2.0}',
        b'{"slots": null}',
        b'{"slots": NaN}',
        b"{}",
        b'{"slots": 2, "host": "x"}',
        b'{"slots": 2, "slots": 3}',
        b"[2]",
        b'{"slots": ',
        b'\xff{"slots": 2}',
        b"1" * 5000,
    ],
)
def test_bad_worker_requests_are_refused(admin: Admin, body: bytes) -> None:
    status, payload = admin.request("POST", "/workers", body)
    assert status == 400, payload
    assert payload["error"]
    assert len(admin.workers()) == 1


def test_the_slot_bound_is_named(admin: Admin) -> None:
    status, payload = admin.request("POST", "/workers", b'{"slots": 1000}')
    assert status == 400
    assert "an integer from 1 to 256" in payload["error"]  # type: ignore[operator]


def test_sizes_are_bounded(admin: Admin) -> None:
    status, _ = admin.request("GET", "/workers", headers={"X-Filler": "a" * 10_000})
    assert status == 431
    # A huge body is refused on its Content-Length, unread.
    status, _ = admin.request("POST", "/workers", b"", headers={"Content-Length": str(1 << 30)})
    assert status == 413
    for length in ("-1", "+5", "0x10", "1 2"):
        status, _ = admin.request("POST", "/workers", b"", headers={"Content-Length": length})
        assert status == 400, length
    status, _ = admin.request(
        "POST", "/workers", b"", headers={"Content-Length": None, "Transfer-Encoding": "chunked"}
    )
    assert status == 400
    status, _ = admin.request("POST", "/workers", b"", headers={"Content-Length": None})
    assert status == 411
    status, _ = admin.request("DELETE", "/workers/1", b"{}")
    assert status == 400  # DELETE takes no body


def test_unknown_routes_and_methods(admin: Admin) -> None:
    assert admin.request("GET", "/")[0] == 404
    assert admin.request("GET", "/workers/1/x")[0] == 404
    assert admin.request("DELETE", "/workers/+1")[0] == 404
    assert admin.request("DELETE", "/workers/1%00")[0] == 404
    assert admin.request("PUT", "/workers")[0] == 405
    assert admin.request("GET", "/workers/1")[0] == 405
    assert admin.request("DELETE", "/workers/99")[0] == 404


def test_slow_and_idle_clients_time_out(admin: Admin) -> None:
    """A head or a body that never comes ends with 408; while such clients hold every
    admin connection, a further one gets 503 at once."""
    idle = [socket.create_connection(("127.0.0.1", admin.port)) for _ in range(15)]
    slow_body = socket.create_connection(("127.0.0.1", admin.port))
    slow_body.sendall(
        f"POST /workers HTTP/1.1\r\nHost: 127.0.0.1:{admin.port}\r\n"
        f"Authorization: Bearer {admin.token}\r\nContent-Type: application/json\r\n"
        "Content-Length: 12\r\n\r\n{".encode()
    )
    started = time.monotonic()
    time.sleep(0.5)
    status, payload, _ = admin.raw(b"GET /workers HTTP/1.1\r\n\r\n")
    assert status == 503, payload
    for sock in [*idle, slow_body]:
        sock.settimeout(30)
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
        assert data.startswith(b"HTTP/1.1 408 "), data
        sock.close()
    assert time.monotonic() - started < 20
    assert len(admin.workers()) == 1


def ctl(
    port: int, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "rivulet", "ctl", "--admin", f"http://127.0.0.1:{port}", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={k: v for k, v in os.environ.items() if k != "RIVULET_ADMIN_TOKEN_FILE"} | (env or {}),
    )


def test_ctl_without_the_token_explains_how_to_authenticate(admin: Admin, tmp_path: Path) -> None:
    missing = ctl(admin.port, "--token-file", str(tmp_path / "none"), "worker", "list")
    assert missing.returncode == 1
    assert "does not exist" in missing.stderr
    wrong = tmp_path / "wrong.token"
    wrong.write_text("not-the-token\n")
    refused = ctl(admin.port, "--token-file", str(wrong), "worker", "list")
    assert refused.returncode == 1, refused
    assert "requires the server's admin token" in refused.stdout
    assert "was not accepted" in refused.stdout
    assert "--token-file" in refused.stdout
    # Found by the port when not told; or given explicitly (also by environment).
    assert ctl(admin.port, "worker", "list").returncode == 0
    copied = tmp_path / "copied.token"
    copied.write_text(admin.token)
    out = ctl(admin.port, "worker", "list", env={"RIVULET_ADMIN_TOKEN_FILE": str(copied)})
    assert out.returncode == 0, out.stdout + out.stderr


def test_a_server_with_a_data_dir_keeps_its_token_there(
    server_factory: ServerFactory, tmp_path: Path
) -> None:
    port = free_port()
    data = tmp_path / "data"
    srv = server_factory(data_dir=data, args=("--admin-port", str(port)))
    token_file = data / "admin.token"
    assert f"admin token: {token_file}\n" in srv.wait_output(f"admin token: {token_file}\n")
    assert stat.S_IMODE(token_file.stat().st_mode) == 0o600
    listed = ctl(port, "--data-dir", str(data), "worker", "list")
    assert listed.returncode == 0, listed.stdout + listed.stderr
    assert ctl(port, "worker", "list").returncode == 1  # not where an in-memory one puts it
    assert srv.stop() == 0
    assert not token_file.exists()
