# SPDX-License-Identifier: BSD-3-Clause
# Copyright (c) 2026, the jitLtoLinking authors
"""The function-pointer builds of --benchmark, built with the sample's own steps for sm_90 and
read back from the cubin. No GPU needed: LTO-IR compiles and links without a driver."""

from __future__ import annotations

from dataclasses import replace

import pytest
from cuda.core import Linker, LinkerOptions
from helpers import ARCH, EXAMPLES, cuda_plugin, make_tools, sample
from jitlto_gpu import report_lines

PLUGINS = [sample.DEFAULT_PLUGIN, cuda_plugin(EXAMPLES / "transcendental.cu")]


def test_the_pointer_libraries_are_the_library_calling_through_a_pointer():
    kernel = sample.LIBRARY_SOURCE.split(sample.PLUGIN_CONTRACT)[1]
    for library in (sample.POINTER_LIBRARY, sample.CONSTANT_POINTER_LIBRARY):
        assert library.source.endswith(kernel)  # the same kernel, word for word
        assert "#define user_transform(x) user_transform_pointer(x)" in library.source
    assert "(*user_transform_pointer)(float) = user_transform;" in sample.POINTER_LIBRARY.source
    assert "(* const user_transform_pointer)(float);" in sample.CONSTANT_POINTER_LIBRARY.source  # declared only


@pytest.mark.parametrize("plugin", PLUGINS, ids=lambda p: p.name)
def test_with_lto_the_pointer_stays_an_indirect_call_and_the_constant_one_is_inlined(plugin, capsys):
    tools = make_tools()
    plugin_ltoir = tools.compile(sample.compile_ltoir, plugin)
    library = tools.compile(sample.compile_ltoir, sample.POINTER_LIBRARY)
    pointer = tools.report(tools.link(sample.link_lto, "pointer LTO", plugin, library, plugin_ltoir))
    assert pointer.inlined is False and pointer.through_pointer is True and pointer.calls_left is None
    assert "user_transform called through user_transform_pointer (an indirect call)" in report_lines(pointer)[0]

    beside = replace(plugin, source=f"{plugin.source}{sample.CONSTANT_POINTER} = user_transform;\n")
    library = tools.compile(sample.compile_ltoir, sample.CONSTANT_POINTER_LIBRARY)
    constant = tools.link(sample.link_lto, "constant", plugin, library, tools.compile(sample.compile_ltoir, beside))
    tools.report(constant)
    assert constant.inlined is True and constant.through_pointer is False and constant.calls_left == 0

    lto = tools.report(tools.link(sample.link_lto, "lto", plugin, tools.compile(sample.compile_ltoir, sample.LIBRARY),
                                  plugin_ltoir))
    assert lto.inlined is True and lto.through_pointer is False
    assert constant.registers == lto.registers < pointer.registers  # the call costs registers
    assert "[pointer LTO]" in capsys.readouterr().out


def test_the_code_lto_makes_of_the_pointer_build_reads_the_pointer_and_calls_through_it():
    modules = [sample.compile_ltoir(code.source, ARCH, code.name) for code in (sample.POINTER_LIBRARY, sample.DEFAULT_PLUGIN)]
    ptx = Linker(*modules, options=LinkerOptions(arch=ARCH, link_time_optimization=True, ptx=True)).link("ptx")
    text = ptx.code.decode()
    assert ".callprototype" in text and "user_transform_pointer" in text
