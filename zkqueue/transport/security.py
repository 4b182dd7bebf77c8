"""Digest authentication, ACLs and TLS for queue clients.

A queue creates its nodes (queue, items, locks, fences, quarantine) with the kazoo client's ``default_acl``, so
securing a queue means securing its client::

    client = secure_client("zk1:2281,zk2:2281", auth="app:secret", acl=digest_acl("app", "secret"),
                           tls=TlsOptions(ca="ca.pem", certfile="client.pem", keyfile="client.key"))
    client.start()
    queue = QueueBuilder.builder(client, consume, StrSerializer(), "/queues/jobs").lock_path(...).build_queue()

Another client without the credentials then gets :class:`~zkqueue.errors.QueuePermissionError` when it puts,
and cannot consume or delete items (its reads and deletes are refused by the server).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from kazoo.client import KazooClient
from kazoo.security import ACL, OPEN_ACL_UNSAFE, Id, Permissions, make_digest_acl, make_digest_acl_credential

from zkqueue.errors import ConfigurationError
from zkqueue.transport.handler import new_client

#: Permission names accepted by :func:`digest_acl` and :func:`parse_acl`.
PERMISSIONS = {
    "read": Permissions.READ,
    "write": Permissions.WRITE,
    "create": Permissions.CREATE,
    "delete": Permissions.DELETE,
    "admin": Permissions.ADMIN,
    "all": Permissions.ALL,
}


def parse_auth(spec: str) -> tuple[str, str]:
    """``"user:password"`` -> ``(user, password)``; ConfigurationError when it is not that shape."""
    if not isinstance(spec, str):
        raise ConfigurationError(f"auth must be 'user:password', got {type(spec).__name__}")
    user, sep, password = spec.partition(":")
    if not sep or not user or not password:
        raise ConfigurationError("auth must be 'user:password' with a non-empty user and password")
    return user, password


def digest_auth(user: str, password: str) -> list[tuple[str, str]]:
    """kazoo ``auth_data`` for ZooKeeper's digest scheme."""
    if not user or not password or ":" in user:
        raise ConfigurationError("digest auth needs a user (without ':') and a non-empty password")
    return [("digest", f"{user}:{password}")]


def _perms(perms: Iterable[str] | str) -> int:
    names = [perms] if isinstance(perms, str) else list(perms)
    mask = 0
    for name in names:
        try:
            mask |= PERMISSIONS[name.lower()]
        except (KeyError, AttributeError):
            raise ConfigurationError(f"unknown ACL permission {name!r}; use {sorted(PERMISSIONS)}") from None
    if not mask:
        raise ConfigurationError("an ACL entry needs at least one permission")
    return mask


def digest_acl(user: str, password: str, perms: Iterable[str] | str = "all") -> ACL:
    """One ACL entry for a digest user (the server stores the salted hash, never the password)."""
    mask = _perms(perms)
    return ACL(mask, Id("digest", make_digest_acl_credential(user, password)))


def queue_acl(
    user: str, password: str, *, readers: Sequence[tuple[str, str]] = (), world_read: bool = False
) -> list[ACL]:
    """An ACL for every node of a queue: ``user`` may do everything; each ``(user, password)`` in ``readers``
    may only read (inspect, ``zkqueue stats``); ``world_read`` lets anyone read. Nobody else may consume: taking
    an item needs READ to read it, and DELETE on the queue node (plus CREATE on the lock path) to remove it."""
    acl = [digest_acl(user, password, "all")]
    acl += [digest_acl(u, p, "read") for u, p in readers]
    if world_read:
        acl.append(ACL(Permissions.READ, Id("world", "anyone")))
    return acl


