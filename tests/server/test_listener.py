"""The accept loop when ``accept()`` itself fails for want of file descriptors: it pauses
and backs off, logs once, and accepts again once descriptors are free. Run in a child
process whose descriptor table is really full."""

from __future__ import annotations

import socket
import subprocess
import sys
import textwrap
import time

_CHILD = textwrap.dedent(
    """
    import asyncio, logging, os, resource, sys
    from rivulet.server.pgwire.listener import Listener, listening_sockets

    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(message)s")
    resource.setrlimit(resource.RLIMIT_NOFILE, (64, 64))

    async def main():
        accepted = []
        listener = Listener(listening_sockets("127.0.0.1", 0), accepted.append)
        filler = []
        try:
            while True:
                filler.append(os.open("/dev/null", os.O_RDONLY))
        except OSError:
            pass
        print(listener.sockets[0].getsockname()[1], flush=True)
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(None, sys.stdin.readline)  # the clients are waiting
        print("accepted while full:", len(accepted), flush=True)
        for fd in filler[:10]:  # the lowest numbers: under the reserve
            os.close(fd)
        for _ in range(100):
            if len(accepted) == 5:
                break
            await asyncio.sleep(0.05)
        print("accepted:", len(accepted), flush=True)
        listener.close()

    asyncio.run(main())
    """
)


def test_accept_backs_off_when_out_of_descriptors() -> None:
    child = subprocess.Popen(
        [sys.executable, "-c", _CHILD],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout is not None and child.stdin is not None
        port = int(child.stdout.readline())
        clients = [socket.create_connection(("127.0.0.1", port), timeout=5) for _ in range(5)]
        time.sleep(2)  # accept() fails all this time
        child.stdin.write("go\n")
        child.stdin.flush()
        out, err = child.communicate(timeout=30)
    finally:
        if child.poll() is None:
            child.kill()
    for sock in clients:
        sock.close()
    assert child.returncode == 0, err
    assert "accepted while full: 0" in out
    assert "accepted: 5" in out, out + err
    # One warning for the whole episode, not one per attempt (nor a traceback).
    warnings = [line for line in err.splitlines() if "cannot accept connections" in line]
    assert len(warnings) == 1, err
    assert "Traceback" not in err
    assert len(err) < 2000, err
