"""Node names and paths: Curator-exact encodings, ZooKeeper path rules, reversible ids."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from zkqueue.formats import naming
from zkqueue.errors import ConfigurationError, InvalidPathError
from zkqueue.formats.naming import (
    delay_prefix,
    delay_sort_key,
    encode_delay,
    encode_priority,
    id_matches,
    id_prefix,
    id_sort_key,
    is_item_name,
    is_simple_item_name,
    join,
    parse_delay_epoch,
    parse_id,
    parse_priority,
    priority_prefix,
    priority_sort_key,
    sequence_of,
    strip_sequence,
    validate_path,
    validate_queue_path,
)

INT_MIN, INT_MAX = -(2**31), 2**31 - 1
sequences = st.integers(0, 9_999_999_999)
priorities = st.integers(INT_MIN, INT_MAX)
epochs = st.integers(1, 2**63 - 1)
any_text = st.text(st.characters(exclude_categories=()), max_size=30)  # includes lone surrogates


def seq(n: int) -> str:
    return f"{n:010d}"


def test_prefix_constants() -> None:
    assert naming.ITEM_PREFIX == "queue-"
    assert naming.SIMPLE_PREFIX == "qn-"


# ------------------------------------------------------------------------------------------------- paths


@pytest.mark.parametrize(
    "path", ["/", "/a", "/a/b/c", "/a.b", "/...", "/a/..b", "/.a", "/ with space", "/é/日本", "/a|b", "/\ufeff"]
)
def test_validate_path_accepts(path: str) -> None:
    assert validate_path(path) == path


@pytest.mark.parametrize(
    ("path", "reason"),
    [
        ("", "empty"),
        ("a/b", "must start with '/'"),
        ("/a/", "must not end with '/'"),
        ("/a//b", "empty node name"),
        ("/.", "relative segment '.'"),
        ("/a/./b", "relative segment '.'"),
        ("/a/..", "relative segment '..'"),
        ("/../a", "relative segment '..'"),
        ("/a\x00b", "null character not allowed @2"),
        ("/a\x01", "U\\+0001"),
        ("/a\x1f", "U\\+001F"),
        ("/a\x7f", "U\\+007F"),
        ("/a\x9f", "U\\+009F"),
        ("/a\ud800", "U\\+D800"),
        ("/a\ue000", "U\\+E000"),
        ("/a\uf8ff", "U\\+F8FF"),
        ("/a\ufff0", "U\\+FFF0"),
        ("/a\uffff", "U\\+FFFF"),
        ("/a\U0001f600", "U\\+1F600"),  # a surrogate pair in Java's UTF-16
    ],
)
def test_validate_path_rejects(path: str, reason: str) -> None:
    with pytest.raises(InvalidPathError, match=reason):
        validate_path(path)


@pytest.mark.parametrize("bad", [None, b"/a", 5])
def test_validate_path_rejects_non_str(bad: object) -> None:
    with pytest.raises(InvalidPathError, match="must be a str"):
        validate_path(bad)  # type: ignore[arg-type]


def test_validate_path_sequential_like_zookeeper() -> None:
    # ZooKeeper validates path + "1" for sequential creates.
    assert validate_path("/q/", sequential=True) == "/q/"
    assert validate_path("/q/queue-", sequential=True) == "/q/queue-"
    with pytest.raises(InvalidPathError):
        validate_path("/q//", sequential=True)


def test_validate_queue_path_rejects_separator() -> None:
    assert validate_queue_path("/jobs/q") == "/jobs/q"
    with pytest.raises(InvalidPathError, match="can't use '\\|'"):
        validate_queue_path("/jobs|x/q")
    with pytest.raises(InvalidPathError, match="must not end"):
        validate_queue_path("/jobs/")


def test_join() -> None:
    assert join("/", "queue-") == "/queue-"
    assert join("/a/b", "queue-0000000001") == "/a/b/queue-0000000001"
    for bad in ("", "a/b"):
        with pytest.raises(InvalidPathError):
            join("/a", bad)
    with pytest.raises(InvalidPathError):
        join("a", "b")


# ------------------------------------------------------------------------------------ names and sequences


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("queue-0000000007", True),
        ("queue-1000000050000000007", True),
        ("queue-|18BCFE56800|0000000007", True),
        ("queue-|job_1_x|0000000007", True),
        ("queue-", True),
        ("qn-0000000003", False),
        ("lock-0000000001", False),
        ("Queue-0000000001", False),
        ("xqueue-0000000001", False),
    ],
)
def test_is_item_name(name: str, expected: bool) -> None:
    assert is_item_name(name) is expected


def test_is_simple_item_name() -> None:
    assert is_simple_item_name("qn-0000000003")
    assert not is_simple_item_name("queue-0000000003")


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("queue-0000000007", 7),
        ("queue-|x|2147483647", 2147483647),
        ("0000000000", 0),
        ("queue-000000007", None),  # 9 digits before the prefix's '-'
        ("queue-", None),
        ("queue-00000000x7", None),
        ("queue-000000000\u0667", None),  # ARABIC-INDIC SEVEN is a digit to str.isdigit, not to ZooKeeper
        ("queue-00000000\u00b27", None),  # SUPERSCRIPT TWO
    ],
)
def test_sequence_of(name: str, expected: int | None) -> None:
    assert sequence_of(name) == expected


@given(sequences)
def test_sequence_of_round_trip(n: int) -> None:
    assert sequence_of("queue-|a|" + seq(n)) == n


def test_strip_sequence() -> None:
    assert strip_sequence("queue-1000000050000000007") == "queue-100000005"
    assert strip_sequence("queue-|job|0000000007") == "queue-|job|"
    assert strip_sequence("queue-0000000007") == "queue-"
    assert strip_sequence("queue-foo") == "queue-foo"


# ---------------------------------------------------------------------------------------------- priority

PRIORITY_TABLE = [
    (0, "100000000"),
    (10, "10000000A"),
    (INT_MAX, "17FFFFFFF"),
    (-1, "0FFFFFFFF"),
    (INT_MIN, "080000000"),
]


@pytest.mark.parametrize(("priority", "encoded"), PRIORITY_TABLE)
def test_priority_table_from_reference(priority: int, encoded: str) -> None:
    assert encode_priority(priority) == encoded
    assert priority_prefix(priority) == "queue-" + encoded
    assert parse_priority("queue-" + encoded + "0000000007") == priority
    assert parse_priority("queue-" + encoded) == priority


def test_priority_reference_example_name() -> None:
    assert priority_prefix(5) + seq(7) == "queue-1000000050000000007"


@pytest.mark.parametrize("bad", [INT_MAX + 1, INT_MIN - 1, 2**64])
def test_priority_out_of_range(bad: int) -> None:
    with pytest.raises(ConfigurationError, match="32-bit range"):
        priority_prefix(bad)


@pytest.mark.parametrize("bad", [1.0, "1", None, True])
def test_priority_wrong_type(bad: object) -> None:
    with pytest.raises(TypeError, match="priority must be an int"):
        priority_prefix(bad)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "name",
    [
        "queue-0000000007",  # plain (Curator's requeue drops the priority)
        "queue-1800000000000000007",  # sign 1 with the top bit set: not an encoding of any int
        "queue-0000000000000000007",  # sign 0 without the top bit
        "queue-2000000000000000007",  # bad sign digit
        "queue-10000000a0000000007",  # lowercase hex is never written
        "queue-10000000A000000000x",  # bad sequence
        "queue-10000000A00000000070",  # too long
        "queue-|10000000A|0000000007",
        "qn-10000000A0000000007",
    ],
)
def test_parse_priority_rejects(name: str) -> None:
    assert parse_priority(name) is None


@given(priorities, sequences)
def test_priority_round_trip(priority: int, n: int) -> None:
    assert parse_priority(priority_prefix(priority) + seq(n)) == priority


@settings(max_examples=200)
@given(st.lists(st.tuples(priorities, sequences), min_size=2, max_size=30))
def test_priority_lexicographic_order_is_numeric_order(entries: list[tuple[int, int]]) -> None:
    names = [priority_prefix(p) + seq(n) for p, n in entries]
    by_name = sorted(names)
    assert [parse_priority(n) for n in by_name] == sorted(p for p, _ in entries)
    assert sorted(names, key=priority_sort_key) == by_name  # the key is Curator's order for priority names


def test_priority_sort_key_fifo_and_plain_names_first() -> None:
    names = [
        priority_prefix(3) + seq(1),
        priority_prefix(-5) + seq(9),
        "queue-" + seq(4),  # requeued by a Curator peer: jumps to the head, as in Curator
        priority_prefix(3) + seq(0),
        priority_prefix(INT_MIN) + seq(8),
    ]
    assert sorted(names, key=priority_sort_key) == [
        "queue-" + seq(4),
        priority_prefix(INT_MIN) + seq(8),
        priority_prefix(-5) + seq(9),
        priority_prefix(3) + seq(0),
        priority_prefix(3) + seq(1),
    ]


# ------------------------------------------------------------------------------------------------- delay


def test_delay_encoding() -> None:
    assert delay_prefix(0x18BCFE56800) == "queue-|18BCFE56800|"  # reference example, 11 digits
    assert encode_delay(1) == "|00000001|"  # at least 8 digits
    assert encode_delay(0xABCDEF) == "|00ABCDEF|"  # uppercase
    assert encode_delay(2**63 - 1) == "|7FFFFFFFFFFFFFFF|"


@pytest.mark.parametrize("bad", [0, -1, 2**63])
def test_delay_epoch_out_of_range(bad: int) -> None:
    with pytest.raises(ConfigurationError, match="delay epoch"):
        delay_prefix(bad)


@pytest.mark.parametrize("bad", [1.5, "1", None, False])
def test_delay_epoch_wrong_type(bad: object) -> None:
    with pytest.raises(TypeError, match="delay epoch must be an int"):
        delay_prefix(bad)  # type: ignore[arg-type]


@given(epochs, sequences)
def test_delay_round_trip(epoch: int, n: int) -> None:
    assert parse_delay_epoch(delay_prefix(epoch) + seq(n)) == epoch


@pytest.mark.parametrize(
    ("name", "epoch"),
    [
        ("queue-|18BCFE56800|0000000007", 0x18BCFE56800),
        ("queue-|a|b|ff|0000000007", 0xFF),  # the LAST two separators
        ("queue-|ff|", 0xFF),  # no sequence yet
        ("queue-|-10|0000000001", -16),  # Long.parseLong accepts a sign
        ("queue-|+10|0000000001", 16),
        ("queue-|\uff11\uff21|0000000001", 0x1A),  # Character.digit: fullwidth 1 and A
        ("queue-|\u0661\u0662|0000000001", 0x12),  # Arabic-Indic digits
        ("queue-|8000000000000000|0000000001", 0),  # over Long.MAX_VALUE
        ("queue-|-8000000000000000|0000000001", -(2**63)),
        ("queue-|zz|0000000001", 0),  # NumberFormatException -> 0 (due now)
        ("queue-| 1|0000000001", 0),
        ("queue-|1_0|0000000001", 0),  # Python's int() would accept this; Java does not
        ("queue-|-|0000000001", 0),
        ("queue-||0000000001", 0),  # adjacent separators
        ("|ff|0000000001", 0),  # first separator at index 0
        ("queue-0000000001", 0),  # no separators
        ("queue-|ff0000000001", 0),  # one separator
        ("queue-|job_1|0000000001", 0),  # an id name
    ],
)
def test_parse_delay_epoch_curator_semantics(name: str, epoch: int) -> None:
    assert parse_delay_epoch(name) == epoch


def test_delay_sort_key_numeric_and_fifo() -> None:
    late = delay_prefix(0x100000000) + seq(1)  # 9 hex digits: sorts first as a string
    early = delay_prefix(0xFFFFFFFF) + seq(2)
    tie_b = delay_prefix(500) + seq(7)
    tie_a = delay_prefix(500) + seq(3)
    malformed = "queue-|zz|" + seq(0)
    ordered = sorted([late, early, tie_b, tie_a, malformed], key=delay_sort_key)
    assert ordered == [malformed, tie_a, tie_b, early, late]


@settings(max_examples=100)
@given(st.lists(st.tuples(epochs, sequences), min_size=2, max_size=30, unique_by=lambda t: t[1]))
def test_delay_sort_key_orders_by_epoch_then_sequence(entries: list[tuple[int, int]]) -> None:
    names = [delay_prefix(e) + seq(n) for e, n in entries]
    random.Random(0).shuffle(names)
    ordered = sorted(names, key=delay_sort_key)
    assert [(parse_delay_epoch(n), sequence_of(n)) for n in ordered] == sorted(entries)


# ---------------------------------------------------------------------------------------------------- id


def curator_parse_id(name: str) -> tuple[str, str]:
    """Curator's DistributedIdQueue.parseId, transcribed: what a Curator consumer sees in our names."""
    first = name.find("|")
    second = name.find("|", first + 1)
    if first < 0 or second < 0:
        return name, name
    return name[first + 1 : second], name[:first] + name[second + 1 :]


