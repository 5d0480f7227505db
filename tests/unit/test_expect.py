"""Declarative expectations: operators, nesting, missing values, descriptions."""

from __future__ import annotations

import pytest

from fieldguide.playbook.expect import (
    Condition,
    Expectation,
    ExpectationSyntaxError,
    NotEvaluable,
    parse_expectation,
)


@pytest.mark.parametrize(("op", "operand", "value", "holds"), [
    ("below", 0.1, 0.05, True),
    ("below", 0.1, 0.1, False),
    ("below", 0.1, 0.2, False),
    ("above", 3, 4, True),
    ("above", 3, 3, False),
    ("at_most", 0.5, 0.5, True),
    ("at_most", 0.5, 0.51, False),
    ("at_least", 20, 20, True),
    ("at_least", 20, 19.99, False),
    ("equals", False, False, True),
    ("equals", False, True, False),
    ("equals", "workers", "workers", True),
    ("equals", "workers", "main process", False),
    ("not_equals", "workers", "main process", True),
    ("not_equals", 0, 0, False),
    ("in", ["a", "b"], "b", True),
    ("in", ["a", "b"], "c", False),
    ("in", [1, 2], 2, True),
])
def test_operators(op, operand, value, holds):
    expectation = parse_expectation({"x": {op: operand}})
    assert expectation.holds({"x": value}) is holds


def test_several_keys_must_all_hold():
    e = parse_expectation({"a": {"below": 1}, "b": {"equals": False}})
    assert e.mode == "all" and len(e.parts) == 2
    assert e.holds({"a": 0, "b": False}) is True
    assert e.holds({"a": 0, "b": True}) is False
    assert e.holds({"a": 2, "b": False}) is False


def test_several_operators_on_one_value_make_a_range():
    e = parse_expectation({"x": {"at_least": 1, "below": 5}})
    assert [p.op for p in e.parts] == ["at_least", "below"]
    assert e.holds({"x": 1}) and e.holds({"x": 4.9})
    assert not e.holds({"x": 5}) and not e.holds({"x": 0.5})
    assert e.describe() == "x >= 1 and x < 5"


def test_any_and_all_nesting():
    e = parse_expectation({
        "op_time_fraction": {"at_least": 0.5},
        "any": [{"ops_per_step": {"below": 1000}}, {"median_op_us": {"at_least": 20}}],
    })
    assert e.holds({"op_time_fraction": 0.9, "ops_per_step": 50000, "median_op_us": 25}) is True
    assert e.holds({"op_time_fraction": 0.9, "ops_per_step": 50000, "median_op_us": 2}) is False
    assert e.holds({"op_time_fraction": 0.4, "ops_per_step": 10, "median_op_us": 25}) is False
    assert e.names() == ["op_time_fraction", "ops_per_step", "median_op_us"]
    assert e.describe() == "op_time_fraction >= 0.5 and (ops_per_step < 1000 or median_op_us >= 20)"


def test_all_inside_any():
    e = parse_expectation({"any": [{"all": [{"a": {"below": 1}}, {"b": {"below": 1}}]}, {"c": {"equals": True}}]})
    assert e.holds({"a": 0, "b": 0, "c": False}) is True
    assert e.holds({"a": 0, "b": 2, "c": True}) is True
    assert e.holds({"a": 0, "b": 2, "c": False}) is False
    # a top-level `any` keeps its own parentheses (cosmetic)
    assert e.describe() == "((a < 1 and b < 1) or c == true)"


def test_names_are_deduplicated_in_order():
    e = parse_expectation({"any": [{"a": {"below": 1}}, {"b": {"below": 1}}, {"a": {"above": 5}}]})
    assert e.names() == ["a", "b"]


def test_missing_value_is_not_evaluable():
    e = parse_expectation({"data_wait_fraction": {"below": 0.1}})
    with pytest.raises(NotEvaluable) as info:
        e.holds({})
    assert info.value.name == "data_wait_fraction"


def test_none_value_is_not_evaluable():
    e = parse_expectation({"producer_cpu_fraction": {"below": 0.5}})
    with pytest.raises(NotEvaluable) as info:
        e.holds({"producer_cpu_fraction": None})
    assert info.value.name == "producer_cpu_fraction"


def test_false_and_zero_are_values_not_missing():
    assert parse_expectation({"x": {"equals": False}}).holds({"x": False}) is True
    assert parse_expectation({"x": {"below": 1}}).holds({"x": 0}) is True


