# SPDX-License-Identifier: BSD-3-Clause
# Copyright (c) 2026, the jitLtoLinking authors
"""Utilities/jitlto_builds.py: the cubin read with pyelftools, registers from .nv.info, the report lines."""

from __future__ import annotations

import re

import jitlto_gpu
import pytest
from helpers import lto_build, sample
from jitlto_builds import Build
from jitlto_gpu import read_cubin, report_lines


def test_registers_read_from_the_cubin_match_what_the_assembler_reported():
    build, tools = lto_build(sample.DEFAULT_PLUGIN)
    # The linker's verbose log is the assembler's own word on the registers it gave the kernel.
    options = sample.LinkerOptions(arch=tools.arch, link_time_optimization=True, verbose=True)
    linker = sample.Linker(*build.inputs, options=options)
    linker.link("cubin")
    reported = int(re.findall(r"Used (\d+) registers", linker.get_info_log())[-1])
    linker.close()
    assert build.registers_from == "cubin" and build.registers == reported
    assert read_cubin(bytes(build.code.code))[2]["apply_transform"] == reported


@pytest.mark.parametrize("data", [b"not an ELF file at all", b"\x7fELF\x02\x01\x01" + b"\0" * 20, b""])
def test_read_cubin_rejects_what_is_not_a_cubin(data):
    with pytest.raises(ValueError, match="not an ELF cubin"):
        read_cubin(data)


def test_private_copies_made_by_lto_count_as_the_function():
    assert jitlto_gpu.is_callee("user_transform") and jitlto_gpu.is_callee("$apply_transform$user_transform")
    assert not jitlto_gpu.is_callee("transform") and not jitlto_gpu.is_callee("user_transform_2")


def test_report_lines_say_what_was_read_and_the_cache_state():
    record = {"module": "a.cu", "ms": 10.0, "cache": "hit", "saved_ms": 30.0}
    build = Build("lto", compiles=[record], link_cache={"cache": "hit", "saved_ms": 20.0})
    build.cubin_bytes = 0
    build.link_ms, build.registers, build.inlined, build.calls_left = 5.0, 28, True, 0
    lines = report_lines(build)
    assert lines[0] == (
        "  [lto] compile 10.0 ms, link 5.0 ms, cubin 0 bytes, 28 registers, user_transform inlined (0 calls left)"
    )
    assert lines[1:] == ["  [lto] cache hit: a.cu (10.0 ms, saved 30.0 ms)", "  [lto] link cache hit (saved 20.0 ms)"]
    build.inlined, build.calls_left = False, 7
    assert "user_transform still a call (7 call sites)" in report_lines(build)[0]
    build.calls_left = None
    assert "still a function (a private copy the kernel calls)" in report_lines(build)[0]


def test_nvrtc_warnings_are_printed_under_the_build():
    record = {"module": "a.cu", "ms": 1.0, "cache": "off", "warnings": 'a.cu(3): warning #177-D: variable "k"'}
    lines = report_lines(Build("lto", compiles=[record]))
    assert lines[1:] == ["  [lto] NVRTC warned about a.cu:", '    a.cu(3): warning #177-D: variable "k"']


def test_the_summary_keeps_every_json_key():
    summary = Build("swap").summary()
    assert list(summary) == [
        "build", "plugin", "skipped", "compile_ms", "link_ms", "link_cache", "library_from", "compiles",
        "cubin_bytes", "registers", "registers_from", "user_transform_calls_left", "user_transform_inlined",
        "user_transform_through_pointer", "verification",
    ]  # fmt: skip
    assert sample.DEFAULT_PLUGIN.source.startswith(sample.PLUGIN_CONTRACT)
