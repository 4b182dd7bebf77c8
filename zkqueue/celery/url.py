"""Broker URLs of the ``zkqueue://`` transport: ``zkqueue://[user:password@]host1:2181,host2:2181/chroot?opts``.

kombu's own ``parse_url`` reads one ``host:port`` only (it fails on ``h1:2181,h2:2181``, kombu #734), so the
transport declares ``can_parse_url`` and parses its URLs here. Pure: no I/O.

- hosts: one or more ``host[:port]`` (default port 2181), IPv6 in brackets (``[::1]:2181``), comma-separated;
- chroot: the path after the hosts (``/`` or none: no chroot); every node of the transport lives under it;
- user and password: ZooKeeper digest auth (nodes the transport creates are then readable only by that user);
- query options: ``session_timeout`` (seconds), ``root`` (the transport's own node under the chroot, default
  ``/kombu``); unknown options are refused, so a typo does not pass silently.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass, field
from urllib.parse import parse_qsl, unquote

from zkqueue.errors import ConfigurationError, InvalidPathError
from zkqueue.formats import naming

log = logging.getLogger("zkqueue.celery.url")

SCHEME = "zkqueue"
DEFAULT_PORT = 2181
DEFAULT_ROOT = "/kombu"
#: Query options a URL may carry, and how each is read.
URL_OPTIONS = {"session_timeout": float, "root": str}

_HOST = re.compile(r"^(?:\[(?P<v6>[0-9A-Fa-f:.]+)\]|(?P<name>[A-Za-z0-9_.\-]+))(?::(?P<port>[0-9]*))?$")


@dataclass(frozen=True)
class ZkUrl:
    """A parsed broker URL."""

    hosts: tuple[str, ...]  # "host:port", IPv6 as "[addr]:port"
    chroot: str | None = None
    user: str | None = None
    password: str | None = None
    options: dict[str, object] = field(default_factory=dict, compare=False, hash=False)

    @property
    def connect_string(self) -> str:
        """kazoo's ``hosts`` argument: the hosts, and the chroot appended."""
        return ",".join(self.hosts) + (self.chroot or "")

    @property
    def auth(self) -> tuple[str, str] | None:
        return None if self.user is None else (self.user, self.password or "")

    def as_uri(self, *, include_password: bool = False, mask: str = "**") -> str:
        """The URL again, the password masked unless ``include_password``."""
        cred = ""
        if self.user is not None:
            secret = self.password if include_password else mask
            cred = f"{self.user}:{secret}@" if self.password is not None else f"{self.user}@"
        query = "&".join(f"{k}={v}" for k, v in sorted(self.options.items()))
        return f"{SCHEME}://{cred}{','.join(self.hosts)}{self.chroot or ''}{'?' + query if query else ''}"


def _host(text: str, url: str) -> str:
    match = _HOST.match(text.strip())
    if match is None:
        raise ConfigurationError(f"bad host {text!r} in broker URL {mask_url(url)!r}: expected host[:port]")
    port_text = match.group("port")
    if port_text == "":
        raise ConfigurationError(f"bad host {text!r} in broker URL {mask_url(url)!r}: empty port")
    port = DEFAULT_PORT if port_text is None else int(port_text)
    if not 0 < port < 65536:
        raise ConfigurationError(f"bad port {port} in broker URL {mask_url(url)!r}: must be 1..65535")
    host = f"[{match.group('v6')}]" if match.group("v6") else match.group("name")
    return f"{host}:{port}"


def _chroot(path: str, url: str) -> str | None:
    path = unquote(path)
    if path in ("", "/"):
        return None
    try:
        naming.validate_path(path)
    except InvalidPathError as exc:
        raise ConfigurationError(f"bad chroot in broker URL {mask_url(url)!r}: {exc}") from None
    return path


