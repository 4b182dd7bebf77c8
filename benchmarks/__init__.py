"""zkqueue's benchmark harness: zkqueue vs Apache Curator 5.9.0 vs kazoo's recipes on one real ensemble.

Run ``python -m benchmarks --help`` (or ``zkqueue bench --help``). Modules:

- ``runner``        command line, ensemble, the interleaved run plan, progress bar
- ``workloads``     the workloads and their targets (issue 6)
- ``peers``         one class per implementation: zkqueue (in process + consumer subprocesses), the Curator Java
                    peer (``zkqueue.interop``), kazoo's ``Queue`` / ``LockingQueue``
- ``consumer_proc`` the consumer entry point run as its own process and session (zkqueue and kazoo)
- ``prefill``       fast queue pre-filling with multi transactions
- ``machine``       the machine description stored with every result
- ``report``        medians and spread, the terminal table, JSON and the PNG chart
"""
