"""JSON validation of job arguments: the error names the argument path and the fix."""

from __future__ import annotations

import datetime as dt
import decimal
import json
import uuid

import pytest

from django_workqueue.exceptions import PayloadNotJSON, PayloadTooLarge
from django_workqueue.payload import (
    MAX_DEPTH,
    acyclic_encoder,
    check_size,
    describe,
    encode,
    find_non_json,
)


@pytest.mark.parametrize(
    "value",
    [
        [],
        {},
        [1, -2, 3.5, "x", True, False, None],
        {"a": [1, {"b": [None, {"c": "é"}]}], "d": {}},
        (1, (2, 3)),
        [10**30],
    ],
)
def test_json_values_pass(value):
    assert find_non_json(value, "args") is None


def test_names_a_kwarg_holding_a_datetime_and_hints_isoformat():
    when = dt.datetime(2024, 5, 1, 12, tzinfo=dt.UTC)
    where, reason = find_non_json({"to": "a@b.c", "when": when}, "kwargs")
    assert where == "kwargs['when']"
    assert reason == "is a datetime.datetime, not JSON (pass value.isoformat())"


@pytest.mark.parametrize("value", [dt.date(2024, 1, 1), dt.time(12, 30)])
def test_dates_and_times_get_the_isoformat_hint(value):
    where, reason = find_non_json([value], "args")
    assert where == "args[0]"
    assert "(pass value.isoformat())" in reason


def test_names_a_nested_positional_argument():
    where, reason = find_non_json([1, [object()]], "args")
    assert where == "args[1][0]"
    assert reason == "is a builtins.object, not JSON"


def test_names_a_path_through_dicts_and_lists():
    value = {"order": {"lines": [{"sku": "a"}, {"sku": "b", "price": decimal.Decimal("1.5")}]}}
    where, reason = find_non_json(value, "kwargs")
    assert where == "kwargs['order']['lines'][1]['price']"
    assert reason == "is a decimal.Decimal, not JSON"


def test_reports_the_first_problem_in_argument_order():
    where, _ = find_non_json([1, {"x": {1, 2}}, object()], "args")
    assert where == "args[1]['x']"


@pytest.mark.parametrize(
    ("value", "type_name"),
    [({1, 2}, "builtins.set"), (b"raw", "builtins.bytes"), (uuid.UUID(int=5), "uuid.UUID")],
)
def test_names_the_type_of_common_non_json_values(value, type_name):
    assert find_non_json([value], "args") == ("args[0]", f"is a {type_name}, not JSON")


def test_rejects_non_string_dict_keys_naming_the_key_and_its_type():
    where, reason = find_non_json({"counts": {"a": 1, 7: 2}}, "kwargs")
    assert where == "kwargs['counts']"
    assert reason == (
        "has the key 7 of type int; JSON object keys are strings (convert the key with str())"
    )


def test_rejects_tuple_keys():
    where, reason = find_non_json([{(1, 2): "x"}], "args")
    assert where == "args[0]"
    assert "has the key (1, 2) of type tuple" in reason


@pytest.mark.parametrize("number", [float("nan"), float("inf"), float("-inf")])
def test_rejects_nan_and_infinity(number):
    where, reason = find_non_json({"ratio": number}, "kwargs")
    assert where == "kwargs['ratio']"
    assert reason == f"is {number!r}, which JSON cannot represent"


def test_deep_nesting_is_walked_without_recursion():
    value: list = []
    inner = value
    for _ in range(5000):
        inner.append([])
        inner = inner[0]
    inner.append(object())
    where, reason = find_non_json(value, "args")
    # Walked to the depth limit without a RecursionError, and refused there.
    assert where == "args" + "[0]" * MAX_DEPTH
    assert "nested too deeply" in reason


@pytest.mark.timeout(10)
def test_a_shared_list_is_not_a_problem():
    shared = [1, 2]
    assert find_non_json([shared, shared, {"a": shared}], "args") is None
    assert find_non_json([[shared], shared, {"a": [shared]}, set()], "args")[0] == "args[3]"


@pytest.mark.timeout(10)
def test_a_circular_list_is_named_instead_of_hanging():
    looped: list = [1]
    looped.append(looped)
    with pytest.raises(PayloadNotJSON) as raised:
        encode([looped], "args", "tasks.add")
    assert str(raised.value) == (
        "tasks.add: args[0][1] refers back to a list or dict containing it "
        "(a circular reference). Job arguments and results are stored as JSON only."
    )


