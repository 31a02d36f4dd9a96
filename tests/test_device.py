"""Device identity: detection, checked fields, and refusal of other devices' data."""

from __future__ import annotations

import copy
import pickle
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tunecache._version import __version__
from tunecache.device import (
    CHECKED_FIELDS,
    Device,
    cpu_model,
    detect,
    slugify,
    usable_cpus,
)
from tunecache.errors import DeviceMismatchError, TunecacheError
from tunecache.identity import _from_proc_cpuinfo, _is_slug, as_slug, check_fields
from tunecache.pools import default_threads

X86_CPUINFO = """\
processor\t: 0
vendor_id\t: GenuineIntel
model name\t: Intel(R) Xeon(R) Platinum 8488C CPU @ 2.40GHz
flags\t\t: fpu vme

processor\t: 1
model name\t: Intel(R) Xeon(R) Platinum 8488C CPU @ 2.40GHz
"""

ARM_CPUINFO = """\
processor\t: 0
BogoMIPS\t: 243.75
CPU implementer\t: 0x41
CPU part\t: 0xd0c
"""


@pytest.mark.parametrize(
    ("raw", "slug"),
    [
        ("Intel(R) Xeon(R) Platinum 8488C CPU @ 2.40GHz", "intel-xeon-platinum-8488c"),
        ("AMD EPYC 7763 64-Core Processor", "amd-epyc-7763-64-core"),
        ("Apple M4 Max", "apple-m4-max"),
        ("NVIDIA H200", "nvidia-h200"),
        ("   ", "unknown"),
        ("../../etc/passwd", "etc-passwd"),
    ],
)
def test_slugify_makes_one_safe_name_per_chip(raw: str, slug: str) -> None:
    assert slugify(raw) == slug


def test_a_device_named_by_its_slug_keeps_it_whatever_words_it_holds() -> None:
    # A slug shown by a listing or a folder names the same device back: "cpu" stays in
    # "test-cpu-9000" (slugify alone would drop it), and free text is still slugified.
    assert as_slug("test-cpu-9000") == "test-cpu-9000"
    assert slugify("test-cpu-9000") == "test-9000"
    assert as_slug("Intel(R) Xeon(R) CPU @ 2.40GHz") == "intel-xeon"
    assert as_slug("bad slug-") == "bad-slug"
    assert detect(cpu="test-cpu-9000", threads=1).cpu == "test-cpu-9000"


def test_slugs_are_short_and_safe_for_any_input() -> None:
    slug = slugify("x" * 500 + '/\\:*?"<>|\0')
    assert len(slug) <= 64
    assert set(slug) <= set("abcdefghijklmnopqrstuvwxyz0123456789-")


def test_cpu_model_comes_from_proc_cpuinfo_with_an_arm_fallback() -> None:
    assert _from_proc_cpuinfo(X86_CPUINFO) == "Intel(R) Xeon(R) Platinum 8488C CPU @ 2.40GHz"
    arm = _from_proc_cpuinfo(ARM_CPUINFO)
    assert arm is not None and arm.endswith("0x41-0xd0c")
    assert _from_proc_cpuinfo("") is None
    assert cpu_model()  # whatever this machine is, it has a non-empty name


def test_detect_fills_every_checked_field() -> None:
    device = detect()
    # What the BLAS pools run once one is loaded (tests/test_pools.py), else usable CPUs.
    assert device.threads == default_threads(usable_cpus())[0]
    assert device.client == "tunecache"
    assert device.client_version == __version__
    assert device.accelerator is None
    assert device.cpu == slugify(cpu_model())
    assert device.dirname == f"{device.cpu}-t{device.threads}"

    gpu = detect(client="myruntime", client_version="1.2.3", threads=8, accelerator="NVIDIA H200")
    assert (gpu.threads, gpu.accelerator, gpu.client, gpu.client_version) == (
        8,
        "nvidia-h200",
        "myruntime",
        "1.2.3",
    )


def test_another_client_must_say_its_version() -> None:
    with pytest.raises(TunecacheError, match="client_version"):
        detect(client="myruntime")


