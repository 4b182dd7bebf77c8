"""The chroot fast path builds exactly the wire paths kazoo would."""

from __future__ import annotations

import pytest
from kazoo.protocol.paths import _prefix_root

from zkqueue.protocol import _full_path

PATHS = ["/a", "/a/b", "/q/queue-", "/a/b/", "/a//b", "/a/./b", "/a/../b", "a/b", "/", "/a.b/c.d", "/.hidden"]


def _outcome(fn, *args, **kwargs):
    try:
        return fn(*args, **kwargs)
    except Exception as exc:  # noqa: BLE001 - comparing which error each side raises
        return type(exc)


@pytest.mark.parametrize("root", ["", "/", "/t-1", "/x/y"])
@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("trailing", [False, True])
def test_full_path_matches_kazoo(root: str, path: str, trailing: bool) -> None:
    assert _outcome(_full_path, root, path, trailing) == _outcome(_prefix_root, root, path, trailing=trailing)
