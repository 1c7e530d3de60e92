"""Bounded concurrent completions against a loopback server (tests/unit/smoke_fake_server.py)."""

from __future__ import annotations

import pytest
from smoke_fake_server import fake_server

from hostkit.smoke.load import api_base, percentile, run_load, served_model


def load(base, **overrides):
    settings = dict(concurrency=4, requests=12, max_tokens=16, api_key=None, request_timeout=10, time_limit=60)
    settings.update(overrides)
    return run_load(base, "fake-model", **settings)


def test_all_requests_succeed_with_bounded_concurrency():
    with fake_server(delay_s=0.05) as (base, server):
        result = load(base)
    assert (result.succeeded, result.failed, result.not_sent) == (12, 0, 0)
    assert server.completions == 12
    assert 1 < server.max_in_flight <= 4
    assert server.bodies[0] == {"model": "fake-model", "prompt": server.bodies[0]["prompt"], "max_tokens": 16,
                                "temperature": 0.7}
    assert result.completion_tokens == 12 * 16
    latencies = result.latencies()
    assert len(latencies) == 12 and all(seconds >= 0.05 for seconds in latencies)
    assert result.ended_at > result.started_at


def test_failures_are_counted_with_their_reason():
    with fake_server(fail_every=3) as (base, _):
        result = load(base)
    assert (result.succeeded, result.failed) == (8, 4)
    assert result.errors() == {"HTTP 500": 4}
    assert len(result.latencies()) == 8  # latency percentiles count successful requests only


def test_time_limit_stops_sending():
    with fake_server(delay_s=0.3) as (base, server):
        result = load(base, concurrency=2, requests=50, time_limit=0.5)
    assert result.hit_deadline
    assert result.not_sent > 0 and len(result.results) == server.completions < 50


def test_request_timeout_is_a_failure():
    with fake_server(delay_s=1.0) as (base, _):
        result = load(base, concurrency=1, requests=1, request_timeout=0.2)
    assert result.failed == 1
    (reason,) = result.errors()
    assert "timed out" in reason


def test_refused_connection_is_a_failure():
    with fake_server() as (base, _):
        pass  # closed: nothing listens there now
    result = load(base, concurrency=1, requests=2)
    assert result.failed == 2 and result.results[0].status is None


def test_api_key_is_sent_as_bearer_token():
    with fake_server(api_key="s3cret") as (base, _):
        assert served_model(base, "s3cret") == "fake-model"
        with pytest.raises(RuntimeError, match="HTTP 401"):
            served_model(base, None)
        assert load(base, api_key="s3cret", requests=2).succeeded == 2
        assert load(base, api_key="wrong", requests=2).errors() == {"HTTP 401": 2}


@pytest.mark.parametrize("url", ["http://127.0.0.1:8000", "http://127.0.0.1:8000/", "http://127.0.0.1:8000/v1/"])
def test_api_base(url):
    assert api_base(url) == "http://127.0.0.1:8000"


def test_api_base_refuses_other_schemes():
    with pytest.raises(ValueError):
        api_base("127.0.0.1:8000")


def test_percentile_interpolates_like_numpy():
    values = [1.0, 2.0, 3.0, 4.0]
    assert percentile(values, 0.5) == 2.5
    assert percentile(values, 0.95) == pytest.approx(3.85)
    assert percentile([7.0], 0.95) == 7.0
    assert percentile([], 0.5) is None
