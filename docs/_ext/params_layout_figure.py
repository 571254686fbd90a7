"""The ``params-layout`` directive: the params buffer of one configuration, drawn at build time.

In a MyST page (every option optional; the defaults below)::

    ```{params-layout}
    :rnn-mode: lstm
    :input-size: 3
    :num-units: 4
    :num-layers: 2
    :direction: bidirectional
    :num-proj: 0
    :input-mode: linear_input
    ```

It asks :func:`cudnn_rnn.layout.params_layout` for every entry of the buffer and renders

* an inline SVG strip of the 1-D buffer in buffer order, one row per run of entries of one kind
  (matrices or biases) and one pseudo-layer, each block labelled with its name, shape and offset;
* a table of the entries (name, shape, offset, size, cuDNN linLayerID) in the same order.

Names are those of :meth:`cudnn_rnn.layers.RecurrentLayer.named_views` (``W_i_l0``, ``R_f_l1_reverse``,
``bW_g_l0``, ``P_l0``, ...), read from a layer holding ``arange(size)`` so each view's first element
is its offset. The output depends on nothing but the options and the library: the same page builds
to the same bytes.
"""

from __future__ import annotations

from dataclasses import dataclass
from html import escape
from typing import Any, Mapping

import numpy as np
from docutils import nodes
from docutils.parsers.rst import directives
from sphinx.application import Sphinx
from sphinx.util.docutils import SphinxDirective

from cudnn_rnn import RNNConfig
from cudnn_rnn.layers import RecurrentLayer
from cudnn_rnn.layout import ParamEntry, params_layout

#: option -> (RNNConfig field, converter, default)
OPTIONS: dict[str, tuple[str, Any, Any]] = {
    "rnn-mode": ("rnn_mode", directives.unchanged_required, "lstm"),
    "input-mode": ("input_mode", directives.unchanged_required, "linear_input"),
    "direction": ("direction", directives.unchanged_required, "unidirectional"),
    "num-layers": ("num_layers", directives.positive_int, 1),
    "num-units": ("num_units", directives.positive_int, 4),
    "input-size": ("input_size", directives.positive_int, 3),
    "num-proj": ("num_proj", directives.nonnegative_int, 0),
}

#: (kind, side) of an entry -> (legend text, fill colour)
STYLES: dict[tuple[str, str], tuple[str, str]] = {
    ("matrix", "input"): ("input matrix W [N, width]", "#9ecae1"),
    ("matrix", "recurrent"): ("recurrent matrix R [N, P]", "#a1d99b"),
    ("matrix", "projection"): ("projection P [P, N]", "#fdd0a2"),
    ("bias", "input"): ("input bias bW [N]", "#deebf7"),
    ("bias", "recurrent"): ("recurrent bias bR [N]", "#e5f5e0"),
}

# Geometry of the SVG, in pixels.
LABEL_WIDTH = 150  # the row labels on the left
STRIP_WIDTH = 570  # the blocks of the widest row
MIN_BLOCK = 42  # every block is at least this wide (its label must fit); the rest is proportional to size
BLOCK_HEIGHT = 34
ROW_HEIGHT = 54  # block, offset text and spacing
HEADING_HEIGHT = 24
LEGEND_HEIGHT = 22


@dataclass(frozen=True)
class Block:
    """One entry of the buffer as drawn: its layout entry and its name."""

    entry: ParamEntry
    name: str


def parse_options(text: Mapping[str, str]) -> dict[str, Any]:
    """A page's option text converted as Sphinx converts it for the directive (``"4"`` -> 4 for sizes).

    Raises:
        ValueError: an option the directive does not take, or a size that is not a (positive) integer.
    """
    unknown = sorted(set(text) - set(OPTIONS))
    if unknown:
        raise ValueError(f"params-layout has no option(s) {unknown}; it takes {sorted(OPTIONS)}")
    return {option: OPTIONS[option][1](value) for option, value in text.items()}


