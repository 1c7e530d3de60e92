"""vllm_instances in the profile (hostkit.profile.instances, instance_checks): each instance's
data is the host's with its overrides laid over, and every refusal names the host, the
instances and the key before any host is touched."""

import pytest

from hostkit.profile.host_profile import HostProfile
from hostkit.profile.validation import ProfileError, profile_from_data

QWEN7 = "Qwen/Qwen2.5-7B-Instruct"


def profile(instances, **host):
    return profile_from_data("gpu-8", {"vllm_model": QWEN7, **host, "vllm_instances": instances})


def issues(instances, **host) -> list[str]:
    with pytest.raises(ProfileError) as caught:
        profile(instances, **host)
    return [str(issue) for issue in caught.value.issues]


def one_issue(instances, **host) -> str:
    found = issues(instances, **host)
    assert len(found) == 1, found
    return found[0]


def test_an_instance_takes_what_it_does_not_set_from_the_host():
    p = profile({"a": {"gpus": [0], "vllm_port": 8001}, "b": {"gpus": [1], "vllm_model": "Qwen/Qwen2.5-0.5B-Instruct"}},
                vllm_max_model_len=8192, vllm_memory_max="64G")
    a, b = p.vllm_instances["a"], p.vllm_instances["b"]
    assert (a.vllm_model, a.vllm_port, a.vllm_gpus, a.vllm_max_model_len) == (QWEN7, 8001, [0], 8192)
    assert (b.vllm_model, b.vllm_port, b.vllm_memory_max) == ("Qwen/Qwen2.5-0.5B-Instruct", 8000, 64 * 2**30)


def test_an_instances_own_release_derives_its_own_command():
    p = profile({"old": {"gpus": [0], "vllm_version": "0.4.3", "vllm_port": 8001}, "new": {"gpus": [1]}},
                vllm_install=True, vllm_version="0.10.2")
    assert p.vllm_command == "/opt/vllm/current/bin/hostkit-vllm"
    assert p.vllm_instances["old"].vllm_command == "/opt/vllm/current/bin/python"
    assert p.vllm_instances["new"].vllm_command == "/opt/vllm/current/bin/hostkit-vllm"


def test_tp_unset_is_the_number_of_the_instances_gpus():
    p = profile({"a": {"gpus": [0, 1, 2, 3]}, "b": {"gpus": [4], "vllm_port": 8001}})
    assert (p.vllm_instances["a"].tensor_parallel_size, p.vllm_instances["b"].tensor_parallel_size) == (4, 1)
    assert HostProfile().tensor_parallel_size == 1


def test_duplicate_ports_name_both_instances():
    assert one_issue({"a": {"gpus": [0]}, "b": {"gpus": [1]}}) == (
        "host gpu-8: vllm_instances['b'].vllm_port = 8000 is invalid: vllm_instances 'a' and 'b' both listen on "
        "port 8000; allowed a port no other instance listens on")


def test_a_tp_size_other_than_the_gpu_count_is_refused():
    text = one_issue({"a": {"gpus": [0, 1], "vllm_tensor_parallel_size": 4}})
    assert text.startswith("host gpu-8: vllm_instances['a'].vllm_tensor_parallel_size = 4 is invalid: "
                           "vllm_instances 'a' has 2 GPUs ([0, 1])")
    assert "allowed 2 (one per GPU of its gpus) or unset" in text


def test_beside_another_instance_each_names_its_gpus():
    text = one_issue({"a": {"gpus": [0]}, "b": {"vllm_port": 8001}})
    assert text.startswith("host gpu-8: vllm_instances['b'].gpus = None is invalid: beside vllm_instances 'a', ")


def test_overlapping_gpus_without_utilization_are_refused():
    text = one_issue({"a": {"gpus": [0, 1]}, "b": {"gpus": [1, "GPU-87e77369-5345-4073-ed4b-79c80003dc90"],
                                                   "vllm_port": 8001, "vllm_gpu_memory_utilization": 0.4}})
    assert text.startswith("host gpu-8: vllm_instances['a'].vllm_gpu_memory_utilization = None is invalid: "
                           "GPU 1 in the gpus of vllm_instances 'a' and 'b', and 'a' sets no vllm_gpu_memory_utilization")


def test_a_shared_gpus_utilizations_may_not_sum_above_one():
    text = one_issue({"a": {"gpus": [0], "vllm_gpu_memory_utilization": 0.6},
                      "b": {"gpus": [0], "vllm_gpu_memory_utilization": 0.5, "vllm_port": 8001}})
    assert text == ("host gpu-8: vllm_instances['b'].vllm_gpu_memory_utilization = 0.5 is invalid: GPU 0 shared by "
                    "vllm_instances 'a' (0.6) and 'b' (0.5): 1.1 of one GPU; allowed vllm_gpu_memory_utilization set "
                    "in every instance on a shared GPU, summing to at most 1.0")