@pytest.mark.parametrize(
    "item_id", ["job_1_x", "id", "a.b-c~d", "é日本語", "with space", "_", ".", "..", "x" * 300]
)
def test_plain_ids_are_curator_identical(item_id: str) -> None:
    assert id_prefix(item_id) == "queue-|" + item_id.replace("/", "_").replace("|", "_") + "|"


safe_ids = st.text(
    st.characters(max_codepoint=0xFFEF, exclude_characters="%/|", exclude_categories=("Cc", "Cs", "Co")),
    min_size=1,
    max_size=30,
).filter(lambda s: not any(0x7F <= ord(c) <= 0x9F or 0xD800 <= ord(c) <= 0xF8FF for c in s))


@given(safe_ids)
def test_ids_needing_no_escape_are_curator_identical(item_id: str) -> None:
    assert id_prefix(item_id) == "queue-|" + item_id + "|"


@pytest.mark.parametrize(
    ("item_id", "escaped"),
    [
        ("a/b", "a%2Fb"),
        ("a|b", "a%7Cb"),
        ("100%", "100%25"),
        ("%2F", "%252F"),
        ("nul\x00", "nul%00"),
        ("\x7f", "%7F"),
        ("smile\U0001f600", "smile%F0%9F%98%80"),
        ("\ue000", "%EE%80%80"),
        ("\ud800", "%ED%A0%80"),  # a lone surrogate, as JSON can produce
    ],
)
def test_id_escaping(item_id: str, escaped: str) -> None:
    assert id_prefix(item_id) == f"queue-|{escaped}|"
    assert parse_id(id_prefix(item_id) + seq(42)) == (item_id, "queue-" + seq(42))


