"""``python -m benchmarks``: see :mod:`benchmarks.runner`."""

from benchmarks.runner import main

raise SystemExit(main())
