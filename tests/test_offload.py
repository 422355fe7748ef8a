"""Offload (DESIGN 13): the preview a model sees of a large AUTO result, and read_result's slices of it.
Every expected value is written out: the rules are the contract."""

from __future__ import annotations

import pytest

from ledger.errors import LedgerError
from ledger.executions.offload import estimated_tokens, offloaded, preview, read_slice

EXECUTION = "3f0c2a9e-8d6b-4c1f-9a27-5b8e4d6c7a10"


# ---------------------------------------------------------------------------- preview


def test_an_array_of_5000_items_keeps_three_the_count_omitted_and_the_last():
    rows = [{"id": i, "memo": f"row {i}"} for i in range(5000)]
    assert preview(rows) == [{"id": 0, "memo": "row 0"}, {"id": 1, "memo": "row 1"}, {"id": 2, "memo": "row 2"},
                             {"$omitted": 4996}, {"id": 4999, "memo": "row 4999"}]


def test_an_array_of_five_items_omits_one():
    assert preview([1, 2, 3, 4, 5]) == [1, 2, 3, {"$omitted": 1}, 5]


def test_an_array_of_at_most_four_items_is_kept_whole():
    assert preview([1, "two", None, True]) == [1, "two", None, True]
    assert preview([]) == []


def test_a_nested_object_six_levels_deep_is_summarized_from_depth_four():
    # depth 0 the result, 1 a's value, 2 b's, 3 c's and rows', 4 d's and the rows' items
    value = {"a": {"b": {"c": {"d": {"e": {"f": 1}}, "n": 7}, "rows": [[1, 2, 3], 4]}}}
    assert preview(value) == {"a": {"b": {"c": {"d": {"$omitted": "object with 1 key"}, "n": 7},
                                          "rows": [{"$omitted": "array of 3 items"}, 4]}}}


def test_one_item_and_one_key_are_singular_and_several_plural():
    value = {"l1": {"l2": {"l3": {"one": [0], "ones": {"k": 1}, "two": [0, 1], "twos": {"k": 1, "j": 2}}}}}
    assert preview(value) == {"l1": {"l2": {"l3": {"one": {"$omitted": "array of 1 item"},
                                                   "ones": {"$omitted": "object with 1 key"},
                                                   "two": {"$omitted": "array of 2 items"},
                                                   "twos": {"$omitted": "object with 2 keys"}}}}}


def test_empty_arrays_and_objects_and_scalars_at_depth_four_stay_as_they_are():
    value = {"a": {"b": {"c": {"empty": [], "none": {}, "s": "x", "n": 1.5, "t": False, "z": None}}}}
    assert preview(value) == value


def test_a_100_kb_string_keeps_200_characters_at_each_end_in_one_string():
    text = "".join(str(i % 10) for i in range(102_400))
    assert preview(text) == "0123456789" * 20 + "…(102000 characters omitted)…" + "0123456789" * 20


def test_a_string_of_400_characters_is_kept_and_of_401_is_cut():
    assert preview("x" * 400) == "x" * 400
    assert preview("a" * 200 + "m" + "z" * 200) == "a" * 200 + "…(1 characters omitted)…" + "z" * 200


def test_characters_are_code_points_not_bytes():
    text = "€" * 500
    assert preview(text) == "€" * 200 + "…(100 characters omitted)…" + "€" * 200


def test_long_strings_inside_arrays_and_objects_are_cut_too():
    long = "q" * 1000
    assert preview({"rows": [long]}) == {"rows": ["q" * 200 + "…(600 characters omitted)…" + "q" * 200]}


def test_an_object_keeps_every_key_in_order():
    value = {f"k{i}": i for i in range(50)}
    assert list(preview(value)) == [f"k{i}" for i in range(50)]


# ---------------------------------------------------------------------------- the size threshold


