"""``python -m zkqueue.server.check_java``: fail early, with install advice, when Java 17+ is missing.

Runs before the virtual environment exists (``make test``), so it imports nothing outside the standard library
and zkqueue's own light modules.
"""

from __future__ import annotations

import sys

from zkqueue.server.embedded import java_version
from zkqueue.errors import EnvironmentProblem


def main() -> int:
    try:
        major = java_version()
    except EnvironmentProblem as exc:
        sys.stderr.write(f"zkqueue: {exc}\n")
        return 1
    sys.stdout.write(f"zkqueue: Java {major} found\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
