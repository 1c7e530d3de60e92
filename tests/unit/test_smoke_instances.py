"""`hostkit smoke` on a host with vllm_instances: each instance at the URL's host and its own
port, with its own key and unit, or the one --instance names."""

import pytest

from hostkit.profile.validation import profile_from_data
from hostkit.smoke.instances import at_port, instance_targets

PROFILE = profile_from_data("gpu-8", {"vllm_model": "m/m", "vllm_api_key": "host-key", "vllm_instances": {
    "a": {"gpus": [0]}, "b": {"gpus": [1], "vllm_port": 8001, "vllm_api_key": "b-key"}}})


def test_each_instance_at_its_port_with_its_key_and_unit():
    targets = instance_targets("http://10.0.0.5:8000/v1", PROFILE)
    assert [(t.name, t.url, t.api_key, t.unit) for t in targets] == [
        ("a", "http://10.0.0.5:8000/v1", "host-key", "vllm@a.service"),
        ("b", "http://10.0.0.5:8001/v1", "b-key", "vllm@b.service")]


def test_one_instance_by_name_and_an_unknown_name_refused():
    assert [t.name for t in instance_targets("http://h:8000", PROFILE, "b")] == ["b"]
    with pytest.raises(ValueError, match="no instance 'z'"):
        instance_targets("http://h:8000", PROFILE, "z")


def test_at_port_keeps_the_host_and_path():
    assert at_port("http://[::1]:8000/v1", 8002) == "http://[::1]:8002/v1"