@settings(max_examples=500)
@given(any_text.filter(bool), sequences)
def test_any_id_round_trips_and_is_a_valid_name(item_id: str, n: int) -> None:
    name = id_prefix(item_id) + seq(n)
    assert parse_id(name) == (item_id, "queue-" + seq(n))
    assert id_matches(name, item_id)
    validate_path("/q/" + name)  # ZooKeeper accepts it
    # A Curator consumer parses it too: same cleaned name, so the same FIFO order.
    curator_id, cleaned = curator_parse_id(name)
    assert cleaned == "queue-" + seq(n)
    assert "|" not in curator_id and "/" not in curator_id


@given(any_text.filter(bool), any_text.filter(bool))
def test_distinct_ids_give_distinct_names(a: str, b: str) -> None:
    if a != b:
        assert id_prefix(a) != id_prefix(b)
        assert not id_matches(id_prefix(a) + seq(1), b)


def test_empty_and_wrong_type_ids() -> None:
    with pytest.raises(ConfigurationError, match="Invalid id"):
        id_prefix("")
    with pytest.raises(TypeError, match="must be a str"):
        id_prefix(b"id")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        id_prefix(None)  # type: ignore[arg-type]


def test_parse_id_of_curator_names() -> None:
    assert parse_id("queue-|job_1_x|0000000007") == ("job_1_x", "queue-0000000007")
    assert parse_id("queue-||0000000007") == ("", "queue-0000000007")
    assert parse_id("queue-|a|b|0000000007") == ("a", "queue-b|0000000007")  # first and next separator
    # A Curator id with a literal '%' that is not a valid escape is read as written.
    assert parse_id("queue-|50%off|0000000001") == ("50%off", "queue-0000000001")
    assert parse_id("queue-|%FF|0000000001") == ("%FF", "queue-0000000001")  # not UTF-8
    assert parse_id("queue-|%2f|0000000001") == ("%2f", "queue-0000000001")  # we only write uppercase


@pytest.mark.parametrize("name", ["queue-0000000007", "queue-|0000000007", "foreign"])
def test_parse_id_without_two_separators(name: str) -> None:
    assert parse_id(name) == (None, name)
    assert id_sort_key(name) == name


def test_id_sort_key_is_fifo() -> None:
    names = [id_prefix("zzz") + seq(3), id_prefix("a/b") + seq(1), id_prefix("mmm") + seq(2)]
    assert sorted(names, key=id_sort_key) == [names[1], names[2], names[0]]
