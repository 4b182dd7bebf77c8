"""``ast.parse`` in a child process, for tests that parse many sources while other threads of the test process run.

CPython 3.11 keeps the AST constructor's recursion depth in one state shared by every thread of the interpreter
(python/cpython#106905): a parse that runs while another thread builds an AST too can fail with ``SystemError: AST
constructor recursion depth mismatch``. Other threads do build ASTs: 3.11's tracebacks parse the source line of
each frame to place their ``^^^`` markers, so any background thread of an earlier test that logs an exception with
its traceback can collide with a parse here (it failed a CI run so). A child process has no other thread.
"""

from __future__ import annotations

import ast
import pickle
import subprocess
import sys

_CHILD = """
import ast, pickle, sys
out = []
for source in pickle.load(sys.stdin.buffer):
    try:
        out.append(ast.parse(source))
    except SyntaxError as exc:
        out.append(exc)
pickle.dump(out, sys.stdout.buffer)
"""


def parse_apart(sources: list[str]) -> list[ast.Module | SyntaxError]:
    """The module of each source (or the SyntaxError it raised), parsed in one child process."""
    done = subprocess.run([sys.executable, "-c", _CHILD], input=pickle.dumps(sources), capture_output=True,
                          check=True, timeout=120)
    return pickle.loads(done.stdout)