@pytest.mark.parametrize(
    "change",
    [
        {"cpu": "Intel Xeon"},
        {"cpu": ""},
        {"threads": 0},
        {"threads": True},
        {"threads": 2.0},
        {"accelerator": "NVIDIA H200"},
        {"client": "my runtime"},
        {"client": "../x"},
        {"client_version": "1.0/2"},
        {"client_version": ""},
    ],
)
def test_bad_fields_are_refused(device: Device, change: dict[str, object]) -> None:
    with pytest.raises(TunecacheError):
        device.replace(**change)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("cpu", "other-cpu"),
        ("threads", 8),
        ("accelerator", "nvidia-h200"),
        ("client", "myruntime"),
        ("client_version", "0.2.0"),
    ],
)
def test_every_checked_field_makes_another_device(
    device: Device, field: str, value: object
) -> None:
    assert field in CHECKED_FIELDS
    other = device.replace(**{field: value})  # type: ignore[arg-type]
    assert other.fingerprint != device.fingerprint
    assert device.differences(other) == [field]
    with pytest.raises(DeviceMismatchError, match=field):
        device.require_same(other, "an imported cache")
    device.require_same(device.replace())  # the same identity passes


def test_checked_fields_are_every_field(device: Device) -> None:
    # A field added to Device but not to CHECKED_FIELDS would be silently ignored when
    # comparing devices: the two lists must stay one.
    assert device.__match_args__ == CHECKED_FIELDS
    assert set(device.as_dict()) == set(CHECKED_FIELDS)


def test_a_device_is_an_immutable_value(device: Device) -> None:
    same = Device(*device.fields)
    assert same == device and hash(same) == hash(device) and same is not device
    assert device != device.with_threads(device.threads + 1)
    assert device != device.fields  # a value of its own class only, as a dataclass
    assert repr(device) == (
        f"Device(cpu={device.cpu!r}, threads={device.threads!r}, accelerator=None, "
        f"client={device.client!r}, client_version={device.client_version!r})"
    )
    with pytest.raises(AttributeError, match="cannot assign to field 'threads'"):
        device.threads = 4
    with pytest.raises(AttributeError):
        del device.cpu
    for copied in (copy.copy(device), copy.deepcopy(device), pickle.loads(pickle.dumps(device))):
        assert copied == device and type(copied) is Device
    assert device.replace(threads=3).threads == 3
    assert device.replace(threads=3).as_dict() == {**device.as_dict(), "threads": 3}
    with pytest.raises(TypeError):
        device.replace(gpu="x")  # type: ignore[call-arg]


def _regex_slugify(text: str) -> str:
    """slugify as it was written before its ASCII path: the reference it must equal."""
    text = re.sub(r"\((r|tm|c)\)", " ", text, flags=re.IGNORECASE)
    text = re.sub(r"\b(cpu|processor)\b", " ", text, flags=re.IGNORECASE)
    text = re.sub(r"@.*$", " ", text)
    slug = re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")
    slug = re.sub(r"-+", "-", slug)[:64].strip("-")
    return slug or "unknown"


# Names made of the pieces slugify treats specially, and any other character.
_NAME_PIECES = st.sampled_from(
    ["cpu", "CPU", "Processor", "(R)", "(tm)", "(TM)", "(c)", "@", " ", "-", "_", "\n", "\r",
     "x", "Xeon", "2.40GHz", "\u017f", "\u212a", "\u0131", "é", "(", ")", "--"]
)  # fmt: skip
_NAMES = st.lists(_NAME_PIECES | st.text(max_size=3), max_size=12).map("".join)


@settings(max_examples=2000, deadline=None)
@given(_NAMES)
def test_slugify_is_the_same_with_or_without_patterns(text: str) -> None:
    assert slugify(text) == _regex_slugify(text)


@settings(max_examples=2000, deadline=None)
@given(st.lists(st.sampled_from(["a", "z", "0", "-", "\n", "A", ".", "+", "!", "_", "é", "9"])
                | st.text(max_size=2), max_size=70).map("".join))  # fmt: skip
def test_identity_fields_are_checked_as_their_patterns_say(text: str) -> None:
    # The checks match these patterns, as they were written (re.match: "$" also before a
    # final newline), without compiling them at every start.
    slug = re.match(r"^[a-z0-9]+(-[a-z0-9]+)*$", text) is not None and len(text) <= 64
    version = re.match(r"^[A-Za-z0-9][A-Za-z0-9.+!-]{0,63}$", text) is not None
    client = re.match(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$", text) is not None
    assert _is_slug(text) == slug
    for field, ok in (("client_version", version), ("client", client)):
        values = {**dict(zip(CHECKED_FIELDS, ("cpu-x", 2, None, "app", "1.0"), strict=True))}
        values[field] = text
        try:
            check_fields(*values.values())
        except TunecacheError:
            assert not ok, (field, text)
        else:
            assert ok, (field, text)
