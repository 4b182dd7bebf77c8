"""Znode paths and item names, byte-identical to Curator 5.9's queue recipes. Pure: no I/O.

Item names (``<seq>`` is the 10-digit sequence ZooKeeper appends)::

    plain     queue-<seq>                       queue-0000000007
    priority  queue-<sign><8 hex><seq>          queue-1000000050000000007
    delay     queue-|<hex epoch ms>|<seq>       queue-|18BCFE56800|0000000007
    id        queue-|<id>|<seq>                 queue-|job_1_x|0000000007
    simple    qn-<seq>                          qn-0000000003

Where we deliberately differ from Curator (all wire-compatible):

- **Ids are escaped reversibly.** Curator's ``fixId`` maps ``/`` and ``|`` to ``_`` and so loses the id. We
  percent-escape (UTF-8, uppercase hex) ``%``, ``/``, ``|`` and every character ZooKeeper refuses in a path;
  all other characters are kept, so an id needing no escape yields exactly Curator's name. Curator still
  parses our names (the escaped id contains no ``|``); it just sees the escaped form as the id.
  Caveat: a Curator producer's raw id that happens to contain ``%XX`` (uppercase hex) is read back decoded.
- **Sort keys keep FIFO.** :func:`delay_sort_key` orders equal epochs by sequence (Curator leaves them in
  ``getChildren`` order); :func:`priority_sort_key` equals Curator's lexicographic order for priority names.
- **Bad arguments** raise :class:`~zkqueue.errors.ConfigurationError` (a ``ValueError``): a priority outside
  the Java ``int`` range, a delay epoch that is not in ``1 .. 2**63-1``, an empty id. A wrong *type* (e.g. a
  ``float`` priority, a ``bytes`` id) raises :class:`TypeError`. Bad paths raise
  :class:`~zkqueue.errors.InvalidPathError`.
"""

from __future__ import annotations

import logging
import operator
import re
import unicodedata

from zkqueue.errors import ConfigurationError, InvalidPathError

log = logging.getLogger("zkqueue.formats.naming")

ITEM_PREFIX = "queue-"
SIMPLE_PREFIX = "qn-"
SEPARATOR = "|"
SEQUENCE_DIGITS = 10

PRIORITY_MIN = -(2**31)
PRIORITY_MAX = 2**31 - 1
EPOCH_MAX = 2**63 - 1

# Characters ZooKeeper's PathUtils.validatePath refuses. It checks UTF-16 code units, so every code point
# above U+FFFF (a surrogate pair in Java) is refused too, as are lone surrogates.
_FORBIDDEN_CLASS = "\x00-\x1f\x7f-\x9f\ud800-\uf8ff\ufff0-\U0010ffff"
_FORBIDDEN = re.compile(f"[{_FORBIDDEN_CLASS}]")
# What an id must not carry raw: the escape character, the path and id separators, and the above.
_ID_UNSAFE = re.compile(f"[%/|{_FORBIDDEN_CLASS}]+")
_ESCAPE_RUN = re.compile("(?:%[0-9A-F]{2})+")

_ASCII_DIGITS = frozenset("0123456789")
_UPPER_HEX = frozenset("0123456789ABCDEF")


# ---------------------------------------------------------------------------------------------- paths


def validate_path(path: str, *, sequential: bool = False) -> str:
    """Return *path* unchanged if ZooKeeper would accept it, else raise :class:`InvalidPathError`.

    Mirrors ``org.apache.zookeeper.common.PathUtils.validatePath``: absolute; no trailing ``/`` except
    the root; no empty, ``.`` or ``..`` segments; no NUL, control (U+0001-U+001F, U+007F-U+009F),
    U+D800-U+F8FF, U+FFF0-U+FFFF or supplementary characters. With ``sequential=True`` the path is checked
    as ZooKeeper checks a sequential create (a trailing ``/`` is then allowed: the sequence follows it).
    """
    if not isinstance(path, str):
        raise InvalidPathError(f"a ZooKeeper path must be a str, got {type(path).__name__}: {path!r}")
    check = path + "1" if sequential else path
    if not check:
        raise InvalidPathError("invalid ZooKeeper path '': the path is empty")
    if check[0] != "/":
        raise InvalidPathError(f"invalid ZooKeeper path {path!r}: it must start with '/'")
    if check == "/":
        return path
    if check[-1] == "/":
        raise InvalidPathError(f"invalid ZooKeeper path {path!r}: it must not end with '/'")
    bad = _FORBIDDEN.search(check)
    if bad is not None:
        char = bad.group()
        what = "null character" if char == "\x00" else f"character U+{ord(char):04X}"
        raise InvalidPathError(f"invalid ZooKeeper path {path!r}: {what} not allowed @{bad.start()}")
    for segment in check[1:].split("/"):
        if not segment:
            raise InvalidPathError(f"invalid ZooKeeper path {path!r}: empty node name ('//')")
        if segment in (".", ".."):
            raise InvalidPathError(f"invalid ZooKeeper path {path!r}: relative segment {segment!r} not allowed")
    return path


