from fractions import Fraction

import pytest

from hostkit.rollout.batches import (
    BatchSpecError,
    MaxFailed,
    Stage,
    order_hosts,
    parse_batches,
    parse_max_failed,
    split_batches,
)


def names(count: int) -> list[str]:
    return [f"h{index:03d}" for index in range(1, count + 1)]


def sizes(count: int, spec: str) -> list[int]:
    return [len(batch) for batch in split_batches(names(count), parse_batches(spec))]


def test_parse_batches_reads_counts_and_percentages():
    assert parse_batches("1, 25%,100%") == [Stage(count=1), Stage(fraction=Fraction(1, 4)), Stage(fraction=Fraction(1))]
    assert parse_batches("12.5%") == [Stage(fraction=Fraction(1, 8))]
    assert [str(stage) for stage in parse_batches("1,25%,12.5%,100%")] == ["1", "25%", "12.5%", "100%"]


@pytest.mark.parametrize("spec", ["", "1,,100%", "0", "0%", "101%", "1.5", "-1", "abc", "25 %x"])
def test_parse_batches_refuses_nonsense(spec):
    with pytest.raises(BatchSpecError):
        parse_batches(spec)


@pytest.mark.parametrize(
    ("count", "expected"),
    [
        (1, [1]),
        (2, [1, 1]),
        (3, [1, 2]),  # 25% of 3 rounds up to 1 host: no progress, dropped
        (4, [1, 3]),
        (5, [1, 1, 3]),  # 25% of 5 = 1.25 -> 2 hosts done after batch 2
        (10, [1, 2, 7]),
        (100, [1, 24, 75]),
        (500, [1, 124, 375]),
    ],
)
def test_canary_quarter_rest(count, expected):
    batches = split_batches(names(count), parse_batches("1,25%,100%"))
    assert [len(batch) for batch in batches] == expected
    assert [name for batch in batches for name in batch] == names(count)  # every host once, in order


def test_short_last_stage_repeats_its_step():
    assert sizes(100, "1,10%") == [1, 9, 10, 10, 10, 10, 10, 10, 10, 10, 10]
    assert sizes(7, "2") == [2, 2, 2, 1]
    assert sizes(5, "1,2") == [1, 1, 2, 1]


def test_counts_larger_than_the_fleet_are_capped():
    assert sizes(3, "5,100%") == [3]
    assert split_batches([], parse_batches("1,100%")) == []


def test_order_follows_inventory_unless_a_key_is_given():
    hosts = [("a", {}), ("b", {"rollout_order": 2}), ("c", {"rollout_order": 1}), ("d", {})]
    assert order_hosts(hosts) == ["a", "b", "c", "d"]
    assert order_hosts(hosts, "rollout_order") == ["c", "b", "a", "d"]


def test_order_key_ties_keep_inventory_order_and_bad_values_are_refused():
    assert order_hosts([("x", {"k": 1}), ("y", {"k": 0}), ("z", {"k": 1})], "k") == ["y", "x", "z"]
    with pytest.raises(BatchSpecError):
        order_hosts([("x", {"k": 1}), ("y", {"k": "a"})], "k")
    with pytest.raises(BatchSpecError):
        order_hosts([("x", {"k": [1]})], "k")


def test_rollout_order_key_passes_the_profile_unknown_key_check():
    from hostkit.profile.validation import profile_from_data

    profile_from_data("h", {"rollout_order": 3, "vllm_model": "Qwen/Qwen2.5-0.5B-Instruct", "gpu_required": False})


@pytest.mark.parametrize(
    ("spec", "total", "limit"),
    [("0", 10, 0), ("2", 10, 2), ("10%", 10, 1), ("10%", 5, 0), ("25%", 10, 2), ("100%", 7, 7), ("0%", 100, 0)],
)
def test_max_failed(spec, total, limit):
    assert parse_max_failed(spec).limit(total) == limit


@pytest.mark.parametrize("spec", ["", "-1", "1.5", "101%", "x"])
def test_max_failed_refuses_nonsense(spec):
    with pytest.raises(BatchSpecError):
        parse_max_failed(spec)


def test_max_failed_prints_as_given():
    assert str(MaxFailed(count=3)) == "3"
    assert str(parse_max_failed("10%")) == "10%"
