"""JobSpec validation: bad input is refused with an error that names the field at fault."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from corral.core.spec import MAX_MEMORY, JobSpec, Resources
from corral.core.spec_text import parse_bytes, parse_duration

GiB = 2**30
DIGEST = "0123456789abcdef" * 4


def errors_of(**fields) -> list[dict]:
    with pytest.raises(ValidationError) as caught:
        JobSpec(**fields)
    return caught.value.errors()


def locs(**fields) -> list[tuple]:
    return [e["loc"] for e in errors_of(**fields)]


# --- defaults ------------------------------------------------------------------------------------


def test_minimal_spec_defaults():
    spec = JobSpec(command=["python", "train.py"])
    assert spec.name == "python"
    assert spec.resources == Resources(cpu=1.0, memory=0, gpu=0)
    assert (spec.replicas, spec.gang, spec.priority) == (1, False, 0)
    assert (spec.max_retries_failure, spec.max_retries_preemption, spec.max_task_failures) == (0, 100, 0)
    assert (spec.time_limit, spec.scheduling_timeout, spec.grace_period) == (None, None, 15.0)
    assert spec.env == {} and spec.labels == {} and spec.bundle is None


@pytest.mark.parametrize(("command", "name"), [
    (["/usr/bin/python3", "-c", "pass"], "python3"),
    (["./scripts/train.sh"], "train.sh"),
    (["sleep", "10"], "sleep"),
])
def test_default_name_is_the_commands_basename(command, name):
    assert JobSpec(command=command).name == name


def test_given_name_is_kept():
    assert JobSpec(command=["/bin/true"], name="nightly").name == "nightly"


def test_default_name_is_bounded():
    assert JobSpec(command=["x" * 500]).name == "x" * 200


# --- refusals, each naming its field -------------------------------------------------------------


def test_rejects_unknown_fields():
    errors = errors_of(command=["true"], replica=3)
    assert [(e["loc"], e["type"]) for e in errors] == [(("replica",), "extra_forbidden")]


def test_rejects_unknown_resource_fields():
    errors = errors_of(command=["true"], resources={"cpu": 1, "gpus": 2})
    assert [(e["loc"], e["type"]) for e in errors] == [(("resources", "gpus"), "extra_forbidden")]


@pytest.mark.parametrize("command", [[], [""], ["   "], ["", "arg"]])
def test_rejects_an_empty_command(command):
    errors = errors_of(command=command)
    assert [e["loc"] for e in errors] == [("command",)]
    assert "command is empty" in errors[0]["msg"]


def test_command_is_required():
    errors = errors_of()
    assert [(e["loc"], e["type"]) for e in errors] == [(("command",), "missing")]


@pytest.mark.parametrize(("field", "value"), [
    ("cpu", -1), ("cpu", 0), ("cpu", 0.001), ("cpu", 4097), ("cpu", 1e9),
    ("memory", -1), ("memory", MAX_MEMORY + 1), ("memory", "65Ti"), ("memory", "1Pi"), ("memory", "lots"),
    ("gpu", -1), ("gpu", 257), ("gpu", 1.5),
])
def test_rejects_bad_resources(field, value):
    assert locs(command=["true"], resources={field: value}) == [("resources", field)]


@pytest.mark.parametrize(("field", "value"), [
    ("replicas", 0), ("replicas", -3), ("replicas", 10_001),
    ("priority", 1001), ("priority", -1001),
    ("max_retries_failure", -1), ("max_retries_failure", 1001),
    ("max_retries_preemption", -1), ("max_retries_preemption", 10_001),
    ("max_task_failures", -1),
    ("time_limit", 0), ("time_limit", "-5s"), ("time_limit", "400d"), ("time_limit", "soon"),
    ("scheduling_timeout", 0), ("scheduling_timeout", "1y"),
    ("grace_period", -1), ("grace_period", "2h"),
    ("name", "n" * 201),
])
def test_rejects_absurd_numbers(field, value):
    assert locs(command=["true"], **{field: value}) == [(field,)]


@pytest.mark.parametrize("name", ["1ABC", "A-B", "A B", "", "A=B", "É"])
def test_rejects_bad_env_names(name):
    errors = errors_of(command=["true"], env={name: "x"})
    assert [e["loc"] for e in errors] == [("env",)]
    assert repr(name) in errors[0]["msg"]


def test_accepts_good_env_names():
    env = {"A": "1", "_x": "", "CUDA_VISIBLE_DEVICES": "0", "a1_B2": "y"}
    assert JobSpec(command=["true"], env=env).env == env


@pytest.mark.parametrize("bundle", ["abc", DIGEST[:-1], DIGEST + "0", DIGEST.upper(), "g" * 64,
                                    "sha256:" + DIGEST])
def test_rejects_bad_bundle_digest(bundle):
    errors = errors_of(command=["true"], bundle=bundle)
    assert [e["loc"] for e in errors] == [("bundle",)]
    assert "sha256" in errors[0]["msg"]


def test_accepts_a_bundle_digest():
    assert JobSpec(command=["true"], bundle=DIGEST).bundle == DIGEST


@pytest.mark.parametrize(("replicas", "max_task_failures"), [(1, 1), (3, 3), (3, 5)])
def test_rejects_max_task_failures_not_below_replicas(replicas, max_task_failures):
    errors = errors_of(command=["true"], replicas=replicas, max_task_failures=max_task_failures)
    assert len(errors) == 1
    # A model-level check: pydantic gives it no loc, so the message must name the field.
    assert "max_task_failures" in errors[0]["msg"] and f"replicas ({replicas})" in errors[0]["msg"]


@pytest.mark.parametrize(("replicas", "max_task_failures"), [(1, 0), (3, 2), (10, 0)])
def test_accepts_max_task_failures_below_replicas(replicas, max_task_failures):
    spec = JobSpec(command=["true"], replicas=replicas, max_task_failures=max_task_failures)
    assert spec.max_task_failures == max_task_failures


@pytest.mark.parametrize(("value", "size"), [("40G", 40 * 10**9), ("512Mi", 512 * 2**20), (24 * GiB, 24 * GiB)])
def test_gpu_memory_is_a_size_per_device(value, size):
    assert JobSpec(command=["true"], resources={"gpu": 2, "gpu_memory": value}).resources.gpu_memory == size


def test_gpu_memory_is_optional():
    assert JobSpec(command=["true"], resources={"gpu": 1}).resources.gpu_memory is None


@pytest.mark.parametrize(("value", "says"), [
    (0, "greater than 0"), ("-1G", "not a size"), ("lots", "not a size"), ("65Ti", "less than or equal"),
])
def test_rejects_a_gpu_memory_that_is_not_a_positive_size(value, says):
    errors = errors_of(command=["true"], resources={"gpu": 1, "gpu_memory": value})
    assert [e["loc"] for e in errors] == [("resources", "gpu_memory")]
    assert says in errors[0]["msg"]


@pytest.mark.parametrize("gpu", [None, 0])
def test_rejects_gpu_memory_without_gpus(gpu):
    resources = {"gpu_memory": "40G"} | ({} if gpu is None else {"gpu": gpu})
    errors = errors_of(command=["true"], resources=resources)
    assert [e["loc"] for e in errors] == [("resources",)]
    assert "gpu_memory" in errors[0]["msg"] and "ask for a gpu" in errors[0]["msg"]


@pytest.mark.parametrize(("value", "kept"), [(0.25, 0.25), ("0.5", 0.5), (0.01, 0.01), (0.99, 0.99), (2.0, 2), (3, 3)])
def test_a_gpu_request_is_whole_devices_or_a_share_of_one(value, kept):
    gpu = JobSpec(command=["true"], resources={"gpu": value}).resources.gpu
    assert gpu == kept and type(gpu) is type(kept)


@pytest.mark.parametrize(("value", "says"), [
    (0.333, "in hundredths"), (1.5, "a share of one device"), (0.001, "from 0.01 to 0.99"), ("half", "not a number"),
    (True, "a boolean"), (-0.5, "from 0.01"), (257, "less than or equal"),
])
def test_rejects_a_gpu_request_that_is_neither_whole_nor_a_share(value, says):
    errors = errors_of(command=["true"], resources={"gpu": value})
    assert [e["loc"][:2] for e in errors] and all(e["loc"][:2] == ("resources", "gpu") for e in errors)
    assert any(says in e["msg"] for e in errors), errors


def test_a_share_may_reserve_device_memory():
    resources = JobSpec(command=["true"], resources={"gpu": 0.5, "gpu_memory": "20G"}).resources
    assert (resources.gpu, resources.gpu_memory) == (0.5, 20 * 10**9)


def test_several_errors_are_reported_together():
    found = set(locs(command=[], replicas=0, resources={"gpu": -1}, bogus=1))
    assert found == {("command",), ("replicas",), ("resources", "gpu"), ("bogus",)}


# --- sizes and durations -------------------------------------------------------------------------


@pytest.mark.parametrize(("text", "size"), [
    ("4Gi", 4 * GiB),
    ("512M", 512 * 10**6),
    ("512Mi", 512 * 2**20),
    ("1G", 10**9),
    ("2.5g", 2_500_000_000),
    ("1k", 1000),
    ("1Ki", 1024),
    ("1GiB", GiB),
    ("100", 100),
    (" 8 Gi ", 8 * GiB),
    (2048, 2048),
])
def test_memory_sizes(text, size):
    assert JobSpec(command=["true"], resources={"memory": text}).resources.memory == size
    assert parse_bytes(text) == size


@pytest.mark.parametrize("text", ["", "Gi", "4 G i", "-1G", "4Xi", "1e9"])
def test_bad_sizes(text):
    with pytest.raises(ValueError, match="not a size"):
        parse_bytes(text)


@pytest.mark.parametrize(("text", "seconds"), [
    ("90s", 90.0), ("2h", 7200.0), ("15m", 900.0), ("1d", 86400.0), ("1.5h", 5400.0), ("30", 30.0), (45, 45),
])
def test_durations(text, seconds):
    spec = JobSpec(command=["true"], time_limit=text, scheduling_timeout=text)
    assert spec.time_limit == seconds and spec.scheduling_timeout == seconds
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "s", "1w", "-3s", "1h30m"])
def test_bad_durations(text):
    with pytest.raises(ValueError, match="not a duration"):
        parse_duration(text)


def test_resources_are_frozen():
    spec = JobSpec(command=["true"], resources={"cpu": 2})
    with pytest.raises(ValidationError):
        spec.resources.cpu = 4


def test_spec_round_trips_through_json():
    spec = JobSpec(command=["python", "x.py"], resources={"memory": "4Gi", "gpu": 2, "cpu": 0.5}, replicas=4,
                   gang=True, time_limit="2h", env={"A": "b"}, bundle=DIGEST, max_task_failures=1)
    again = JobSpec.model_validate(spec.model_dump(mode="json"))
    assert again == spec
    assert again.resources.memory == 4 * GiB and again.time_limit == 7200.0


def test_a_fractional_size_without_a_unit_is_refused_not_truncated():
    with pytest.raises(ValidationError, match="whole number of bytes"):
        JobSpec(command=["true"], resources={"memory": "1.5"})
