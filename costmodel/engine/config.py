"""Serving engines as their schedulers see a device: the per-iteration token budget and sequence limit,
whether a prompt may be split into chunks, the KV cache's share of device memory and its page size, and
whether the scheduler preempts or reserves. Each default is the engine's own at the stated version, under
the engine's own setting name; every one can be set (:meth:`EngineConfig.with_flags`).

KV capacity (:func:`kv_capacity_tokens`) follows each engine's own arithmetic: vLLM takes
``gpu_memory_utilization`` of the device for weights, the activations of a ``max_num_batched_tokens`` profile
run and the cache; SGLang's ``mem_fraction_static`` covers weights and the cache; TensorRT-LLM gives
``free_gpu_memory_fraction`` of what is free after weights and activations to the cache. The cache is then
counted in whole pages per sequence.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, replace

from costmodel.core import checks
from costmodel.core.errors import CostModelError
from costmodel.core.vocab import ENGINE_NAMES, MXFP4_ACTIVATIONS, choice

GIB = 1 << 30
#: Where each engine keeps prompts' KV pages for later requests by default.
REUSE_PREFIX = (
    "prefix reuse on by default: vLLM V1 enable_prefix_caching True (vllm/config/cache.py), SGLang's radix cache "
    "(python/sglang/srt/server_args.py disable_radix_cache False), TensorRT-LLM's KV block reuse "
    "(tensorrt_llm/llmapi/llm_args.py KvCacheConfig.enable_block_reuse True); whole pages only (vLLM and TensorRT-LLM "
    "hash full blocks; SGLang's pages are one token)"
)

_VLLM = (
    "vLLM v0.10-0.12 vllm/engine/arg_utils.py EngineArgs.get_batch_defaults (OpenAI API server on a device "
    "of at least 70 GiB that is not an A100: max_num_batched_tokens 8192, max_num_seqs 1024; otherwise 2048 "
    "and 256), vllm/config/cache.py (block_size 16, gpu_memory_utilization 0.9), V1 engine: chunked prefill "
    "always on, a running request preempted when no block is free (enable_prefix_caching on by default in the "
    "V1 engine: the preempted request's blocks stay cached and are found again when it is rescheduled; "
    "vllm/v1/core/sched/scheduler.py admits no waiting request in a step that preempted); mixture-of-experts "
    "layers in vllm/model_executor/layers/fused_moe/fused_moe.py fused_experts: under expert parallel an "
    "expert map marks other devices' experts -1, the Triton kernel writes zeros for their rows, and the "
    "activation and moe_sum run over every routed row of the batch; vllm/config/scheduler.py async_scheduling "
    "False: each iteration scheduled after the last one ends; MXFP4 experts on Blackwell in "
    "vllm/model_executor/layers/quantization/mxfp4.py get_mxfp4_backend: with FlashInfer and no "
    "VLLM_USE_FLASHINFER_MOE_MXFP4_MXFP8, SM100_FI_MXFP4_BF16 (bf16 activations, the weights dequantized in "
    "TensorRT-LLM's kernel); tensor-parallel all-reduces through vllm/distributed/communication_op.py "
    "tensor_model_parallel_all_reduce, which picks by the device and the size its custom kernel, torch's "
    "symmetric-memory all-reduce or NCCL (vllm/distributed/device_communicators/all_reduce_utils.py, "
    "VLLM_ALLREDUCE_USE_SYMM_MEM 1: on SM 10.0 the custom kernel up to 1-2 MiB, symmetric memory up to 8 MiB "
    "at 2 GPUs, 32 MiB at 4, 128 MiB at 8; on SM 9.0 the custom kernel up to 64 MiB at 2 GPUs and 32 MiB at 4), "
    "the entry point aiconfigurator's vLLM all-reduce table times (collector/collect_all_reduce.py)"
)
_SGLANG = (
    "SGLang v0.5 python/sglang/srt/server_args.py _handle_gpu_memory_settings: chunked_prefill_size 2048 "
    "under 35 GiB, 4096 under 60 GiB, 8192 under 160 GiB, 16384 above; mem_fraction_static (memory - reserved) / "
    "memory with 512 MiB + 1.5 MiB per chunk token + 2 MiB per CUDA-graph batch (cuda_graph_max_bs 256 at tp "
    "< 4, 512 from tp 4 on an 80 GB class GPU) + tp/8 GiB reserved, at least 10 GiB above 60 GiB (0.835 at tp "
    "1 on an H100); page_size 1, max_running_requests from the pool; requests retracted (recomputed) when "
    "the pool runs out; a prefill batch runs alone (enable_mixed_chunk False); expert-parallel MoE over the "
    "rows routed to the device's experts; disable_overlap_schedule False: the overlap event loop schedules the "
    "next batch while the last one runs; flashinfer_mxfp4_moe_precision 'default': MXFP4 experts on Blackwell "
    "take their activations through mxfp8_quantize, 'bf16' the other choice); a disaggregated decode server "
    "(python/sglang/srt/disaggregation/decode.py DecodePreallocQueue) pre-allocates a request's prompt and keeps "
    "num_reserved_decode_tokens 512 (SGLANG_NUM_RESERVED_DECODE_TOKENS) of headroom per request it holds "
    "(_allocatable_tokens), retracting running requests when the cache fills and resuming them first)"
)
_TRTLLM = (
    "TensorRT-LLM v1.0 (PyTorch backend, trtllm-serve) tensorrt_llm/llmapi/llm_args.py: max_num_tokens "
    "8192, max_batch_size 2048, KvCacheConfig free_gpu_memory_fraction 0.9 and tokens_per_block 32, "
    "enable_chunked_prefill False, capacity scheduler GUARANTEED_NO_EVICT (a request is admitted only when "
    "pages for its prompt and all its output can be reserved; CUTLASS MoE over the rows permuted to the "
    "device's experts); TorchLlmArgs disable_overlap_scheduler False: PyExecutor's overlap loop schedules and "
    "launches iteration n+1 before it processes iteration n's results; a block-scaled FP8 checkpoint's linear "
    "layers in tensorrt_llm/_torch/modules/linear.py FP8BlockScalesLinearMethod: fp8_quantize_1x128, then "
    "fp8_block_scaling_gemm, on SM90 TensorRT-LLM's own CUTLASS kernel with a swapped-operand path for small M "
    "(not vLLM's DeepGEMM path the block-scaled GEMM class was fitted on: priced as the per-tensor FP8 class, "
    "vLLM's quantize kernel and CUTLASS SM90 GEMM, the nearest measured kernel); gpt-oss's MXFP4 experts on "
    "Blackwell with MXFP8 activations, the recommended configuration of examples/models/core/gpt_oss/README.md "
    "(MMA UTCQMMA; bf16 activations on Hopper)"
)
_ATOM = (
    "ATOM, AMD's engine for Instinct GPUs (ROCm/ATOM atom/config.py Config @cd27f98 and "
    "atom/model_engine/arg_utils.py EngineArgs @0027562): max_num_batched_tokens 16384, max_num_seqs 512, "
    "gpu_memory_utilization 0.9 of the device for weights, a warm-up run at max_num_batched_tokens and the cache "
    "(ModelRunner: total x gpu_memory_utilization - used - the warm-up's peak, as vLLM's rule), kv_cache_block_size "
    "16, enable_prefix_caching False; its scheduler (atom/model_engine/scheduler.py Scheduler.schedule) tries "
    "prefills first, a prefill batch running alone, and decodes the running sequences when no prefill is ready, "
    "preempting (recomputing) the last running sequence when no block is free; no chunked prefill in that "
    "release (a prompt is one prefill of at most max_num_batched_tokens); each iteration scheduled as the last one "
    "ends; AITER's kernels (fused MoE over the rows routed to the device's experts, its custom all-reduce)"
)

_VLLM_08 = (
    "vLLM v0.8 vllm/engine/arg_utils.py EngineArgs._set_default_args_v1 (the V1 engine, default from v0.8.0): "
    "the OpenAI API server's max_num_batched_tokens 8192 and max_num_seqs 1024 on a device whose name holds "
    "'h100' or 'h200', 2048 and 256 on any other (tests/engine/test_arg_utils.py test_defaults_with_usage_context "
    "at that release); the rule by memory (at least 70 GiB, not an A100) replaced it with PR #17885 in v0.9. "
    "Everything else as in "
)
_SGLANG_04 = (
    "SGLang v0.4.4-0.4.6 python/sglang/srt/server_args.py ServerArgs.__post_init__: mem_fraction_static by tp "
    "(0.88 at 1, 0.87 from 2, 0.85 from 4, 0.81 from 8, 0.79 from 16), chunked_prefill_size 2048 under 25 GB, "
    "8192 otherwise; disable_overlap_schedule False, enable_mixed_chunk False, page_size 1 as in v0.5. "
    "Everything else as in "
)

#: Engines no measured deployment here ran, and the engine whose fitted fixed costs (costmodel.engine.served.OVERHEADS)
#: they take: ATOM's scheduler, model runner and OpenAI server follow vLLM's (nano-vLLM's) design, each iteration
#: scheduled as the last one ends.
HOST_COSTS_OF = {"atom": "vllm"}

#: The releases each engine's defaults are written for: (first, last release, as they are written, the rule's
#: name), newest last. A release outside them is refused: its defaults are not known here. The kernels are
#: priced from the same measured tables whatever the release.
RELEASES = {
    "vllm": (((0, 8, 0), (0, 8, 99), "0.8.x", "0.8"), ((0, 9, 0), (0, 12, 99), "0.9-0.12", "0.12")),
    "sglang": (((0, 4, 0), (0, 4, 6), "0.4.0-0.4.6", "0.4"), ((0, 5, 0), (0, 5, 99), "0.5.x", "0.5")),
    "trtllm": (((1, 0, 0), (1, 0, 99), "1.0.x", "1.0"),),
    "atom": (((0, 1, 0), (0, 1, 99), "0.1.x", "0.1"),),
}


def release(name: str, version: str | None) -> tuple[str, str]:
    """(the release as given or the latest modelled, the rule of :data:`RELEASES` its defaults follow)."""
    rules = RELEASES[name]
    if version is None:
        return rules[-1][3], rules[-1][3]
    known = f"{name} " + ", ".join(written for _, _, written, _ in rules)
    text = str(version).strip().removeprefix("v")
    parts = text.split(".")
    if not 2 <= len(parts) <= 3 or not all(p.isdigit() for p in parts):
        raise CostModelError(f"engine version {version!r} is not a release like 0.10 or 0.10.1; known: {known}")
    number = tuple(int(p) for p in parts) + (0,) * (3 - len(parts))
    for first, last, _, rule in rules:
        if first <= number <= last:
            return text, rule
    raise CostModelError(f"{name} {text}: defaults are known for {known}")


@dataclass(frozen=True)
class EngineFlags:
    """The engine settings a user sets, each None for the engine's own default on the device (their names in each
    engine: :attr:`EngineConfig.FLAGS`)."""

    max_num_batched_tokens: int | None = None
    max_num_seqs: int | None = None
    memory_fraction: float | None = None
    page_size: int | None = None
    chunked_prefill: bool | None = None
    prefix_caching: bool | None = None
    async_scheduling: bool | None = None
    mxfp4_activations: str | None = None
    max_model_len: int | None = None
    # the engine's release whose defaults apply (:data:`RELEASES`); None: the latest modelled
    engine_version: str | None = None

    def settings(self) -> dict:
        """The settings given (not None), by field name; the release is not a setting but chooses the defaults
        (:func:`engine`'s ``version``)."""
        return {k: v for k, v in asdict(self).items() if v is not None and k != "engine_version"}


@dataclass(frozen=True)
class EngineConfig:
    """What an engine's scheduler does each iteration and how much cache it has."""

    name: str
    version: str
    max_num_batched_tokens: int  # tokens (prefill and decode) one iteration may carry
    max_num_seqs: int  # sequences running at once
    memory_fraction: float  # gpu_memory_utilization | mem_fraction_static | free_gpu_memory_fraction
    page_size: int  # tokens per KV page (block)
    chunked_prefill: bool  # a prompt may be split over iterations
    reserve_output: bool  # admit a request only with pages for its whole output (no preemption)
    mixes: bool  # prefill chunks ride in decode iterations (SGLang by default runs prompts in their own)
    source: str
    # a preempted request's KV stays in the prefix cache, in the pages it freed, and is found again when it
    # returns: only its last token is computed again (vLLM V1's default); else it is recomputed whole
    prefix_caching: bool = False
    # a request whose prompt starts with whole KV pages another's prefill left in the cache finds them there and
    # computes only the rest; on by default in every engine modelled (REUSE_PREFIX); --no-enable-prefix-caching turns
    # it off, as it turns off the preempted request's reuse
    reuse_prefix: bool = True
    # the mixture-of-experts kernel (costmodel.model.step.Pricing.moe_kernel): "fused" spans every routed row
    moe_kernel: str = "routed"
    # the scheduler plans iteration n+1 while iteration n runs (an overlap scheduler): a request that comes while
    # n runs starts in n+2, where a scheduler that plans each iteration as the last one ends starts it in n+1
    async_scheduling: bool = False
    # the kernel class a block-scaled FP8 checkpoint's dense layers (attention projections, dense FFNs) run in; the
    # experts keep the block-scaled MoE class (costmodel.hardware.mechanisms.MOE_GEMM)
    block_fp8_linear: str = "gemm_fp8_block"
    # how MXFP4 experts take their activations on a device with FP4 math (costmodel.core.vocab.MXFP4_ACTIVATIONS)
    mxfp4_activations: str = "bf16"
    # how a tensor-parallel all-reduce is priced (costmodel.core.vocab.ALL_REDUCES): the engine's own entry point as
    # measured at every size, or vLLM's custom kernel up to 8 MiB and NCCL above
    all_reduce: str = "custom"
    # a disaggregated decode worker that reserves a request's cache before its prefill (costmodel.deploy.disagg
    # DECODE_RESERVES_FIRST) keeps this many tokens of headroom per request it holds
    reserved_decode_tokens: int = 0
    # the longest request (prompt and output) the engine takes; None: the model's own context length. vLLM and
    # SGLang refuse a longer request, and refuse to start when one such request does not fit the KV cache
    max_model_len: int | None = None

    #: the engine's own name for each setting (its server argument or config key)
    FLAGS = {
        "max_num_batched_tokens": {
            "vllm": "max_num_batched_tokens",
            "sglang": "chunked_prefill_size",
            "trtllm": "max_num_tokens",
            "atom": "max_num_batched_tokens",
        },
        "max_num_seqs": {
            "vllm": "max_num_seqs",
            "sglang": "max_running_requests",
            "trtllm": "max_batch_size",
            "atom": "max_num_seqs",
        },
        "memory_fraction": {
            "vllm": "gpu_memory_utilization",
            "sglang": "mem_fraction_static",
            "trtllm": "free_gpu_memory_fraction",
            "atom": "gpu_memory_utilization",
        },
        "page_size": {"vllm": "block_size", "sglang": "page_size", "trtllm": "tokens_per_block", "atom": "block_size"},
        "max_model_len": {
            "vllm": "max_model_len",
            "sglang": "context_length",
            "trtllm": "max_seq_len",
            "atom": "max_model_len",
        },
        "chunked_prefill": {
            "vllm": "enable_chunked_prefill",
            "sglang": "chunked_prefill_size",
            "trtllm": "enable_chunked_prefill",
            "atom": "enable_chunked_prefill (later releases)",
        },
        "prefix_caching": {
            "vllm": "enable_prefix_caching",
            "sglang": "disable_radix_cache (inverted)",
            "trtllm": "enable_block_reuse",
            "atom": "enable_prefix_caching",
        },
        "async_scheduling": {
            "vllm": "async_scheduling",
            "sglang": "disable_overlap_schedule (inverted)",
            "trtllm": "disable_overlap_scheduler (inverted)",
            "atom": "(none: ATOM schedules each iteration as the last one ends)",
        },
        "mxfp4_activations": {
            "vllm": "VLLM_USE_FLASHINFER_MOE_MXFP4_MXFP8 (environment)",
            "sglang": "flashinfer_mxfp4_moe_precision ('default': mxfp8)",
            "trtllm": "quant_algo (W4A8_MXFP4_MXFP8: mxfp8; W4A16_MXFP4: bf16)",
            "atom": "(none: AITER quantizes MXFP4 experts' activations to MXFP4, priced as bf16)",
        },
    }

    @property
    def kernels(self) -> dict:
        """The pricing conventions (:func:`costmodel.model.step.pricing`) this engine's own kernels set."""
        return {
            "moe_kernel": self.moe_kernel,
            "block_fp8_linear": self.block_fp8_linear,
            "mxfp4_activations": self.mxfp4_activations,
            "all_reduce": self.all_reduce,
            "kernel_engine": self.name,  # its own kernel classes where they were fitted
        }

    @property
    def lag(self) -> int:
        """Iterations a request that comes while one runs waits beyond that one: 1 under an overlap scheduler."""
        return 1 if self.async_scheduling else 0

    def with_flags(self, **settings) -> EngineConfig:
        """This engine with some settings changed (None: keep the default), each checked."""
        update = {k: v for k, v in settings.items() if v is not None}
        for key, value in list(update.items()):
            if key not in self.FLAGS:
                raise CostModelError(f"unknown engine setting {key!r}; settable: {', '.join(self.FLAGS)}")
            name = self.FLAGS[key][self.name]
            if name.startswith("(none") and value != getattr(self, key):
                raise CostModelError(f"{self.name} has no setting for {key.replace('_', ' ')} {name}")
            if key == "memory_fraction":
                update[key] = checks.number(name, value, most=1.0)
            elif key in ("chunked_prefill", "prefix_caching", "async_scheduling"):
                checks.flag(name, value)
                if key == "prefix_caching":  # the same switch in each engine: shared prefixes and preemptions
                    update["reuse_prefix"] = value
            elif key == "mxfp4_activations":
                update[key] = choice(name, value, MXFP4_ACTIVATIONS)
            else:
                update[key] = checks.count(name, value)
        return replace(self, **update)

    def describe(self) -> str:
        return (
            f"{self.name} {self.version}: up to {self.max_num_batched_tokens} tokens and {self.max_num_seqs} "
            f"sequences per iteration, prefill {'in chunks' if self.chunked_prefill else 'whole'}, KV pages of "
            f"{self.page_size} token{'s' if self.page_size != 1 else ''}, "
            f"memory fraction {self.memory_fraction:g}, "
            + (
                "requests admitted with their whole output reserved"
                if self.reserve_output
                else "a request preempted when the cache runs out, "
                + ("its KV kept in the prefix cache for its return" if self.prefix_caching else "and recomputed")
            )
            + (
                ", each iteration scheduled while the one before runs (a request that comes during iteration n "
                "starts in n+2)"
                if self.async_scheduling
                else ", each iteration scheduled as the one before ends (a request that comes during iteration n starts "
                "in n+1)"
            )
        )


def _sglang_memory(capacity_bytes: float, tp: int) -> tuple[int, float]:
    """SGLang's chunked_prefill_size and mem_fraction_static for a device of ``capacity_bytes`` (as the driver
    reports it) and ``tp`` (one pipeline stage): server_args._handle_gpu_memory_settings. The chunk and the CUDA
    graphs' largest batch step with the memory; the fraction leaves 512 MiB + 1.5 MiB per chunk token + 2 MiB per
    graph batch + tp/8 GiB (at least 10 GiB above 60 GiB) for activations and graphs."""
    mib = capacity_bytes / 2**20
    small = tp < 4
    if mib < 20 * 1024:
        chunk, graph = 2048, 8
    elif mib < 35 * 1024:
        chunk, graph = 2048, 24 if small else 80
    elif mib < 60 * 1024:
        chunk, graph = 4096, 32 if small else 160
    elif mib < 160 * 1024:
        chunk, graph = 8192, 256 if small else 512
    else:
        chunk, graph = 16384, 512
    reserved = 512 + max(chunk, 2048) * 1.5 + graph * 2 + tp / 8 * 1024
    if mib > 60 * 1024:
        reserved = max(reserved, 10 * 1024)
    return chunk, round((mib - reserved) / mib, 3)


def _sglang_04_memory(capacity_bytes: float, tp: int) -> tuple[int, float]:
    """SGLang 0.4's chunked_prefill_size (by the device's memory, in MiB as nvidia-smi reports it) and
    mem_fraction_static (by tp alone)."""
    chunk = 2048 if capacity_bytes / 2**20 < 25_000 else 8192
    fraction = 0.79 if tp >= 16 else 0.81 if tp >= 8 else 0.85 if tp >= 4 else 0.87 if tp >= 2 else 0.88
    return chunk, fraction


def engine(
    name: str, *, capacity_bytes: float, device_name: str = "", tp: int = 1, version: str | None = None
) -> EngineConfig:
    """An engine's defaults on a device of ``capacity_bytes`` (its memory as the driver reports it:
    :attr:`costmodel.hardware.profile.HardwareProfile.engine_memory`; some defaults depend on it, and on tp) at
    release ``version`` (:data:`RELEASES`; None: the latest modelled)."""
    if name not in ENGINE_NAMES:
        raise CostModelError(f"unknown engine {name!r}; known: {', '.join(ENGINE_NAMES)}")
    version, rule = release(name, version)
    if name == "vllm":
        if rule == "0.8":
            big = any(part in device_name.lower() for part in ("h100", "h200"))
        else:  # an "80 GB" part is 74.5 GiB
            big = capacity_bytes >= 70 * GIB * 0.93 and "a100" not in device_name.lower()
        return EngineConfig(
            "vllm",
            version,
            8192 if big else 2048,
            1024 if big else 256,
            0.9,
            16,
            True,
            False,
            True,
            _VLLM_08 + _VLLM if rule == "0.8" else _VLLM,
            prefix_caching=True,
            moe_kernel="fused",
            all_reduce="engine",
        )
    if name == "sglang":
        chunk, fraction = _sglang_memory(capacity_bytes, tp) if rule == "0.5" else _sglang_04_memory(capacity_bytes, tp)
        return EngineConfig(
            "sglang",
            version,
            chunk,
            4096,
            fraction,
            1,
            True,
            False,
            False,
            _SGLANG if rule == "0.5" else _SGLANG_04 + _SGLANG,
            async_scheduling=True,
            mxfp4_activations="mxfp8",
            reserved_decode_tokens=512,
        )
    if name == "atom":
        return EngineConfig(
            "atom",
            version,
            16384,
            512,
            0.9,
            16,
            False,
            False,
            False,
            _ATOM,
            reuse_prefix=False,
        )
    return EngineConfig(
        "trtllm",
        version,
        8192,
        2048,
        0.9,
        32,
        False,
        True,
        True,
        _TRTLLM,
        async_scheduling=True,
        block_fp8_linear="gemm_fp8",
        mxfp4_activations="mxfp8",
    )


def default_kv_dtype(name: str, weight_dtype: str | None) -> str | None:
    """The KV-cache dtype an engine keeps for a checkpoint when none is asked for: TensorRT-LLM's FP8
    checkpoints (quantized with ModelOpt, kv_cache_quant_algo FP8) carry an FP8 cache; vLLM and SGLang keep the
    model's dtype (``--kv-cache-dtype auto``). None: the model's dtype."""
    return "fp8" if name == "trtllm" and weight_dtype in ("fp8", "fp8_block") else None


def activation_bytes(tokens: int, d_model: int, d_ff_per_device: int, act_bytes: float) -> float:
    """Peak activations of a forward pass over ``tokens`` tokens, as an engine's profile run leaves them: the
    gate and up projections' output and a few residual-width buffers per token (an estimate, stated)."""
    return tokens * (2 * d_ff_per_device + 4 * d_model) * act_bytes


def kv_budget_bytes(eng: EngineConfig, capacity: float, weights: float, activations: float) -> float:
    """Bytes of one device the engine gives its KV cache."""
    if eng.name in ("vllm", "atom"):  # ATOM's ModelRunner sizes its cache by vLLM's rule
        return eng.memory_fraction * capacity - weights - activations
    if eng.name == "sglang":
        return eng.memory_fraction * capacity - weights
    return eng.memory_fraction * (capacity - weights - activations)


def kv_capacity_tokens(eng: EngineConfig, budget_bytes: float, bytes_per_token: float) -> int:
    """Cached tokens that fit the budget, in whole pages."""
    if budget_bytes <= 0 or bytes_per_token <= 0:
        return 0
    pages = math.floor(budget_bytes / (bytes_per_token * eng.page_size))
    return pages * eng.page_size