@pytest.mark.timeout(10)
def test_a_circular_dict_is_named_instead_of_hanging():
    looped: dict = {"n": 1}
    looped["self"] = {"again": looped}
    where, reason = find_non_json(looped, "kwargs")
    assert where == "kwargs['self']['again']"
    assert "circular reference" in reason


def test_encode_returns_compact_utf8_json():
    text = encode({"name": "Zoë", "n": [1, 2.5, None]}, "kwargs", "t")
    assert text == '{"name":"Zoë","n":[1,2.5,null]}'
    assert json.loads(text) == {"name": "Zoë", "n": [1, 2.5, None]}


def test_encode_turns_tuples_into_lists():
    assert encode((1, (2, 3)), "args", "t") == "[1,[2,3]]"


def test_encode_error_names_the_task_the_path_and_the_rule():
    when = dt.datetime(2024, 5, 1, tzinfo=dt.UTC)
    with pytest.raises(PayloadNotJSON) as raised:
        encode({"when": when}, "kwargs", "billing.tasks.charge")
    assert str(raised.value) == (
        "billing.tasks.charge: kwargs['when'] is a datetime.datetime, not JSON "
        "(pass value.isoformat()). Job arguments and results are stored as JSON only."
    )


def test_encode_error_for_nan_names_the_argument():
    with pytest.raises(PayloadNotJSON, match=r"t: args\[1\] is nan, which JSON cannot represent"):
        encode([1, float("nan")], "args", "t")


def test_check_size_passes_at_exactly_the_limit():
    check_size(1000, 1000, "args of t are", "MAX_PAYLOAD_BYTES")


def test_check_size_names_both_sizes_in_bytes_below_a_kib():
    with pytest.raises(PayloadTooLarge) as raised:
        check_size(1001, 1000, "args of t are", "MAX_PAYLOAD_BYTES")
    assert str(raised.value) == (
        "args of t are 1,001 bytes; the limit is 1,000 bytes (WORKQUEUE['MAX_PAYLOAD_BYTES']). "
        "Store large data elsewhere and pass a reference."
    )


def test_check_size_names_both_sizes_in_kib_and_bytes():
    with pytest.raises(PayloadTooLarge) as raised:
        check_size(312 * 1024, 256 * 1024, "args of send_report are", "MAX_PAYLOAD_BYTES")
    message = str(raised.value)
    assert "args of send_report are 312.0 KiB (319,488 bytes)" in message
    assert "the limit is 256.0 KiB (262,144 bytes)" in message
    assert "WORKQUEUE['MAX_PAYLOAD_BYTES']" in message


def test_check_size_names_the_setting_it_was_given():
    with pytest.raises(PayloadTooLarge, match=r"WORKQUEUE\['MAX_RESULT_BYTES'\]"):
        check_size(11, 10, "the result of t is", "MAX_RESULT_BYTES")


def test_a_payload_nested_too_deeply_is_refused_with_a_clear_error():
    deep: list = []
    node = deep
    for _ in range(5000):
        child: list = []
        node.append(child)
        node = child
    with pytest.raises(PayloadNotJSON, match="nested too deeply"):
        encode(deep, "args", "t")


def test_describe_survives_a_broken_repr():
    class Broken:
        def __repr__(self) -> str:
            raise ValueError("no repr for you")

    assert describe(Broken()) == "<a test_describe_survives_a_broken_repr.<locals>.Broken>"
    assert describe(10**5000).startswith("<an integer of ")


@pytest.mark.parametrize(
    "value",
    [
        None,
        True,
        0,
        -7,
        2**70,
        1.5,
        1e300,
        "",
        "é\u2028\x00",
        [1, "a", None],
        {"k": 1.25, "é": [{}]},
    ],
)
@pytest.mark.parametrize("ensure_ascii", [True, False])
def test_the_kept_encoder_writes_what_json_dumps_writes(value, ensure_ascii):
    encode = acyclic_encoder(ensure_ascii=ensure_ascii, allow_nan=True)
    assert encode(value) == json.dumps(value, separators=(",", ":"), ensure_ascii=ensure_ascii)


def test_the_kept_encoder_refuses_nan_when_told_to_as_json_does():
    encode = acyclic_encoder(ensure_ascii=False, allow_nan=False)
    with pytest.raises(ValueError):
        encode([float("nan")])
    assert acyclic_encoder(ensure_ascii=True, allow_nan=True)(float("inf")) == "Infinity"
