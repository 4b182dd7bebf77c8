"""mkdocs hook: the docstrings use Sphinx roles (``:class:`~zkqueue.jobs.Job```), which mkdocstrings renders as
markdown, leaving ``:class:`` before the code span. This drops the role and, for ``~``, keeps the last name, as
Sphinx shows it."""

from __future__ import annotations

import re
from typing import Any

_ROLE = re.compile(r":(?:py:)?(?:class|meth|func|mod|attr|data|exc|obj|const):<code>(~?)([^<]+)</code>")


def _shown(match: re.Match[str]) -> str:
    short, target = match[1], match[2]
    name = target.rsplit(".", 1)[-1] if short else target
    return f"<code>{name}</code>"


def on_page_content(html: str, **kwargs: Any) -> str:
    return _ROLE.sub(_shown, html)