def test_a_value_at_the_threshold_is_kept_whole_and_one_byte_more_is_offloaded():
    at = "x" * (4 * 10 - 2)  # the JSON text is the string plus its two quotes: 40 bytes, 10 tokens
    assert estimated_tokens(at) == 10
    assert offloaded(EXECUTION, at, 10) == at
    over = at + "x"
    assert estimated_tokens(over) == 10.25
    assert offloaded(EXECUTION, over, 10) == {"$offloaded": EXECUTION, "preview": over}


def test_the_estimate_counts_utf8_bytes_of_compact_json():
    value = {"a": ["é", 1]}
    # {"a":["é",1]}: 13 characters, é is 2 bytes
    assert estimated_tokens(value) == 14 / 4


def test_an_offloaded_result_carries_its_preview():
    rows = list(range(10_000))
    assert offloaded(EXECUTION, rows, 2000) == {"$offloaded": EXECUTION, "preview": [0, 1, 2, {"$omitted": 9996},
                                                                                      9999]}


# ---------------------------------------------------------------------------- read_result slices


RESULT = {"rows": [{"id": i} for i in range(10)], "text": "abcdefghij", "a/b": {"~x": 1}, "": "empty key",
          "n": 3}


def test_without_a_path_the_whole_result_is_read():
    assert read_slice(RESULT) == RESULT
    assert read_slice(RESULT, "") == RESULT


def test_a_pointer_reads_a_member_and_an_item():
    assert read_slice(RESULT, "/rows/7") == {"id": 7}
    assert read_slice(RESULT, "/rows/7/id") == 7


def test_pointer_escapes_name_slash_and_tilde_in_keys():
    assert read_slice(RESULT, "/a~1b/~0x") == 1
    assert read_slice(RESULT, "/") == "empty key"
    assert read_slice({"~1": "tilde one"}, "/~01") == "tilde one"


def test_offset_and_limit_slice_an_array():
    assert read_slice(RESULT, "/rows", offset=2, limit=3) == [{"id": 2}, {"id": 3}, {"id": 4}]
    assert read_slice(RESULT, "/rows", offset=8) == [{"id": 8}, {"id": 9}]
    assert read_slice(RESULT, "/rows", limit=1) == [{"id": 0}]
    assert read_slice(RESULT, "/rows", offset=20, limit=5) == []


def test_offset_and_limit_slice_a_string():
    assert read_slice(RESULT, "/text", offset=3, limit=4) == "defg"


def test_a_slice_of_a_large_string_returns_what_the_preview_omitted():
    text = "".join(str(i % 10) for i in range(102_400))
    assert read_slice(text, offset=200, limit=12) == "012345678901"


def error_of(**kwargs) -> LedgerError:
    with pytest.raises(LedgerError) as caught:
        read_slice(RESULT, **kwargs)
    assert caught.value.hint
    return caught.value


def test_a_missing_key_is_not_found_naming_where():
    error = error_of(path="/rows/3/missing")
    assert error.code == "not_found"
    assert error.message == "the result has nothing at '/rows/3/missing': at '/rows/3', the object has no key 'missing'"


def test_an_index_past_the_end_or_not_an_index_is_not_found():
    assert error_of(path="/rows/10").message == ("the result has nothing at '/rows/10': at '/rows', index 10 is "
                                                 "past the end of an array of 10")
    assert error_of(path="/rows/01").code == "not_found"
    assert error_of(path="/rows/-").code == "not_found"
    assert error_of(path="/n/x").message == "the result has nothing at '/n/x': at '/n', a number has no members"


def test_a_pointer_without_a_leading_slash_or_with_a_bad_escape_is_invalid_input():
    assert error_of(path="rows").code == "action_input_invalid"
    assert error_of(path="/a~2b").code == "action_input_invalid"


def test_offset_on_an_object_or_a_number_is_invalid_input():
    error = error_of(path="", offset=1)
    assert error.code == "action_input_invalid"
    assert error.message == "offset and limit apply to an array or a string; the value at the root is an object"
    assert error_of(path="/n", limit=1).message == ("offset and limit apply to an array or a string; the value at "
                                                    "'/n' is a number")


def test_a_negative_offset_is_invalid_input():
    assert error_of(path="/rows", offset=-1).code == "action_input_invalid"
