# SPDX-License-Identifier: BSD-3-Clause
# Copyright (c) 2026, the jitLtoLinking authors
"""Utilities/build_report.py: the cubin's ELF read with pyelftools, registers from the link log, the report lines."""

from __future__ import annotations

import build_report
import pytest
from helpers import sample


def test_register_reading_takes_the_final_report_of_a_ptx_link():
    log = (
        "ptxas info    : Function properties for apply_transform\n"
        "ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n"
        "ptxas info    : Used 28 registers, used 0 barriers\n"
        "info    : Function properties for 'user_transform':\ninfo    : used 9 registers\n"
        "info    : Function properties for 'apply_transform':\n"
        "info    : used 34 registers, used 4 barriers, 0 stack, 0 bytes smem\n"
    )
    assert build_report.registers_from_link_log(log, "apply_transform") == 34
    assert build_report.registers_from_link_log(log, "user_transform") == 9
    assert build_report.registers_from_link_log(log, "missing_kernel") is None


@pytest.mark.parametrize("data", [b"not an ELF file at all", b"\x7fELF\x02\x01\x01" + b"\0" * 20, b""])
def test_read_cubin_rejects_what_is_not_a_cubin(data):
    with pytest.raises(ValueError, match="not an ELF cubin"):
        build_report.read_cubin(data)


def test_private_copies_made_by_lto_count_as_the_function():
    facts = build_report.CubinFacts(
        functions=["apply_transform", "$apply_transform$user_transform"],
        calls={"apply_transform": {"$apply_transform$user_transform": 2, "other": 1}},
    )
    assert facts.has_function("user_transform") and not facts.has_function("transform")
    assert facts.calls_from("apply_transform", "user_transform") == 2


def test_report_lines_say_what_was_read_and_the_cache_state():
    build = build_report.Build("lto", compiles=[{"module": "a.cu", "ms": 10.0, "cache": "hit", "saved_ms": 30.0}])
    build.link_ms, build.registers, build.inlined, build.calls_left = 5.0, 28, True, 0
    lines = build_report.report_lines(build)
    assert (
        lines[0]
        == "  [lto] compile 10.0 ms, link 5.0 ms, cubin 0 bytes, 28 registers, user_transform inlined (0 calls left)"
    )
    assert lines[1] == "  [lto] cache hit: a.cu (10.0 ms, saved 30.0 ms)"
    build.inlined, build.calls_left = False, 7
    assert "user_transform still a call (7 call sites)" in build_report.report_lines(build)[0]
    build.calls_left = None
    assert "still a function (a private copy the kernel calls)" in build_report.report_lines(build)[0]
    assert build_report.report_lines(build_report.Build("ptx", skipped="no driver")) == ["  [ptx] skipped: no driver"]


def test_the_summary_keeps_every_json_key():
    summary = build_report.Build("swap").summary()
    assert list(summary) == [
        "build", "plugin", "skipped", "compile_ms", "link_ms", "compiles", "cubin_bytes", "registers", "registers_from",
        "user_transform_calls_left", "user_transform_inlined", "verification",
    ]  # fmt: skip
    assert sample.Plugin("x.cu", "").translation_unit().startswith(sample.PLUGIN_CONTRACT)
