"""Input files are read within limits: a size, and a depth of JSON nesting."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from optimizer.errors import TaskFileError
from optimizer.files import MAX_INPUT_BYTES, MAX_JSON_DEPTH, parse_json, read_input


def nested(depth: int) -> str:
    """`depth` lists inside one another, around one number, as an object's field."""
    return '{"x": ' + "[" * (depth - 1) + "1" + "]" * (depth - 1) + "}"


def test_json_nested_to_the_limit_is_read_and_one_level_more_is_refused():
    assert parse_json(nested(MAX_JSON_DEPTH), "task.json", TaskFileError) == json.loads(nested(MAX_JSON_DEPTH))
    with pytest.raises(TaskFileError, match="nested too deep") as refused:
        parse_json(nested(MAX_JSON_DEPTH + 1), "task.json", TaskFileError, field="metadata")
    assert refused.value.path == "task.json" and refused.value.field == "metadata" and refused.value.exit_code == 2


def test_brackets_inside_strings_are_not_nesting():
    text = json.dumps({"note": "[" * 500 + '\\" {{{' + "]" * 3, "list": [["a]"], {"b": "[\\\\"}]})
    assert parse_json(text, "task.json", TaskFileError)["note"].startswith("[[[")


def test_json_that_is_not_json_names_the_line_and_column():
    with pytest.raises(TaskFileError, match="not valid JSON: .* at line 2, column 1"):
        parse_json('{"id": 1,\n}', "task.json", TaskFileError)


def test_a_file_larger_than_the_limit_is_refused_without_reading_it_whole(tmp_path):
    big = tmp_path / "big.json"
    big.write_text(" " * (MAX_INPUT_BYTES + 1))
    with pytest.raises(TaskFileError, match="too large") as refused:
        read_input(big, TaskFileError)
    assert refused.value.path == str(big)
    exactly = tmp_path / "exactly.json"
    exactly.write_text(" " * MAX_INPUT_BYTES)
    assert len(read_input(exactly, TaskFileError)) == MAX_INPUT_BYTES


def test_a_file_that_never_ends_is_read_no_further_than_the_limit():
    with pytest.raises(TaskFileError, match="too large"):
        read_input(Path("/dev/zero"), TaskFileError, max_bytes=1000)


def test_a_byte_order_mark_is_read_past_not_reported_as_bad_json(tmp_path):
    path = tmp_path / "task.json"
    path.write_bytes(b"\xef\xbb\xbf" + json.dumps({"id": "with_bom"}).encode())
    assert parse_json(read_input(path, TaskFileError), path, TaskFileError) == {"id": "with_bom"}