def config_from_options(options: dict[str, Any]) -> RNNConfig:
    """The configuration the directive's options describe (defaults for the missing ones)."""
    fields = {field: options.get(option, default) for option, (field, _, default) in OPTIONS.items()}
    return RNNConfig(**fields)


def buffer_blocks(config: RNNConfig) -> list[Block]:
    """Every entry of ``config``'s params buffer in buffer order, named as the layer classes name them."""
    layout = params_layout(config)
    numbered = RecurrentLayer.from_params(np.arange(layout.size, dtype=np.float64), config.replace(dtype="float64"))
    name_at = {int(view.reshape(-1)[0]): name for name, view in numbered.weights().items()}
    entries = sorted(layout.weights + layout.biases, key=lambda entry: entry.offset)
    return [Block(entry, name_at[entry.offset]) for entry in entries]


def rows_of(blocks: list[Block]) -> list[list[Block]]:
    """Consecutive blocks of one kind (matrix or bias) and one pseudo-layer, as the strip's rows."""
    rows: list[list[Block]] = []
    for block in blocks:
        key = (block.entry.kind, block.entry.pseudo_layer)
        if rows and (rows[-1][0].entry.kind, rows[-1][0].entry.pseudo_layer) == key:
            rows[-1].append(block)
        else:
            rows.append([block])
    return rows


def short_name(name: str) -> str:
    """``W_i_l0_reverse`` -> ``W_i``: the row label says the layer and direction."""
    return name.split("_l", 1)[0]


def shape_text(shape: tuple[int, ...]) -> str:
    return "\u00d7".join(str(n) for n in shape)


def render_svg(config: RNNConfig, blocks: list[Block]) -> str:
    """The buffer as an SVG strip: rows of blocks, each with its name, shape and offset."""
    rows = rows_of(blocks)
    widest = max(sum(b.entry.size for b in row) for row in rows)
    most = max(len(row) for row in rows)
    scale = (STRIP_WIDTH - most * MIN_BLOCK) / widest
    directions = config.num_directions
    width = LABEL_WIDTH + STRIP_WIDTH + 60
    y = LEGEND_HEIGHT + 8
    parts: list[str] = []
    kind_shown = ""
    for row in rows:
        first = row[0].entry
        if first.kind != kind_shown:
            kind_shown = first.kind
            title = "matrices (weights), offsets from 0" if kind_shown == "matrix" else "biases, after every matrix"
            parts.append(f'<text x="4" y="{y + 15}" font-weight="bold">{escape(title)}</text>')
            y += HEADING_HEIGHT
        layer, reverse = divmod(first.pseudo_layer, directions)
        direction = "reverse" if reverse else "forward"
        parts.append(f'<text x="4" y="{y + 14}">pseudo-layer {first.pseudo_layer}</text>')
        parts.append(f'<text x="4" y="{y + 29}" fill="#555">layer {layer}, {direction}</text>')
        x = float(LABEL_WIDTH)
        for block in row:
            entry = block.entry
            w = MIN_BLOCK + scale * entry.size
            legend, fill = STYLES[entry.kind, entry.side]
            middle = x + w / 2
            parts.append(
                f'<g><title>{escape(block.name)}: {escape(entry.describe())}, shape {shape_text(entry.shape)}, '
                f'offset {entry.offset}, size {entry.size}</title>'
                f'<rect x="{x:.1f}" y="{y}" width="{w:.1f}" height="{BLOCK_HEIGHT}" fill="{fill}" stroke="#333"/>'
                f'<text x="{middle:.1f}" y="{y + 14}" text-anchor="middle">{escape(short_name(block.name))}</text>'
                f'<text x="{middle:.1f}" y="{y + 27}" text-anchor="middle" font-size="9">'
                f'{shape_text(entry.shape)}</text>'
                f'<text x="{x + 2:.1f}" y="{y + BLOCK_HEIGHT + 11}" font-size="9" fill="#555">{entry.offset}</text>'
                "</g>")
            x += w
        if row is rows[-1]:
            parts.append(f'<text x="{x + 2:.1f}" y="{y + BLOCK_HEIGHT + 11}" font-size="9" fill="#555">'
                         f'{row[-1].entry.stop} = size</text>')
        y += ROW_HEIGHT
    legend_parts = []
    x = 4.0
    for (kind, side), (text, fill) in STYLES.items():
        if any((b.entry.kind, b.entry.side) == (kind, side) for b in blocks):
            legend_parts.append(f'<rect x="{x:.0f}" y="4" width="12" height="12" fill="{fill}" stroke="#333"/>'
                                f'<text x="{x + 16:.0f}" y="14" font-size="10">{escape(text)}</text>')
            x += 16 + 5.6 * len(text) + 14
    summary = (f"params buffer of {config.rnn_mode}, {config.num_layers} layer(s), {config.direction}, "
               f"input_size {config.input_size}, num_units {config.num_units}, num_proj {config.num_proj}, "
               f"{config.input_mode}: {len(blocks)} entries, {blocks[-1].entry.stop} elements")
    return (f'<svg xmlns="http://www.w3.org/2000/svg" class="params-layout-figure" role="img" '
            f'viewBox="0 0 {width} {y}" width="100%" font-family="sans-serif" font-size="11">'
            f'<title>{escape(summary)}</title><rect width="100%" height="100%" fill="#fff"/>'
            + "".join(legend_parts) + "".join(parts) + "</svg>")


