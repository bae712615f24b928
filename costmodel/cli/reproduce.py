"""`costmodel reproduce`: the papers' results from the model, with every assumption shown."""

from __future__ import annotations

import click

from costmodel.cli.click_types import ErrorLineGroup
from costmodel.cli.options import (
    FilePath,
    Positive,
    echo_lines,
    emit_json,
    emit_records,
    format_option,
    json_option,
    output_format,
)
from costmodel.core.files import wrote


@click.group(cls=ErrorLineGroup)
def reproduce() -> None:
    """Reproduce the papers' results from the model, with every assumption shown."""


@reproduce.command("shazeer2019")
@click.option(
    "--f32-storage/--no-f32-storage",
    default=True,
    show_default=True,
    help="weights, caches and activations in f32, as TensorFlow kept them",
)
@click.option(
    "--concat-cache/--no-concat-cache",
    default=True,
    show_default=True,
    help="tf.concat copies the whole K/V cache every step",
)
@click.option(
    "--tile-padding/--no-tile-padding",
    default=True,
    show_default=True,
    help="pad every matmul to the matrix unit's 128x128 tile",
)
@click.option(
    "--f32-passes",
    type=click.IntRange(1, 6),
    default=1,
    show_default=True,
    help="bf16 passes per f32 matmul (1: XLA's default precision on TPU; 3: HIGH; 6: HIGHEST)",
)
@click.option(
    "--cache-copies",
    type=click.IntRange(1, 2),
    default=2,
    show_default=True,
    help="whole copies of the K/V cache per step with --concat-cache (1: tf.concat; 2: tensor2tensor's "
    "TPU decoding, transposed and back)",
)
@json_option
def reproduce_shazeer(f32_storage, concat_cache, tile_padding, f32_passes, cache_copies, as_json) -> None:
    """Shazeer 2019: the asymptotic ratios, and Table 2's decoder time per token on a TPUv2 board.

    Example: costmodel reproduce shazeer2019
    """
    from costmodel.papers.reproduce import Mechanisms, shazeer2019
    from costmodel.render.papers import shazeer_table

    result = shazeer2019(Mechanisms(f32_storage, concat_cache, tile_padding, f32_passes, cache_copies))
    if as_json:
        emit_json(result)
    else:
        click.echo(shazeer_table(result))


@reproduce.command("deepseek2024")
@click.option("--gpu", "gpu", default="h800", show_default=True, help="the device (the paper's: H800)")
@click.option("--gpus", "devices", type=Positive, default=8, show_default=True, help="devices of one deployment")
@click.option(
    "--input-len",
    type=Positive,
    default=1024,
    show_default=True,
    help="prompt tokens of a request (the paper states none)",
)
@click.option(
    "--output-len",
    type=Positive,
    default=1024,
    show_default=True,
    help="generated tokens of a request (the paper states none)",
)
@json_option
def reproduce_deepseek(gpu, devices, input_len, output_len, as_json) -> None:
    """DeepSeek-V2 (2024): the KV cache against DeepSeek 67B, and the generation throughput on 8 H800s.

    Example: costmodel reproduce deepseek2024
    """
    from costmodel.hardware.catalog import load_profile
    from costmodel.papers.reproduce import deepseek2024
    from costmodel.render.papers import deepseek_table

    result = deepseek2024(load_profile(gpu), devices=devices, input_len=input_len, output_len=output_len)
    if as_json:
        emit_json(result)
    else:
        click.echo(deepseek_table(result))


@reproduce.command("gqa2023")
@click.option("--tp", type=Positive, default=8, show_default=True, help="TPU v4 chips, tensor parallel")
@click.option("--plot", "plot_path", type=FilePath(), help="write the figure (.png, .svg, .pdf, .html)")
@format_option
@json_option
def reproduce_gqa(tp, plot_path, fmt, as_json) -> None:
    """Ainslie et al. 2023: T5-XXL time per sample against key/value groups on TPU v4.

    Example: costmodel reproduce gqa2023 --plot gqa.png
    """
    from costmodel.papers.reproduce import gqa2023
    from costmodel.render.papers import gqa_table

    if plot_path is not None:
        from costmodel.render.plots import check_output

        check_output(plot_path)
    fmt = output_format(fmt, as_json)
    as_json = fmt == "json"
    result = gqa2023(chips=tp)
    if as_json:
        emit_json(result)
    elif fmt in ("csv", "markdown"):
        emit_records(result["rows"], fmt)
    else:
        click.echo(gqa_table(result))
    if plot_path is not None:
        from costmodel.render.plots import save
        from costmodel.render.serving_plots import draw_groups

        save(draw_groups(result), plot_path)
        if not as_json:
            echo_lines(wrote(plot_path))
