"""Hardware profiles: every file loads, is sourced and consistent; lookup by id, alias and path."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from costmodel.core.errors import CostModelError
from costmodel.hardware.catalog import load_all, load_profile, profile_ids
from costmodel.hardware.profile import HardwareProfile

PROFILE_DIR = Path(__file__).resolve().parents[1] / "hardware_profiles"
FILES = sorted(PROFILE_DIR.glob("*.yaml"))
REQUIRED = [
    "v100_sxm2_32gb",
    "t4",
    "a10g",
    "a100_40gb_sxm",
    "a100_80gb_sxm",
    "a100_80gb_pcie",
    "l4",
    "l40s",
    "rtx_4090",
    "h100_sxm",
    "h100_pcie",
    "h200_sxm",
    "b200",
    "mi250x",
    "mi300x",
    "tpu_v2",
    "tpu_v3",
    "tpu_v4",
    "tpu_v5e",
    "tpu_v5p",
    "tpu_v6e",
]


def test_every_required_device_has_a_profile():
    assert set(REQUIRED) <= set(profile_ids())
    assert sorted(profile_ids()) == sorted(f.stem for f in FILES)


@pytest.mark.parametrize("path", FILES, ids=[f.stem for f in FILES])
def test_profile_file(path):
    profile = load_profile(str(path))
    assert profile.id == path.stem
    # every number has a source that resolves to a non-empty citation
    items = list(profile.sourced_items())
    assert len(items) >= 5
    for field, item in items:
        assert profile.sources[item.source].strip(), field
    peaks = {k: v.value for k, v in profile.peak_flops_per_s.items()}
    for low, high in [
        ("fp32", "fp16"),
        ("fp32", "bf16"),
        ("fp32", "tf32"),
        ("tf32", "bf16"),
        ("bf16", "fp8"),
        ("fp16", "fp8"),
        ("bf16", "int8"),
    ]:
        if low in peaks and high in peaks:
            assert peaks[high] >= peaks[low], (low, high)
    assert profile.capacity > profile.on_chip_memory_bytes.value
    if profile.kind != "cpu":  # a CPU profile may carry its socket's bandwidth, far above one core's share
        assert 1 < profile.ridge_point(next(iter(peaks))) < 2000
    assert profile.measured is None  # shipped profiles are datasheet profiles


def test_aliases_are_unique():
    seen = {}
    for p in load_all():
        for name in (p.id, *p.aliases):
            key = name.lower().replace("_", "-")
            assert key not in seen, (name, p.id, seen.get(key))
            seen[key] = p.id


@pytest.mark.parametrize(
    "name,expected",
    [
        ("a100", "a100_80gb_sxm"),
        ("A100", "a100_80gb_sxm"),
        ("h100", "h100_sxm"),
        ("H200", "h200_sxm"),
        ("tpu-v5e", "tpu_v5e"),
        ("TPU_V4", "tpu_v4"),
        ("rtx-4090", "rtx_4090"),
        ("mi300x", "mi300x"),
    ],
)
def test_lookup_by_alias(name, expected):
    assert load_profile(name).id == expected


def test_unknown_name_suggests_the_closest():
    with pytest.raises(CostModelError, match=r"unknown hardware 'a10o'; did you mean a10g"):
        load_profile("a10o")


def _user_profile(tmp_path, **changes):
    data = yaml.safe_load((PROFILE_DIR / "a100_80gb_sxm.yaml").read_text())
    data.update(changes)
    for key in [k for k, v in changes.items() if v is None]:
        del data[key]
    path = tmp_path / "mine.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_user_profile_file(tmp_path):
    path = _user_profile(tmp_path, id="my_gpu", aliases=[])
    assert load_profile(str(path)).id == "my_gpu"


@pytest.mark.parametrize(
    "changes,field",
    [
        ({"memory_bandwidth_bytes_per_s": None}, "memory_bandwidth_bytes_per_s"),
        (
            {"memory_bandwidth_bytes_per_s": {"value": -1, "source": "datasheet", "confidence": "high"}},
            "memory_bandwidth_bytes_per_s.value",
        ),
        ({"clock_ghz": 1.4}, "clock_ghz"),
        ({"launch_overhead_s": {"value": 1e-6, "source": "nowhere", "confidence": "low"}}, "launch_overhead_s"),
        # a GEMM dispatch names a matrix-product class and ends with a rule for every other shape
        (
            {
                "architecture": {
                    "generation": "ampere",
                    "compute_units": {"value": 108, "source": "datasheet", "confidence": "high"},
                    "kernels": {"gemm_dispatch": {"norm": {"source": "x", "rules": [{"tile": [64, 64]}]}}},
                }
            },
            "architecture.kernels.gemm_dispatch.norm",
        ),
        (
            {
                "architecture": {
                    "generation": "ampere",
                    "compute_units": {"value": 108, "source": "datasheet", "confidence": "high"},
                    "kernels": {"gemm_dispatch": {"gemm": {"source": "x", "rules": [{"m_max": 64, "tile": [64, 64]}]}}},
                }
            },
            "architecture.kernels.gemm_dispatch.gemm",
        ),
        # or names one of the known dispatches
        (
            {
                "architecture": {
                    "generation": "ampere",
                    "compute_units": {"value": 108, "source": "datasheet", "confidence": "high"},
                    "kernels": {"gemm_dispatch": {"gemm_fp8": "vllm_sm42_fp8"}},
                }
            },
            "architecture.kernels.gemm_dispatch",
        ),
    ],
)
def test_malformed_profile_names_file_and_field(tmp_path, changes, field):
    path = _user_profile(tmp_path, **changes)
    with pytest.raises(CostModelError) as err:
        load_profile(str(path))
    assert str(path) in str(err.value) and field in str(err.value)


def test_not_yaml(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("id: [unclosed\n")
    with pytest.raises(CostModelError, match="not valid YAML"):
        load_profile(str(path))


def test_missing_dtype_names_what_the_device_has():
    with pytest.raises(CostModelError, match="v100_sxm2_32gb has no peak for dtype bf16; it has fp32, fp16"):
        load_profile("v100").peak("bf16")


def test_schema_forbids_unknown_fields():
    assert HardwareProfile.model_config["extra"] == "forbid"


#: torch.cuda.get_device_name() strings as real drivers report them -> the exact profile, or None (refused)
DEVICE_NAMES = [
    ("NVIDIA A100-SXM4-40GB", "a100_40gb_sxm"),
    ("A100-SXM4-40GB", "a100_40gb_sxm"),  # older drivers leave out the vendor
    ("NVIDIA A100-SXM4-80GB", "a100_80gb_sxm"),
    ("NVIDIA A100-PCIE-40GB", None),  # no A100 40GB PCIe profile: never the 80 GB SXM one
    ("NVIDIA A100 80GB PCIe", "a100_80gb_pcie"),
    ("NVIDIA H100 80GB HBM3", "h100_sxm"),
    ("NVIDIA H100 PCIe", "h100_pcie"),
    ("NVIDIA H100 NVL", None),  # not the PCIe card
    ("NVIDIA GH200 480GB", None),  # not an H200
    ("NVIDIA H200", "h200_sxm"),
    ("NVIDIA L40S", "l40s"),
    ("NVIDIA L40", None),  # not an L40S, nor an L4
    ("NVIDIA L4", "l4"),
    ("Tesla T4", "t4"),
    ("NVIDIA B200", "b200"),
    ("  nvidia   h100 80gb hbm3 ", "h100_sxm"),  # case and spacing do not matter
]


@pytest.mark.parametrize("name,expected", DEVICE_NAMES)
def test_device_name_maps_to_its_exact_profile_or_is_refused(name, expected):
    from costmodel.hardware.catalog import profile_for_device

    if expected is None:
        with pytest.raises(CostModelError) as err:
            profile_for_device(name)
        message = str(err.value)
        assert message.startswith(f"no hardware profile is for device {name!r}; profiles exist for ")
        assert "NVIDIA H100 80GB HBM3" in message and "Tesla T4" in message
    else:
        assert profile_for_device(name).id == expected


def test_device_names_are_unique_across_profiles():
    from costmodel.hardware.catalog import device_name_key

    keys = [device_name_key(n) for p in load_all() for n in p.device_names]
    assert len(keys) == len(set(keys))


def test_fitted_efficiency_without_architecture_is_refused(tmp_path):
    data = yaml.safe_load(
        (Path(__file__).resolve().parents[1] / "hardware_profiles" / "a100_80gb_sxm.yaml").read_text()
    )
    data.pop("architecture")
    path = tmp_path / "noarch.yaml"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(CostModelError) as err:
        load_profile(str(path))
    message = str(err.value)
    assert "fitted parameters need architecture.compute_units" in message and len(message) < 300


def test_the_lookup_index_reads_every_id_and_alias():
    """The index reads only each file's id and aliases lines; it must name exactly what the parsed profiles do."""
    from costmodel.hardware.catalog import fitted_profiles, load_all, profile_index, profile_key

    profiles = load_all()
    assert set(profile_index()) == {profile_key(n) for p in profiles for n in (p.id, *p.aliases)}
    for p in profiles:
        assert profile_index()[profile_key(p.id)].name == f"{p.id}.yaml"
    assert [p.id for p in fitted_profiles()] == [p.id for p in profiles if p.efficiency is not None]