def validate_queue_path(path: str) -> str:
    """:func:`validate_path`, and also refuse ``|``: id names are parsed on the first two ``|`` of the
    item path (Curator: ``DistributedQueue can't use |``)."""
    validate_path(path)
    if SEPARATOR in path:
        raise InvalidPathError(
            f"invalid queue path {path!r}: it must not contain '{SEPARATOR}' (DistributedQueue can't use "
            f"'{SEPARATOR}': id and delay item names use it as a separator)"
        )
    return path


def join(parent: str, name: str) -> str:
    """``parent/name`` (``/name`` under the root). *name* is one node name: non-empty, without ``/``.

    Cheap by design (used per child); *parent* is assumed to be a validated path.
    """
    if not name or "/" in name:
        raise InvalidPathError(f"invalid node name {name!r} under {parent!r}: it must be non-empty and contain no '/'")
    if not parent.startswith("/"):
        raise InvalidPathError(f"invalid parent path {parent!r}: it must start with '/'")
    if parent == "/":
        return "/" + name
    return parent + "/" + name


# ------------------------------------------------------------------------------------ names and sequence


def is_item_name(name: str) -> bool:
    """True for a child this queue may consume: Curator consumes every child named ``queue-*`` and logs
    the rest as foreign nodes."""
    return name.startswith(ITEM_PREFIX)


def is_simple_item_name(name: str) -> bool:
    """True for a ``SimpleDistributedQueue`` item (``qn-*``)."""
    return name.startswith(SIMPLE_PREFIX)


def sequence_of(name: str) -> int | None:
    """The trailing 10-digit ZooKeeper sequence of *name*, or ``None`` if it has none."""
    tail = name[-SEQUENCE_DIGITS:]
    if len(tail) == SEQUENCE_DIGITS and _ASCII_DIGITS.issuperset(tail):
        return int(tail)
    return None


def strip_sequence(name: str) -> str:
    """*name* without its trailing sequence (the prefix to re-create it with), or *name* if it has none."""
    if sequence_of(name) is None:
        return name
    return name[:-SEQUENCE_DIGITS]


# ---------------------------------------------------------------------------------------------- priority


def _as_int(value: object, what: str) -> int:
    if isinstance(value, bool):
        raise TypeError(f"{what} must be an int, got bool")
    try:
        return operator.index(value)  # type: ignore[arg-type]
    except TypeError:
        raise TypeError(f"{what} must be an int, got {type(value).__name__}: {value!r}") from None


def encode_priority(priority: int) -> str:
    """Curator's ``priorityToString``: ``1``/``0`` sign digit + 8 uppercase hex digits of the two's complement.

    Lexicographic order of the result equals numeric order. Raises :class:`ConfigurationError` outside the
    Java ``int`` range.
    """
    p = _as_int(priority, "priority")
    if not PRIORITY_MIN <= p <= PRIORITY_MAX:
        raise ConfigurationError(f"priority {p} is outside the 32-bit range [{PRIORITY_MIN}, {PRIORITY_MAX}]")
    return ("1" if p >= 0 else "0") + format(p & 0xFFFFFFFF, "08X")


def priority_prefix(priority: int) -> str:
    """Node-name prefix of a priority item: ``queue-`` + :func:`encode_priority`."""
    return ITEM_PREFIX + encode_priority(priority)


def parse_priority(name: str) -> int | None:
    """The priority encoded in a priority item name (with or without its sequence), or ``None``.

    Plain ``queue-<seq>`` names (e.g. items a Curator peer requeued) and malformed names give ``None``.
    """
    if not name.startswith(ITEM_PREFIX):
        return None
    body = name[len(ITEM_PREFIX) :]
    if len(body) == 9 + SEQUENCE_DIGITS:
        if not _ASCII_DIGITS.issuperset(body[9:]):
            return None
    elif len(body) != 9:
        return None
    sign, digits = body[0], body[1:9]
    if sign not in "01" or not _UPPER_HEX.issuperset(digits):
        return None
    value = int(digits, 16)
    if sign == "1":
        return value if value <= PRIORITY_MAX else None
    return value - 2**32 if value > PRIORITY_MAX else None


