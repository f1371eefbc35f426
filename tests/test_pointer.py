# SPDX-License-Identifier: BSD-3-Clause
# Copyright (c) 2026, the jitLtoLinking authors
"""The function-pointer builds of --benchmark, built with the sample's own steps for sm_90 and
read back from the cubin. No GPU needed: LTO-IR compiles and links without a driver."""

from __future__ import annotations

import pytest
from cuda.core import Linker, LinkerOptions
from helpers import ARCH, EXAMPLES, cuda_plugin, make_tools, sample
from jitlto_gpu import report_lines

PLUGINS = [sample.DEFAULT_PLUGIN, cuda_plugin(EXAMPLES / "transcendental.cu")]


def pointer_build(tools, plugin, library, pointer, kind):
    """The benchmark's pointer build with LTO: library, pointer module and plug-in, as it links them."""
    modules = [tools.compile(sample.compile_ltoir, code) for code in (library, pointer, plugin)]
    build = tools.link(sample.link_lto, kind, plugin, *modules)
    return tools.report(build)


def test_the_pointer_library_is_the_library_calling_through_a_pointer():
    source = sample.POINTER_LIBRARY.source
    assert sample.PLUGIN_CONTRACT not in source and "#define user_transform(x) user_transform_pointer(x)" in source
    assert sample.LIBRARY_SOURCE.split(sample.PLUGIN_CONTRACT)[1] in source  # the same kernel
    assert "= user_transform;" in sample.POINTER.source and "const" not in sample.POINTER.source
    assert "(* const user_transform_pointer)" in sample.CONSTANT_POINTER.source


@pytest.mark.parametrize("plugin", PLUGINS, ids=lambda p: p.name)
def test_linked_with_lto_the_pointer_stays_an_indirect_call_and_the_constant_one_inlines(plugin, capsys):
    tools = make_tools()
    pointer = pointer_build(tools, plugin, sample.POINTER_LIBRARY, sample.POINTER, "pointer LTO")
    assert pointer.inlined is False and pointer.through_pointer is True and pointer.calls_left is None
    assert "user_transform called through user_transform_pointer (an indirect call)" in report_lines(pointer)[0]
    constant = pointer_build(tools, plugin, sample.CONSTANT_POINTER_LIBRARY, sample.CONSTANT_POINTER, "constant")
    assert constant.inlined is True and constant.through_pointer is False and constant.calls_left == 0
    sample.lto_linking(tools, [plugin], None, None)
    lto = tools.find("lto", plugin)
    assert lto.inlined is True and lto.through_pointer is False
    assert constant.registers == lto.registers < pointer.registers  # the call costs registers
    assert "[pointer LTO]" in capsys.readouterr().out


def test_the_pointer_is_read_through_memory_in_the_code_lto_made():
    tools = make_tools()
    modules = [tools.compile(sample.compile_ltoir, code)
               for code in (sample.POINTER_LIBRARY, sample.POINTER, sample.DEFAULT_PLUGIN)]
    ptx = Linker(*modules, options=LinkerOptions(arch=ARCH, link_time_optimization=True, ptx=True)).link("ptx")
    text = ptx.code.decode()
    assert ".callprototype" in text and "user_transform_pointer" in text
