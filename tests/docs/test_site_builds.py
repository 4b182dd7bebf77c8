"""The documentation site: ``mkdocs build --strict`` passes (one build for the module), no internal link of the
built HTML is broken, and headless chromium renders the home page and a guide with the navigation in place."""

from __future__ import annotations

import contextlib
import functools
import http.server
import os
import re
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urljoin, urlsplit

import pytest

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pytest.importorskip("mkdocs", reason="the site needs the docs extra: pip install -e '.[docs]'")
    out = tmp_path_factory.mktemp("site")
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--quiet", "--site-dir", str(out)],
                          cwd=ROOT, check=False, capture_output=True, text=True, timeout=240,
                          env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-6000:]
    return out


class _Page(HTMLParser):
    """The ids and the <a href> targets of one HTML page."""

    def __init__(self) -> None:
        super().__init__()
        self.ids: set[str] = set()
        self.hrefs: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        for name, value in attrs:
            if name in ("id", "name") and value:
                self.ids.add(value)
            if tag == "a" and name == "href" and value is not None:
                self.hrefs.append(value)


@functools.cache
def _parsed(path: Path) -> _Page:
    page = _Page()
    page.feed(path.read_text(errors="replace"))
    return page


def _target(site: Path, page: Path, href: str) -> tuple[Path, str] | None:
    """The file and anchor a local link points at; None for links off the site."""
    parts = urlsplit(href)
    if parts.scheme or parts.netloc or href.startswith(("mailto:", "javascript:")):
        return None
    base = "/" + page.relative_to(site).as_posix()
    path = unquote(urlsplit(urljoin(base, parts.path)).path) if parts.path else base
    target = site / path.lstrip("/")
    if path.endswith("/") or target.is_dir():
        target = target / "index.html"
    return target, unquote(parts.fragment)


def test_the_site_builds_strict_with_every_section(site: Path) -> None:
    for page in ("index.html", "getting-started/first-task/index.html", "guides/jobs/index.html",
                 "operations/cli/index.html", "reference/api/index.html", "benchmarks/index.html",
                 "celery/index.html", "async-workers/index.html"):
        assert (site / page).is_file(), page
    cli = (site / "operations/cli/index.html").read_text()
    assert "zkqueue worker" in cli and "--concurrency" in cli  # mkdocs-click rendered the commands
    api = (site / "reference/api/index.html").read_text()
    assert "JobQueue" in api and "RetryPolicy" in api  # mkdocstrings rendered the docstrings
    bench = (site / "benchmarks/index.html").read_text()
    assert "python -m benchmarks" in bench and "load average" in bench  # generated from the result files
    layout = (site / "design/layout/index.html").read_text()
    for package in ("zkqueue.metrics", "zkqueue.ops.dashboard", "zkqueue.spark", "zkqueue.tasks"):
        assert package in layout, package  # generated from the package: no module left out


def test_no_internal_link_is_broken(site: Path) -> None:
    broken: list[str] = []
    checked = 0
    for page in sorted(site.rglob("*.html")):
        for href in _parsed(page).hrefs:
            target = _target(site, page, href)
            if target is None:
                continue
            checked += 1
            path, anchor = target
            if not path.exists():
                broken.append(f"{page.relative_to(site)}: {href} -> {path.relative_to(site)} missing")
            elif anchor and path.suffix == ".html" and anchor not in _parsed(path).ids:
                broken.append(f"{page.relative_to(site)}: {href} -> no #{anchor} in {path.relative_to(site)}")
    assert checked > 500, checked  # the navigation alone links every page from every page
    assert not broken, "\n".join(broken[:40])


@contextlib.contextmanager
def _serve(directory: Path) -> Iterator[str]:
    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Quiet, directory=str(directory)))
    thread = threading.Thread(target=server.serve_forever, name="docs-site-server", daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)


def _chromium(tmp: Path, *args: str) -> subprocess.CompletedProcess[str]:
    assert CHROMIUM is not None
    return subprocess.run([CHROMIUM, "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                           "--no-first-run", "--no-default-browser-check", "--hide-scrollbars",
                           f"--user-data-dir={tmp / 'chromium-profile'}", "--window-size=1280,900",
                           "--virtual-time-budget=2000", *args],
                          check=False, capture_output=True, text=True, timeout=90)


@pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (make test installs it with apt as root)")
@pytest.mark.parametrize("path,title,heading", [
    ("", "zkqueue", "zkqueue"),
    ("guides/jobs/", "Job queues - zkqueue", "Job queues"),
])
def test_a_browser_renders_the_page_with_its_navigation(site: Path, tmp_path: Path, path: str, title: str,
                                                        heading: str) -> None:
    image = pytest.importorskip("PIL.Image", reason="the screenshot check reads the PNG with Pillow (dev extra)")
    shot = tmp_path / "page.png"
    with _serve(site) as base:
        done = _chromium(tmp_path, f"--screenshot={shot}", "--dump-dom", base + path)  # one load, both outputs
    assert done.returncode == 0 and shot.is_file(), done.stderr[-2000:]
    html = done.stdout
    assert f"<title>{title}</title>" in html, html[:2000]
    assert re.search(r'<html[^>]*class="[^"]*\bjs\b', html), "the theme's script did not run"
    assert 'class="md-nav md-nav--primary"' in html  # material's navigation, with every section
    for section in ("Getting started", "Concepts", "Guides", "Operations", "API reference"):
        assert section in html, section
    assert "md-search__input" in html  # the search box the theme's script drives
    body = _parsed_text(html)
    assert heading in body
    assert "```" not in body, "a code fence was not rendered"
    with image.open(shot) as png:
        assert png.size == (1280, 900)
        colours = png.convert("RGB").getcolors(maxcolors=1 << 20)
    assert colours is not None and len(colours) > 50, "the screenshot is (nearly) one colour: nothing rendered"


def _parsed_text(html: str) -> str:
    class Text(HTMLParser):
        def __init__(self) -> None:
            super().__init__()
            self.parts: list[str] = []
            self._skip = 0

        def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
            self._skip += tag in ("script", "style")

        def handle_endtag(self, tag: str) -> None:
            self._skip -= tag in ("script", "style")

        def handle_data(self, data: str) -> None:
            if not self._skip:
                self.parts.append(data)

    parser = Text()
    parser.feed(html)
    return " ".join(parser.parts)
