"""What one long value costs in memory, by the shape of the job it passes through.

    python bench/value_memory.py [--mb 10] [--rows 1] [--rewrites 20] [--data-dir]

Each shape runs in a fresh process (an embedded, in-memory instance, or on a temporary
data directory): a table ``t (id, g, v)``, a job over it - none, ``count(*)`` or
``string_agg(v)`` grouped by ``g`` - and ``--rows`` rows whose ``v`` is ``--mb`` MB long,
written one INSERT each into the same group. Prints the resident memory each adds and
keeps a second after (retained), and its peak meanwhile (VmHWM, reset before the writes).
Then ``--rewrites`` one-character rows go into the same group, each rewriting the group's
result, and what is retained after them is printed too (it must not grow with them).
"""

from __future__ import annotations

import argparse
import gc
import subprocess
import sys
import tempfile
import time

SHAPES = {
    "plain table": None,
    "count(*) MV": "SELECT g, count(*) AS c FROM t GROUP BY g",
    "string_agg MV": "SELECT g, string_agg(v, ',') AS s FROM t GROUP BY g",
}


def _status_mib(key: str) -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key):
                return int(line.split()[1]) / 1024
    raise KeyError(key)


def run_shape(mv: str | None, mb: int, rows: int, rewrites: int, data_dir: str | None) -> None:
    """In this process: the figures of one shape, printed as ``retained peak after``."""
    import rivulet

    con = rivulet.connect(data_dir)
    con.execute("CREATE TABLE t (id INT PRIMARY KEY, g INT, v VARCHAR)")
    if mv is not None:
        con.execute(f"CREATE MATERIALIZED VIEW m AS {mv}")
    con.execute("INSERT INTO t VALUES (0, 0, 'x')")
    gc.collect()
    time.sleep(0.5)
    base = _status_mib("VmRSS")
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # VmHWM from here on
    big = "y" * (mb << 20)
    for i in range(rows):
        con.execute("INSERT INTO t VALUES (%s, 0, %s)", [i + 1, big])
    del big
    gc.collect()
    time.sleep(1)
    retained, peak = _status_mib("VmRSS") - base, _status_mib("VmHWM") - base
    for i in range(rewrites):
        con.execute("INSERT INTO t VALUES (%s, 0, 'z')", [rows + 1 + i])
    gc.collect()
    time.sleep(1)
    print(f"{retained:.0f} {peak:.0f} {_status_mib('VmRSS') - base:.0f}")
    con.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mb", type=int, default=10)
    ap.add_argument("--rows", type=int, default=1)
    ap.add_argument("--rewrites", type=int, default=20)
    ap.add_argument("--data-dir", action="store_true", help="on a data directory")
    ap.add_argument("--shape", help=argparse.SUPPRESS)  # the child process's part
    args = ap.parse_args()
    if args.shape is not None:
        with tempfile.TemporaryDirectory() as tmp:
            where = tmp if args.data_dir else None
            run_shape(SHAPES[args.shape], args.mb, args.rows, args.rewrites, where)
        return
    where = "data directory" if args.data_dir else "in memory"
    print(f"{args.rows} row(s) of {args.mb} MB into one group, {where}:")
    for name in SHAPES:
        cmd = [sys.executable, __file__, "--shape", name, "--mb", str(args.mb)]
        cmd += ["--rows", str(args.rows), "--rewrites", str(args.rewrites)]
        cmd += ["--data-dir"] if args.data_dir else []
        out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout.split()
        retained, peak, after = map(float, out[-3:])
        print(
            f"  {name:<14}  retained +{retained:4.0f} MiB   peak +{peak:4.0f} MiB"
            f"   after {args.rewrites} rewrites +{after:4.0f} MiB"
        )


if __name__ == "__main__":
    main()