def test_a_shared_gpu_within_its_memory_is_accepted():
    p = profile({"a": {"gpus": [0]}, "b": {"gpus": [0], "vllm_port": 8001}}, vllm_gpu_memory_utilization=0.4)
    assert [i.vllm_gpu_memory_utilization for i in p.vllm_instances.values()] == [0.4, 0.4]


@pytest.mark.parametrize(("key", "value", "why"), [
    ("swap_size", "8G", "an instance overrides only vLLM's keys"),
    ("vllm_instances", {"c": {}}, "an instance has no instances of its own"),
    ("vllm_gpus", [0], "an instance writes it as gpus"),
    ("vllm_enabled", False, "an instance in vllm_instances runs"),
    ("vllm_no_such_key", 1, "not a hostkit key"),
])
def test_an_instance_key_it_may_not_set_is_refused_by_name(key, value, why):
    text = one_issue({"a": {"gpus": [0], key: value}})
    assert text.startswith(f"host gpu-8: vllm_instances['a'].{key} = {value!r} is invalid: {why}")


@pytest.mark.parametrize("name", ["Big", "-a", "a.b", "a" * 33, "a b", ""])
def test_a_name_that_is_no_unit_instance_is_refused(name):
    text = one_issue({name: {"gpus": [0]}})
    assert text.startswith(f"host gpu-8: vllm_instances[{name!r}] = {name!r} is invalid: the name becomes a systemd")


def test_an_instances_bad_value_is_named_by_its_key_path():
    found = issues({"a": {"gpus": [0, "GPU-1"], "vllm_port": 0, "vllm_memory_max": 5,
                          "vllm_env": {"HF_TOKEN": "hf_secret"}}, "b": "nope"})
    assert sorted(text.split(" is invalid")[0] for text in found) == [
        "host gpu-8: vllm_instances['a'].gpus = [0, 'GPU-1']",
        "host gpu-8: vllm_instances['a'].vllm_env['HF_TOKEN'] = '********'",
        "host gpu-8: vllm_instances['a'].vllm_memory_max = 5",
        "host gpu-8: vllm_instances['a'].vllm_port = 0",
        "host gpu-8: vllm_instances['b'] = 'nope'",
    ]
    assert not any("hf_secret" in text for text in found)


def test_an_instances_cross_field_issue_is_named_there():
    text = one_issue({"a": {"gpus": [0, 1, 2], "vllm_tensor_parallel_size": 3}})
    assert text.startswith("host gpu-8: vllm_instances['a'].vllm_tensor_parallel_size = 3 is invalid: "
                           f"{QWEN7} has 28 attention heads")


def test_a_host_value_every_instance_takes_is_reported_once_at_the_host_key():
    found = issues({"a": {"gpus": [0]}, "b": {"gpus": [1], "vllm_port": 8001}}, vllm_max_model_len=10**6)
    assert len(found) == 1
    assert found[0].startswith("host gpu-8: vllm_max_model_len = 1000000 is invalid: ")
    assert found[0].endswith("the host's value, taken by vllm_instances 'a', 'b'")
    # The host's own bad value: the host's issue only, not one per instance.
    found = issues({"a": {"gpus": [0]}, "b": {"gpus": [1], "vllm_port": 8001}}, vllm_port=0)
    assert found == ["host gpu-8: vllm_port = 0 is invalid: allowed 1-65535"]


def test_host_vllm_model_may_be_unset_when_every_instance_sets_one():
    p = profile_from_data("gpu-8", {"vllm_instances": {"a": {"gpus": [0], "vllm_model": QWEN7},
                                                       "b": {"gpus": [1], "vllm_model": QWEN7, "vllm_port": 8001}}})
    assert p.vllm_model is None and p.vllm_instances["b"].vllm_model == QWEN7


def test_vllm_gpus_without_instances_is_refused():
    with pytest.raises(ProfileError, match=r"vllm_gpus = \[0\] is invalid: vllm.service sees every GPU"):
        profile_from_data("gpu-8", {"vllm_model": QWEN7, "vllm_gpus": [0]})


def test_building_a_profile_directly_refuses_an_instance_key_too():
    with pytest.raises(ValueError, match=r"vllm_instances\['a'\].swap_size"):
        HostProfile(vllm_instances={"a": {"swap_size": "8G"}})
