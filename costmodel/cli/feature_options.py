"""The engine features a served model may turn on, as ``costmodel predict`` takes them: speculative decoding
(:mod:`costmodel.engine.speculation`), a prefix its requests share and conversations of several turns
(:meth:`costmodel.engine.load.Load.conversations`), both found in the engine's prefix cache; and what a run costs
beside its time: its boards' power limit and the price of a device-hour (:mod:`costmodel.engine.energy`)."""

from __future__ import annotations

import click

from costmodel.cli.click_types import Fraction, PositiveNumber
from costmodel.cli.options import ListOf, NonNegative

#: Speculative decoding (a served model's, simulated): the proposer and how many of its drafts are kept.
SPECULATION_OPTIONS = [
    click.option(
        "--speculative-config",
        "speculative_config",
        metavar="JSON",
        help="speculative decoding as vLLM's --speculative-config JSON takes it, e.g. "
        '\'{"method": "mtp", "num_speculative_tokens": 3}\' (mtp, eagle, eagle3, ngram, draft_model with "model"; '
        "SGLang's and TensorRT-LLM's keys also read)",
    ),
    click.option(
        "--acceptance-length",
        type=PositiveNumber(),
        help="the mean tokens a verify step yields, the bonus token included (1 to k + 1; no engine's default)",
    ),
    click.option(
        "--acceptance-rates",
        type=ListOf(Fraction()),
        metavar="P1,...",
        help="instead of --acceptance-length: each draft position's chance to be kept, the ones before it kept",
    ),
]

#: A prefix the requests share, found in the engine's prefix cache.
PREFIX_OPTIONS = [
    click.option(
        "--prefix-len",
        type=NonNegative,
        default=0,
        help="tokens of a prefix the requests' prompts start with (a system prompt, a document), which the engine's "
        "prefix cache keeps (--enable-prefix-caching, on by default in every engine) [default: none]",
    ),
    click.option(
        "--prefix-share",
        type=Fraction(),
        help="with --prefix-len: the share of requests that start with it, spread evenly [default: 1, every one]",
    ),
    click.option(
        "--turns",
        type=click.IntRange(1, 1000),
        default=1,
        help="conversations of this many turns: each turn's prompt holds the turns before (their prompts and "
        "outputs) and its own --input-len tokens, sent as the turn before finishes; the prefix cache keeps each "
        "conversation for its next turn (--num-requests and a --request-rate count turns and conversations) "
        "[default: 1]",
    ),
]
#: What a served run costs beside its time: the boards' power limit, and the price of a device-hour.
ENERGY_OPTIONS = [
    click.option(
        "--power-limit",
        "power_limit",
        type=PositiveNumber(),
        metavar="W",
        help="the boards' power limit as set (nvidia-smi -pl): kernels that would draw more run at a lower clock, "
        "longer [default: the board's own]",
    ),
    click.option(
        "--price-per-gpu-hour",
        "price_per_gpu_hour",
        type=PositiveNumber(),
        metavar="USD",
        help="what one device costs an hour: adds dollars per million output tokens and per million tokens",
    ),
]
FEATURE_OPTIONS = [*SPECULATION_OPTIONS, *PREFIX_OPTIONS, *ENERGY_OPTIONS]