def priority_sort_key(name: str) -> tuple[int, int, str]:
    """Sort key for a priority queue: (priority, sequence, name).

    For well-formed priority names this is exactly Curator's lexicographic order (lower priority first,
    FIFO within a priority). Names without a priority (Curator's requeue drops it) sort before every
    priority, as they do in Curator for sequences below 10^9.
    """
    priority = parse_priority(name)
    seq = sequence_of(name)
    return (PRIORITY_MIN - 1 if priority is None else priority, -1 if seq is None else seq, name)


# ------------------------------------------------------------------------------------------------- delay


def encode_delay(epoch_ms: int) -> str:
    """Curator's ``epochToString``: ``|`` + ``%08X`` of the epoch (at least 8 digits, uppercase) + ``|``."""
    epoch = _as_int(epoch_ms, "delay epoch")
    if not 0 < epoch <= EPOCH_MAX:
        raise ConfigurationError(
            f"delay epoch {epoch} ms must be in 1 .. {EPOCH_MAX} (Curator: delayUntilEpoch cannot be negative)"
        )
    return SEPARATOR + format(epoch, "08X") + SEPARATOR


def delay_prefix(epoch_ms: int) -> str:
    """Node-name prefix of a delay item: ``queue-|<hex epoch>|``."""
    return ITEM_PREFIX + encode_delay(epoch_ms)


def _java_hex_digit(char: str) -> int:
    """``Character.digit(char, 16)`` for one UTF-16 unit: ASCII and fullwidth A-F, any Unicode decimal digit."""
    code = ord(char)
    if code < 0x80:
        return int(char, 16) if char in "0123456789abcdefABCDEF" else -1
    if 0xFF21 <= code <= 0xFF26:
        return code - 0xFF21 + 10
    if 0xFF41 <= code <= 0xFF46:
        return code - 0xFF41 + 10
    if code > 0xFFFF:
        return -1  # a surrogate pair in Java: each half is not a digit
    return unicodedata.decimal(char, -1)


def _java_parse_long_hex(text: str) -> int | None:
    """``Long.parseLong(text, 16)``, or ``None`` where Java throws NumberFormatException."""
    negative = text[:1] == "-"
    digits = text[1:] if text[:1] in ("-", "+") else text
    if not digits:
        return None
    value = 0
    for char in digits:
        digit = _java_hex_digit(char)
        if digit < 0:
            return None
        value = value * 16 + digit
    value = -value if negative else value
    if not -(2**63) <= value <= EPOCH_MAX:
        return None
    return value


def parse_delay_epoch(name: str) -> int:
    """Curator's ``getEpoch``: the hex between the **last two** ``|`` of *name*; 0 (due now) if absent or
    unparsable. The first ``|`` must not be at index 0 and the two must not be adjacent."""
    index2 = name.rfind(SEPARATOR)
    index1 = name.rfind(SEPARATOR, 0, index2) if index2 > 0 else -1
    if index1 > 0 and index2 > index1 + 1:
        value = _java_parse_long_hex(name[index1 + 1 : index2])
        if value is not None:
            return value
    return 0


def delay_sort_key(name: str) -> tuple[int, int, str]:
    """Sort key for a delay queue: (epoch, sequence, name), so equal epochs stay FIFO."""
    seq = sequence_of(name)
    return (parse_delay_epoch(name), -1 if seq is None else seq, name)


# ---------------------------------------------------------------------------------------------------- id


def _escape_run(match: re.Match[str]) -> str:
    return "".join(f"%{byte:02X}" for byte in match.group().encode("utf-8", "surrogatepass"))


def _unescape_run(match: re.Match[str]) -> str:
    run = match.group()
    try:
        return bytes.fromhex(run.replace("%", "")).decode("utf-8", "surrogatepass")
    except UnicodeDecodeError:
        return run  # not ours (e.g. a Curator id with a literal '%'): keep it as written


def escape_id(item_id: str) -> str:
    """Reversible, name-safe form of an id; identical to the id (and to Curator's ``fixId``) when it holds
    no ``%``, ``/``, ``|`` or character ZooKeeper refuses."""
    return _ID_UNSAFE.sub(_escape_run, item_id)


def unescape_id(text: str) -> str:
    """Inverse of :func:`escape_id`. Runs of ``%XX`` that are not valid UTF-8 are kept literally."""
    if "%" not in text:
        return text
    return _ESCAPE_RUN.sub(_unescape_run, text)