def parse_acl(spec: str) -> list[ACL]:
    """A command-line ACL: ``"digest:user:password:perm+perm,world:anyone:read"`` -> ACL entries.

    ``perm`` is one of read, write, create, delete, admin, all. ``open`` alone is the open (unsafe) ACL.
    """
    if spec.strip() == "open":
        return list(OPEN_ACL_UNSAFE)
    acl: list[ACL] = []
    for entry in filter(None, (e.strip() for e in spec.split(","))):
        parts = entry.split(":")
        if parts[0] == "digest" and len(parts) == 4:
            acl.append(digest_acl(parts[1], parts[2], parts[3].split("+")))
        elif parts[0] == "world" and len(parts) == 3 and parts[1] == "anyone":
            acl.append(ACL(_perms(parts[2].split("+")), Id("world", "anyone")))
        else:
            raise ConfigurationError(
                f"bad ACL entry {entry!r}: use digest:USER:PASSWORD:PERMS or world:anyone:PERMS (PERMS like read+create)"
            )
    if not acl:
        raise ConfigurationError("empty ACL")
    return acl


@dataclass(frozen=True)
class TlsOptions:
    """kazoo's TLS settings. PEM files: ``ca`` (the CA or server certificate to trust), and for mutual TLS a
    client ``certfile`` and ``keyfile`` (``keyfile_password`` if the key is encrypted). ``verify_certs=False``
    encrypts without checking the server (tests only); ``check_hostname`` also checks that the certificate names
    the host connected to (kazoo's default is off)."""

    ca: str | None = None
    certfile: str | None = None
    keyfile: str | None = None
    keyfile_password: str | None = None
    verify_certs: bool = True
    check_hostname: bool = False

    def __post_init__(self) -> None:
        for name in ("ca", "certfile", "keyfile"):
            path = getattr(self, name)
            if path is not None and not os.path.isfile(path):
                raise ConfigurationError(f"TLS {name} file not found: {path}")
        if (self.certfile is None) != (self.keyfile is None):
            raise ConfigurationError("a TLS client certificate needs both certfile and keyfile")
        if self.verify_certs and self.ca is None:
            raise ConfigurationError("verify_certs needs a ca file (or pass verify_certs=False)")
        if self.check_hostname and not self.verify_certs:
            raise ConfigurationError("check_hostname needs verify_certs")

    def kazoo_kwargs(self) -> dict[str, Any]:
        kwargs: dict[str, Any] = {
            "use_ssl": True,
            "verify_certs": self.verify_certs,
            "check_hostname": self.check_hostname,
        }
        for name in ("ca", "certfile", "keyfile", "keyfile_password"):
            value = getattr(self, name)
            if value is not None:
                kwargs[name] = value
        return kwargs


def client_kwargs(
    *, auth: str | tuple[str, str] | None = None, acl: Sequence[ACL] | None = None, tls: TlsOptions | None = None
) -> dict[str, Any]:
    """KazooClient keyword arguments for digest ``auth`` (``"user:password"`` or a pair), a default ``acl`` for
    every node the client creates, and ``tls``. With ``auth`` and no ``acl``, nodes get :func:`queue_acl` of that
    user (everything for the user, nothing for anyone else)."""
    kwargs: dict[str, Any] = {}
    if auth is not None:
        user, password = parse_auth(auth) if isinstance(auth, str) else auth
        kwargs["auth_data"] = digest_auth(user, password)
        if acl is None:
            acl = queue_acl(user, password)
    if acl is not None:
        acl = list(acl)
        if not acl or not all(isinstance(a, ACL) for a in acl):
            raise ConfigurationError("acl must be a non-empty list of kazoo.security.ACL")
        kwargs["default_acl"] = acl
    if tls is not None:
        kwargs.update(tls.kazoo_kwargs())
    return kwargs


def secure_client(
    hosts: str,
    *,
    auth: str | tuple[str, str] | None = None,
    acl: Sequence[ACL] | None = None,
    tls: TlsOptions | None = None,
    **kazoo_kwargs: Any,
) -> KazooClient:
    """A KazooClient (not started) set up by :func:`client_kwargs`, on :class:`~zkqueue.transport.handler.PollingHandler`
    unless ``handler`` is given; other keyword arguments go to kazoo."""
    return new_client(hosts, **client_kwargs(auth=auth, acl=acl, tls=tls), **kazoo_kwargs)


__all__ = [
    "PERMISSIONS",
    "TlsOptions",
    "client_kwargs",
    "digest_acl",
    "digest_auth",
    "parse_acl",
    "parse_auth",
    "queue_acl",
    "secure_client",
    "make_digest_acl",
]