def _options(query: str, url: str) -> dict[str, object]:
    options: dict[str, object] = {}
    for key, value in parse_qsl(query, keep_blank_values=True):
        kind = URL_OPTIONS.get(key)
        if kind is None:
            raise ConfigurationError(
                f"unknown option {key!r} in broker URL {mask_url(url)!r}; known: {', '.join(sorted(URL_OPTIONS))}")
        try:
            options[key] = kind(value)
        except ValueError:
            raise ConfigurationError(f"bad value {value!r} for {key!r} in broker URL {mask_url(url)!r}") from None
    root = options.get("root")
    if root is not None:
        try:
            naming.validate_path(str(root))
        except InvalidPathError as exc:
            raise ConfigurationError(f"bad root in broker URL {mask_url(url)!r}: {exc}") from None
        if root == "/":
            raise ConfigurationError(f"bad root in broker URL {mask_url(url)!r}: '/' (give a node of its own)")
    timeout = options.get("session_timeout")
    if timeout is not None and not float(timeout) > 0:  # type: ignore[arg-type]
        raise ConfigurationError(f"session_timeout must be > 0 in broker URL {mask_url(url)!r}")
    return options


def parse_url(url: str) -> ZkUrl:
    """Parse a ``zkqueue://`` URL; :class:`~zkqueue.errors.ConfigurationError` says what is wrong with a bad one."""
    if not isinstance(url, str):
        raise ConfigurationError(f"a broker URL must be a str, got {type(url).__name__}")
    scheme, sep, rest = url.partition("://")
    if not sep or scheme != SCHEME:
        raise ConfigurationError(f"not a {SCHEME}:// URL: {mask_url(url)!r}")
    rest, _, query = rest.partition("?")
    netloc, slash, path = rest.partition("/")
    user = password = None
    if "@" in netloc:
        cred, _, netloc = netloc.rpartition("@")
        user, colon, pw = cred.partition(":")
        user, password = unquote(user), (unquote(pw) if colon else None)
        if not user:
            raise ConfigurationError(f"empty user name in broker URL {mask_url(url)!r}")
    hosts = tuple(_host(h, url) for h in netloc.split(",")) if netloc.strip() else ()
    if not hosts or any(not h for h in netloc.split(",")):
        raise ConfigurationError(f"no ZooKeeper host in broker URL {mask_url(url)!r} (zkqueue://host:2181[,...]/chroot)")
    return ZkUrl(hosts, _chroot(slash + path, url), user, password, _options(query, url))


def from_parts(hostname: str | None, port: int | None, virtual_host: str | None, userid: str | None = None,
               password: str | None = None) -> ZkUrl:
    """The URL of kombu's parsed connection fields: what a :class:`kombu.Connection` holds after ``switch()`` to
    an alternate URL (kombu parses that one itself, one host only; its path is the ``virtual_host``)."""
    host = (hostname or "localhost").strip()
    if ":" in host and "," not in host and not host.startswith("["):
        host = f"[{host}]"  # kombu's parse gives an IPv6 address without its brackets
    has_port = host.rsplit("]", 1)[-1].startswith(":") if host.startswith("[") else ":" in host
    netloc = f"{host}:{port}" if port and "," not in host and not has_port else host
    vhost = (virtual_host or "").strip("/")
    cred = ""
    if userid:
        cred = f"{userid}:{password}@" if password is not None else f"{userid}@"
    return parse_url(f"{SCHEME}://{cred}{netloc}/{vhost}")


def mask_url(url: str, mask: str = "**") -> str:
    """``url`` with its password (if any) replaced by ``mask``, for error messages and logs."""
    scheme, sep, rest = url.partition("://")
    netloc, slash, tail = rest.partition("/")
    if "@" in netloc:
        cred, _, hosts = netloc.rpartition("@")
        user, colon, _pw = cred.partition(":")
        netloc = f"{user}:{mask}@{hosts}" if colon else f"{user}@{hosts}"
    return f"{scheme}{sep}{netloc}{slash}{tail}"