def entry_table(blocks: list[Block]) -> nodes.table:
    """A docutils table of the entries: name, shape, offset, size, linLayerID, what it is."""
    headers = ("name", "shape", "offset", "size", "linLayerID", "entry")
    rows = [(b.name, shape_text(b.entry.shape), str(b.entry.offset), str(b.entry.size), str(b.entry.lin_layer_id),
             b.entry.describe()) for b in blocks]
    table = nodes.table(classes=["params-layout-table"])
    group = nodes.tgroup(cols=len(headers))
    table += group
    for width in (16, 10, 8, 8, 10, 48):
        group += nodes.colspec(colwidth=width)
    head = nodes.thead()
    group += head
    body = nodes.tbody()
    group += body
    for cells, parent in [(headers, head)] + [(row, body) for row in rows]:
        line = nodes.row()
        for i, text in enumerate(cells):
            entry = nodes.entry()
            entry += nodes.paragraph("", "", nodes.literal(text, text) if i == 0 and parent is body
                                     else nodes.Text(text))
            line += entry
        parent += line
    return table


class ParamsLayoutDirective(SphinxDirective):
    """``params-layout``: the SVG strip and the table of one configuration's params buffer."""

    has_content = False
    option_spec = {option: converter for option, (_, converter, _) in OPTIONS.items()}

    def run(self) -> list[nodes.Node]:
        try:
            config = config_from_options(self.options)
        except (TypeError, ValueError) as error:
            raise self.error(f"params-layout: {error}") from None
        blocks = buffer_blocks(config)
        self.env.note_dependency(__file__)
        container = nodes.container(classes=["params-layout"])
        container += nodes.raw("", render_svg(config, blocks), format="html")
        caption = (f"{config.rnn_mode}, num_layers={config.num_layers}, {config.direction}, "
                   f"input_size={config.input_size}, num_units={config.num_units}, num_proj={config.num_proj}, "
                   f"{config.input_mode}: {len(blocks)} entries, params_size = {blocks[-1].entry.stop}")
        container += nodes.paragraph("", "", nodes.emphasis(caption, caption))
        container += entry_table(blocks)
        return [container]


def setup(app: Sphinx) -> dict[str, Any]:
    app.add_directive("params-layout", ParamsLayoutDirective)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}
