"""Validate-time errors of separable_conv2d, grouped conv2d, conv2d_transpose and upsample:
positioned at the offending key's value, saying what was received and what is expected."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_spec_errors import expected_lines, validate

SPEC = """\
specgen: 1
name: convs
inputs:
  x: {{shape: [9, 7, 6]}}
  v: {{shape: [4]}}
outputs:
  y: l
layers:
  - {layer}
"""
LINE = 9  # the layer's line in SPEC

# (id, layer, the key whose value the error points at, message)
CASES = [
    ("groups_not_dividing_inputs", "{name: l, input: x, op: conv2d, filters: 8, kernel: 3, groups: 4}", "groups",
     "layer 'l' (conv2d): groups: received 4, expected a divisor of both the input channels (6) and filters (8)"),
    ("groups_not_dividing_filters", "{name: l, input: x, op: conv2d, filters: 4, kernel: 3, groups: 3}", "groups",
     "layer 'l' (conv2d): groups: received 3, expected a divisor of both the input channels (6) and filters (4)"),
    ("groups_zero", "{name: l, input: x, op: conv2d, filters: 4, kernel: 3, groups: 0}", "groups",
     "groups: received 0, expected a value > 0 (in layer 'l')"),
    ("transpose_output_padding_at_stride",
     "{name: l, input: x, op: conv2d_transpose, filters: 2, kernel: 3, strides: 2, output_padding: 2}", "output_padding",
     "layer 'l' (conv2d_transpose): output_padding: received 2, expected values below strides (2), as Keras requires: "
     "2 on the height axis is not below its stride 2"),
    ("transpose_same_even_kernel_no_output_padding",
     "{name: l, input: x, op: conv2d_transpose, filters: 2, kernel: 4, strides: 2, padding: same, output_padding: 0}",
     "output_padding",
     "layer 'l' (conv2d_transpose): output_padding: received 0: with an even kernel (4) and padding 'same', Keras "
     "makes the height axis (n - 1) * stride + kernel % 2 + output_padding long, and 16 does not map back to the "
     "input's 9; expected 1 on the height axis (at least 1, below its stride 2)"),
    ("transpose_negative_output_padding",
     "{name: l, input: x, op: conv2d_transpose, filters: 2, kernel: 3, strides: 2, output_padding: -1}", "output_padding",
     "output_padding: received -1, expected a value >= 0 (in layer 'l')"),
    ("separable_unequal_strides", "{name: l, input: x, op: separable_conv2d, filters: 2, kernel: 3, strides: [2, 1]}",
     "strides", "layer 'l' (separable_conv2d): strides: received [2, 1], expected one stride for height and width "
     "(TensorFlow's depthwise kernel supports no other)"),
    ("separable_strides_and_dilation",
     "{name: l, input: x, op: separable_conv2d, filters: 2, kernel: 3, strides: 2, dilation: 2}", "dilation",
     "layer 'l' (separable_conv2d): TensorFlow cannot combine strides > 1 with dilation > 1; use one of them"),
    ("upsample_interpolation", "{name: l, input: x, op: upsample, size: 2, interpolation: bicubic}", "interpolation",
     "interpolation: received 'bicubic', expected 'bilinear' or 'nearest' (in layer 'l')"),
    ("upsample_rank2", "{name: l, op: upsample, input: v}", "input",
     "layer 'l' (upsample): upsample needs a rank-4 input (batch, height, width, channels); received [batch, 4]"),
]


@pytest.mark.parametrize(("layer", "key", "message"), [pytest.param(*c[1:], id=c[0]) for c in CASES])
def test_positioned_error(tmp_path: Path, capsys: pytest.CaptureFixture[str], layer: str, key: str,
                          message: str) -> None:
    path = tmp_path / "spec.yaml"
    path.write_text(SPEC.format(layer=layer))
    column = len("  - ") + layer.index(f" {key}: ") + len(key) + 4  # 1-based, where the value starts
    code, out, err = validate(capsys, path)
    assert (code, out) == (1, "")
    assert err == expected_lines(path, [f"{LINE}:{column}: error: {message}"])
