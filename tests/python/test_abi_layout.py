"""The ctypes structs of attnkit._capi lay out exactly like the C compiler lays out attnkit.h:
a tiny C program prints sizeof and every field's offsetof, compared against ctypes. Also the enum
values and ATTNKIT_ABI_VERSION. Needs a C compiler and the header (a source checkout); skips
visibly otherwise."""

import ctypes
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from attnkit import _capi

HEADER_DIR = Path(__file__).resolve().parents[2] / "include"
STRUCTS = {
    "attnkit_tensor": _capi.Tensor,
    "attnkit_run_options": _capi.RunOptions,
    "attnkit_neighborhood_dim": _capi.NeighborhoodDim,
    "attnkit_attention_mask": _capi.AttentionMask,
    "attnkit_attention_forward_args": _capi.AttentionForwardArgs,
    "attnkit_attention_backward_args": _capi.AttentionBackwardArgs,
    "attnkit_retention_forward_args": _capi.RetentionForwardArgs,
    "attnkit_retention_backward_args": _capi.RetentionBackwardArgs,
    "attnkit_gemm_args": _capi.GemmArgs,
    "attnkit_tuner_settings": _capi.TunerSettings,
    "attnkit_rank_group": _capi.RankGroup,
}
CONSTANTS = ["ATTNKIT_ABI_VERSION", "ATTNKIT_MAX_RANK", "ATTNKIT_MAX_TOKEN_DIMS", "ATTNKIT_UNSUPPORTED",
             "ATTNKIT_INTERNAL", "ATTNKIT_BOOL", "ATTNKIT_FLOAT64", "ATTNKIT_DEVICE_CUDA", "ATTNKIT_MASK_ELEMENT",
             "ATTNKIT_CAUSAL_BOTTOM_RIGHT", "ATTNKIT_RETENTION_RECURRENT", "ATTNKIT_TUNE_LOAD_ONLY",
             "ATTNKIT_AGREE_SPLIT_CONFIGS", "ATTNKIT_BACKEND_CUDA"]


@pytest.fixture(scope="module")
def c_layout(tmp_path_factory):
    compiler = shutil.which(os.environ.get("CC", "cc")) or shutil.which("gcc")
    if compiler is None:
        pytest.skip("no C compiler (cc/gcc) to check the ctypes layout against")
    if not (HEADER_DIR / "attnkit" / "attnkit.h").exists():
        pytest.skip(f"include/attnkit/attnkit.h not found under {HEADER_DIR} (not a source checkout)")
    lines = ['#include <stdio.h>', '#include <stddef.h>', '#include "attnkit/attnkit.h"', "int main(void) {"]
    for c_name, struct in STRUCTS.items():
        lines.append(f'  printf("{c_name} sizeof %zu\\n", sizeof({c_name}));')
        for field, _ in struct._fields_:
            lines.append(f'  printf("{c_name} {field} %zu\\n", offsetof({c_name}, {field}));')
    for name in CONSTANTS:
        lines.append(f'  printf("const {name} %d\\n", (int){name});')
    lines += ["  return 0;", "}"]
    folder = tmp_path_factory.mktemp("abi")
    source, program = folder / "layout.c", folder / "layout"
    source.write_text("\n".join(lines) + "\n")
    subprocess.run([compiler, "-std=c11", "-I", str(HEADER_DIR), str(source), "-o", str(program)], check=True)
    output = subprocess.run([str(program)], check=True, capture_output=True, text=True).stdout
    layout = {}
    for line in output.splitlines():
        owner, field, value = line.split()
        layout[(owner, field)] = int(value)
    return layout


@pytest.mark.parametrize("c_name", list(STRUCTS))
def test_struct_size_and_field_offsets_match_the_c_compiler(c_layout, c_name):
    struct = STRUCTS[c_name]
    assert ctypes.sizeof(struct) == c_layout[(c_name, "sizeof")]
    for field, _ in struct._fields_:
        assert getattr(struct, field).offset == c_layout[(c_name, field)], f"{c_name}.{field}"


def test_constants_match_the_header(c_layout):
    for name in CONSTANTS:
        assert getattr(_capi, name) == c_layout[("const", name)], name