def test_any_holds_when_one_branch_is_missing_but_another_holds():
    e = parse_expectation({"any": [{"ops_per_step": {"below": 1000}}, {"median_op_us": {"at_least": 20}}]})
    assert e.holds({"median_op_us": 30}) is True
    assert e.holds({"ops_per_step": None, "median_op_us": 30}) is True
    assert e.holds({"ops_per_step": 10}) is True


def test_any_is_not_evaluable_when_the_branch_that_could_hold_is_missing():
    e = parse_expectation({"any": [{"ops_per_step": {"below": 1000}}, {"median_op_us": {"at_least": 20}}]})
    with pytest.raises(NotEvaluable) as info:
        e.holds({"median_op_us": 5})
    assert info.value.name == "ops_per_step"


def test_any_with_every_branch_false_is_false():
    e = parse_expectation({"any": [{"a": {"below": 1}}, {"b": {"below": 1}}]})
    assert e.holds({"a": 2, "b": 2}) is False


def test_all_with_a_missing_value_is_not_evaluable_when_the_rest_holds():
    e = parse_expectation({"a": {"below": 1}, "b": {"below": 1}})
    with pytest.raises(NotEvaluable) as info:
        e.holds({"a": 0})
    assert info.value.name == "b"


@pytest.mark.parametrize(("spec", "text"), [
    ({"x": {"below": 0.05}}, "x < 0.05"),
    ({"x": {"above": 3}}, "x > 3"),
    ({"x": {"at_most": 0.5}}, "x <= 0.5"),
    ({"x": {"at_least": 20}}, "x >= 20"),
    ({"x": {"equals": False}}, "x == false"),
    ({"x": {"equals": True}}, "x == true"),
    ({"x": {"not_equals": "workers"}}, "x != workers"),
    ({"x": {"in": ["a", "b"]}}, "x in ['a', 'b']"),
    ({"a": {"equals": False}, "b": {"below": 0.1}}, "a == false and b < 0.1"),
    ({"any": [{"a": {"below": 1}}, {"b": {"above": 2}}]}, "(a < 1 or b > 2)"),
])
def test_describe(spec, text):
    assert parse_expectation(spec).describe() == text


def test_condition_direct():
    c = Condition(name="x", op="below", operand=1)
    assert c.holds({"x": 0}) and c.names() == ["x"] and c.describe() == "x < 1"
    assert Expectation(mode="any", parts=(c,)).describe() == "x < 1"


@pytest.mark.parametrize(("data", "field", "fragment"), [
    (None, "expect", "must be a mapping"),
    ({}, "expect", "must be a mapping"),
    ([{"x": {"below": 1}}], "expect", "must be a mapping"),
    ({"x": {"beneath": 1}}, "expect.x.beneath", "unknown operator 'beneath'"),
    ({"x": {"below": "low"}}, "expect.x.below", "needs a number"),
    ({"x": {"below": True}}, "expect.x.below", "needs a number"),
    ({"x": {"at_least": None}}, "expect.x.at_least", "needs a number"),
    ({"x": {"in": "abc"}}, "expect.x.in", "`in` needs a list"),
    ({"x": 0.1}, "expect.x", "needs a condition"),
    ({"x": {}}, "expect.x", "needs a condition"),
    ({"x.y": {"below": 1}}, "expect.x.y", "plain identifier"),
    ({"__import__('os')": {"below": 1}}, "expect.__import__('os')", "plain identifier"),
    ({"any": []}, "expect.any", "non-empty list"),
    ({"all": {"x": {"below": 1}}}, "expect.all", "non-empty list"),
    ({"any": [{"x": {"below": 1}}, {"y": {"oops": 1}}]}, "expect.any[1].y.oops", "unknown operator"),
    ({"any": [{"x": {"below": 1}}, "y < 1"]}, "expect.any[1]", "must be a mapping"),
])
def test_syntax_errors_name_the_field(data, field, fragment):
    with pytest.raises(ExpectationSyntaxError) as info:
        parse_expectation(data)
    assert info.value.field == field
    assert fragment in str(info.value)


def test_field_prefix_is_passed_through():
    with pytest.raises(ExpectationSyntaxError) as info:
        parse_expectation({"x": {"nope": 1}}, "measure[2].expect")
    assert info.value.field == "measure[2].expect.x.nope"