def _check_id(item_id: object) -> str:
    if not isinstance(item_id, str):
        raise TypeError(f"an item id must be a str, got {type(item_id).__name__}: {item_id!r}")
    if not item_id:
        raise ConfigurationError("Invalid id: '' (an item id must be non-empty)")
    return item_id


def id_prefix(item_id: str) -> str:
    """Node-name prefix of an id item: ``queue-|<escaped id>|``. Empty id: :class:`ConfigurationError`."""
    return ITEM_PREFIX + SEPARATOR + escape_id(_check_id(item_id)) + SEPARATOR


def parse_id(name: str) -> tuple[str | None, str]:
    """Split an id item name into ``(id, cleaned name)`` as Curator's ``parseId`` does: the id lies
    between the first and the next ``|``; the cleaned name is the rest, i.e. ``queue-<seq>``.

    Returns ``(None, name)`` for a name without two ``|`` (Curator logs "Bad node in queue").
    """
    first = name.find(SEPARATOR)
    second = name.find(SEPARATOR, first + 1) if first >= 0 else -1
    if second < 0:
        return None, name
    return unescape_id(name[first + 1 : second]), name[:first] + name[second + 1 :]


def id_matches(name: str, item_id: str) -> bool:
    """True if *name* is an item put with *item_id* (the fixed ``remove(id)`` comparison)."""
    return parse_id(name)[0] == _check_id(item_id)


def id_sort_key(name: str) -> str:
    """Sort key for an id queue: the cleaned name (``queue-<seq>``), so the queue is FIFO, as in Curator."""
    return parse_id(name)[1]


# ---------------------------------------------------------------------------------------------------- locks
LOCK_STYLES = ("qualified", "curator")


def lock_suffix(queue_path: str) -> str:
    """What a qualified lock name adds to the item name: ``@`` + 12 hex digits of SHA-1 of the queue path."""
    import hashlib  # noqa: PLC0415 - only lock naming needs it

    return "@" + hashlib.sha1(queue_path.encode("utf-8")).hexdigest()[:12]


def lock_name(item_name: str, queue_path: str, style: str = "qualified") -> str:
    """The lock node name for an item: Curator's (the item name) or qualified by the queue, so that queues
    sharing a lock path never collide."""
    if style == "curator":
        return item_name
    if style != "qualified":
        raise ConfigurationError(f"lock names must be one of {LOCK_STYLES}, got {style!r}")
    return item_name + lock_suffix(queue_path)


# --------------------------------------------------------------------------------------------------- leases
#: Items a block lease covers: every item whose sequence number is in ``[start, start + BLOCK_SPAN)``. Part of
#: the lock protocol: every zkqueue consumer of a queue must use the same span.
BLOCK_SPAN = 64
BLOCK_PREFIX = "block-"
FENCE_PREFIX = "fence-"


def block_of(item_name: str) -> int | None:
    """The first sequence number of the block *item_name* falls in, or ``None`` (no sequence: no block)."""
    seq = sequence_of(item_name)
    return None if seq is None else seq - seq % BLOCK_SPAN


def block_lock_name(block_start: int, queue_path: str) -> str:
    """The lock node of a block lease: ``block-<first sequence, 10 digits>@<queue hash>``."""
    return f"{BLOCK_PREFIX}{block_start:0{SEQUENCE_DIGITS}d}{lock_suffix(queue_path)}"


def parse_block_lock(lock: str, queue_path: str) -> int | None:
    """The first sequence number of the block a lock node of *queue_path* names, else ``None``."""
    suffix = lock_suffix(queue_path)
    if not (lock.startswith(BLOCK_PREFIX) and lock.endswith(suffix)):
        return None
    digits = lock[len(BLOCK_PREFIX) : -len(suffix)]
    if len(digits) != SEQUENCE_DIGITS or not _ASCII_DIGITS.issuperset(digits):
        return None
    return int(digits)


def fence_name(token: str, queue_path: str) -> str:
    """The session fence of one consumer of *queue_path*: ``fence-<token>@<queue hash>``."""
    return f"{FENCE_PREFIX}{token}{lock_suffix(queue_path)}"


def is_fence_name(lock: str, queue_path: str) -> bool:
    """True for a session fence of a consumer of *queue_path* (one per live lock-safe consumer)."""
    return lock.startswith(FENCE_PREFIX) and lock.endswith(lock_suffix(queue_path))
