"""The type check: mypy over ``rivulet/`` (configured in pyproject.toml) finds no error
that ``tests/mypy_baseline.txt`` does not list, and the baseline lists none that is gone,
so that it only shrinks. Fix an error, then delete its line; regenerate the file with

    python tests/test_types.py > tests/mypy_baseline.txt

only to drop lines, never to accept new errors."""

from __future__ import annotations

import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BASELINE = ROOT / "tests" / "mypy_baseline.txt"
_ERROR = re.compile(r"^(?P<path>[^:\s]+):\d+: error: (?P<message>.*)$")


def _normalized(message: str) -> str:
    # Messages that cite another line would change whenever code above them moves.
    return re.sub(r"\bon line \d+", "on line N", message.strip())


def mypy_errors(cache_dir: Path | None = None) -> Counter[str]:
    """Each error as ``path: message [code]`` (no line number), with its count."""
    command = [sys.executable, "-m", "mypy", "--no-error-summary", "--no-pretty"]
    if cache_dir is not None:
        command += ["--cache-dir", str(cache_dir)]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode in (0, 1), done.stdout + done.stderr  # 2: mypy itself failed
    found: Counter[str] = Counter()
    for line in done.stdout.splitlines():
        match = _ERROR.match(line)
        if match:
            found[f"{match['path']}: {_normalized(match['message'])}"] += 1
    return found


def _baseline() -> Counter[str]:
    lines = BASELINE.read_text().splitlines()
    return Counter(line for line in lines if line.strip() and not line.startswith("#"))


def test_type_errors_only_shrink(tmp_path: Path) -> None:
    found = mypy_errors(tmp_path / "mypy-cache")
    baseline = _baseline()
    new = found - baseline
    assert not new, "type errors not in the baseline:\n" + "\n".join(sorted(new.elements()))
    fixed = baseline - found
    assert not fixed, "fixed type errors still in tests/mypy_baseline.txt (delete them):\n" + (
        "\n".join(sorted(fixed.elements()))
    )


if __name__ == "__main__":
    print("# mypy errors accepted for now (tests/test_types.py); this list only shrinks.")
    for line in sorted(mypy_errors().elements()):
        print(line)
