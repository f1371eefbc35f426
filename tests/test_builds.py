# SPDX-License-Identifier: BSD-3-Clause
# Copyright (c) 2026, the jitLtoLinking authors
"""The lesson's own steps, run for sm_90 and read back from the code they built; the plug-ins that
do not compile or link. No GPU needed: LTO-IR compiles and links without a driver."""

import os
import re
import subprocess
import sys

import pytest
from cuda.core import Linker, LinkerOptions
from helpers import ARCH, EXAMPLES, PLUGINS, assert_clean_failure, compile_only, cuda_plugin, lto_build, sample
from Utilities.jitlto_report import Build, read_cubin, report


def built(kind, plugin, library_source, compile_step, link_step):
    """The library and the plug-in compiled by compile_step and linked by link_step, reported."""
    library = compile_step(library_source, ARCH)
    plugin_code = compile_step(plugin.source, ARCH, plugin.name, sample.CUDA_HEADERS)
    build = Build(kind, plugin.name, ARCH, link_step(ARCH, library, plugin_code), (library, plugin_code))
    report(build)
    return build


def test_lto_inlines_the_default_plugin_and_the_registers_are_the_assembler_s(tmp_path):
    build = lto_build(sample.DEFAULT_PLUGIN)
    functions = read_cubin(bytes(build.cubin.code))[0]
    assert "apply_transform" in functions and "user_transform" not in functions
    assert build.calls_left == 0 and build.user_transform == "inlined (0 calls left)"
    # nvJitLink's verbose log is the assembler's own word on the registers it gave the kernel. A link
    # CUDA's cache answers (a GPU machine that linked this before) logs none: this one runs without it.
    link = ("import sys\nfrom cuda.core import Linker, LinkerOptions, ObjectCode\n"
            "inputs = [ObjectCode.from_ltoir(open(path, 'rb').read()) for path in sys.argv[1:]]\n"
            f"linker = Linker(*inputs, options=LinkerOptions(arch='{ARCH}', link_time_optimization=True, verbose=True))\n"
            "linker.link('cubin')\nprint(linker.get_info_log())")
    paths = []
    for index, code in enumerate(build.inputs):
        paths.append(tmp_path / f"{index}.ltoir")
        paths[-1].write_bytes(bytes(code.code))
    log = subprocess.run([sys.executable, "-c", link, *map(str, paths)], capture_output=True, text=True,
                         env={**os.environ, "CUDA_CACHE_DISABLE": "1"}, check=True).stdout
    assert build.registers == int(re.findall(r"Used (\d+) registers", log)[-1])


@pytest.mark.parametrize("path", sorted(EXAMPLES.glob("*.cu")), ids=lambda path: path.name)
def test_lto_inlines_each_example_plugin(path):
    build = lto_build(cuda_plugin(path))
    assert build.user_transform == "inlined (0 calls left)" and build.registers > 0


@pytest.mark.parametrize("path", [None, *sorted(EXAMPLES.glob("*.cu"))], ids=lambda path: getattr(path, "name", "built-in"))
def test_the_quadrature_kernel_links_with_each_plugin_inlined_into_its_loop(path):
    plugin = cuda_plugin(path) if path else sample.DEFAULT_PLUGIN
    build = built("quadrature lto", plugin, sample.QUADRATURE_SOURCE, sample.compile_ltoir, sample.link_lto)
    assert "integrate_transform" in read_cubin(bytes(build.cubin.code))[0] and build.kernel == "integrate_transform"
    assert build.user_transform == "inlined (0 calls left)" and build.registers > 0
    whole = Build("quadrature whole program", plugin.name, ARCH, sample.compile_whole_program(
        sample.QUADRATURE_SOURCE + plugin.source, ARCH, plugin.name, sample.CUDA_HEADERS))
    report(whole)
    assert whole.user_transform == "inlined (0 calls left)" and whole.registers > 0


def test_the_quadrature_s_pointer_build_calls_through_the_pointer_even_with_lto():
    pointer = built("quadrature pointer", sample.DEFAULT_PLUGIN, sample.POINTER_SWITCH + sample.QUADRATURE_KERNEL,
                    sample.compile_ltoir, sample.link_lto)
    assert pointer.user_transform.startswith("called through library_user_transform_pointer")


@pytest.mark.gpu  # cuda.core asks the driver before it compiles to PTX
def test_with_ptx_linking_the_quadrature_calls_the_plugin_in_its_loop():
    library_ptx = sample.compile_ptx(sample.QUADRATURE_SOURCE, ARCH, "quadrature.cu")
    plugin_ptx = sample.compile_ptx(sample.DEFAULT_PLUGIN.source, ARCH, "default_plugin.cu")
    ptx = Build("quadrature ptx", "default_plugin.cu", ARCH, sample.link_ptx(ARCH, library_ptx, plugin_ptx))
    report(ptx)
    assert ptx.calls_left > 0 and ptx.user_transform.startswith("still a call")


def test_the_default_run_builds_no_quadrature():
    result = compile_only()
    assert result.returncode == 0 and "quadrature" not in result.stdout and "integrate" not in result.stdout


def test_a_recursive_plugin_cannot_be_inlined_and_is_reported_as_a_function(tmp_path):
    (tmp_path / "recursive.cu").write_text('extern "C" __device__ float user_transform(float x) '
                                            "{ return x > 1.0f ? 1.0f + user_transform(0.5f * x) : x; }")
    build = lto_build(cuda_plugin(tmp_path / "recursive.cu"))
    assert build.user_transform.startswith("still a")


@pytest.mark.gpu  # cuda.core asks the driver before it compiles to PTX
def test_the_half_lto_link_inlines_nothing():
    library_ptx = sample.compile_ptx(sample.LIBRARY_SOURCE, ARCH, "library.cu")
    plugin_ltoir = sample.compile_ltoir(sample.DEFAULT_PLUGIN.source, ARCH, "default_plugin.cu")
    half = Build("half-LTO", "default_plugin.cu", ARCH, sample.link_lto(ARCH, library_ptx, plugin_ltoir))
    report(half)
    assert half.user_transform == "still a call (7 call sites)", "the 4 lanes, head, tail, scalar loop"


def test_with_lto_the_pointer_stays_an_indirect_call(capsys):
    pointer = built("pointer LTO", sample.DEFAULT_PLUGIN, sample.POINTER_LIBRARY_SOURCE, sample.compile_ltoir,
                    sample.link_lto)
    assert pointer.user_transform == "called through library_user_transform_pointer (an indirect call)"
    assert pointer.registers > lto_build(sample.DEFAULT_PLUGIN).registers, "the call costs registers"
    assert "  [pointer LTO] cubin " in capsys.readouterr().out


def test_the_code_lto_makes_of_the_pointer_build_calls_through_the_pointer():
    pointer = built("pointer LTO", sample.DEFAULT_PLUGIN, sample.POINTER_LIBRARY_SOURCE, sample.compile_ltoir,
                    sample.link_lto)
    options = LinkerOptions(arch=ARCH, link_time_optimization=True, ptx=True)
    ptx = Linker(*pointer.inputs, options=options).link("ptx").code.decode()
    assert ".callprototype" in ptx and "library_user_transform_pointer" in ptx


def test_a_plugin_that_defines_the_usual_pointer_name_links_in_the_pointer_builds(tmp_path):
    plugin = tmp_path / "named.cu"
    plugin.write_text('extern "C" __device__ float (*user_transform_pointer)(float) = 0;\n'
                      'extern "C" __device__ float user_transform(float x) { return 2.0f * x; }\n// no newline')
    build = built("pointer", cuda_plugin(plugin), sample.POINTER_LIBRARY_SOURCE, sample.compile_ltoir,
                  sample.link_lto)
    assert build.user_transform.startswith("called through library_user_transform_pointer")


def test_the_whole_program_build_needs_no_linker_and_inlines():
    plugin = sample.DEFAULT_PLUGIN
    cubin = sample.compile_whole_program(sample.LIBRARY_SOURCE + plugin.source, ARCH)
    build = Build("whole program", plugin.name, ARCH, cubin)
    report(build)
    assert build.user_transform == "inlined (0 calls left)"


def test_compile_only_reports_every_step_and_the_swap_compiles_only_its_plugin():
    result = compile_only()
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "[2] LTO linking (link-time optimization)" in out and "[3] Plug-in swap" in out
    assert "  [lto] compile" in out and "user_transform inlined (0 calls left)" in out
    assert "  [swap] the library's LTO-IR from step [2], linked again: only the swap is compiled" in out
    assert out.rstrip().endswith("Built and reported without launching. Done")


def test_several_plugins_have_their_names_in_the_labels():
    result = compile_only("--plugin", str(EXAMPLES / "default.cu"), "--plugin", str(EXAMPLES / "polynomial.cu"))
    assert result.returncode == 0, result.stderr
    assert "  [lto default.cu] compile" in result.stdout and "  [lto polynomial.cu] compile" in result.stdout


@pytest.mark.parametrize("name", ["typo.cu", "empty.cu"])
def test_a_plugin_without_user_transform_shows_the_linker_s_log(name):
    result = compile_only("--plugin", str(PLUGINS / name))
    assert_clean_failure(result, 1, f"nvJitLink could not link {name}", "'user_transform'",
                         'must define extern "C" __device__ float user_transform(float x)')
    assert "\0" not in result.stderr


def test_a_forceinline_user_transform_is_explained(tmp_path):
    (tmp_path / "forced.cu").write_text('extern "C" __device__ __forceinline__ float user_transform(float x) '
                                        "{ return 2.0f * x; }\n")
    result = compile_only("--plugin", str(tmp_path / "forced.cu"))
    assert_clean_failure(result, 1, "not inline or __forceinline__")


def test_a_plugin_with_another_signature_is_a_compile_error_naming_user_transform():
    result = compile_only("--plugin", str(PLUGINS / "wrong_signature.cu"))
    assert_clean_failure(result, 1, "NVRTC could not compile wrong_signature.cu", "wrong_signature.cu(2)",
                         '"user_transform"')


def test_a_compile_error_names_the_file_and_line_without_a_nul_byte():
    result = compile_only("--plugin", str(PLUGINS / "syntax_error.cu"))
    assert_clean_failure(result, 1, "NVRTC could not compile syntax_error.cu", "syntax_error.cu(4): error")
    assert "\0" not in result.stdout + result.stderr


def test_including_cmath_gets_a_hint_that_works(tmp_path):
    (tmp_path / "uses_cmath.cu").write_text(
        '#include <cmath>\nextern "C" __device__ float user_transform(float x) { return std::sin(x); }\n')
    assert_clean_failure(compile_only("--plugin", str(tmp_path / "uses_cmath.cu")), 1, "hint:",
                         "#include <cuda/std/cmath>")
    (tmp_path / "cuda_std.cu").write_text('#include <cuda/std/cmath>\nextern "C" __device__ float '
                                          "user_transform(float x) { return cuda::std::sin(x); }\n")
    result = compile_only("--plugin", str(tmp_path / "cuda_std.cu"))
    assert result.returncode == 0, result.stderr


def test_a_plugin_finds_headers_next_to_it_not_in_the_current_folder(tmp_path):
    (tmp_path / "plugin" / "inc").mkdir(parents=True)
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "plugin" / "inc" / "level1.h").write_text('#include "level2.h"\n')  # next to it, in inc/
    (tmp_path / "plugin" / "inc" / "level2.h").write_text("#define SCALE 2.0f\n")
    (tmp_path / "elsewhere" / "inc").mkdir()
    (tmp_path / "elsewhere" / "inc" / "level1.h").write_text("this is not C++\n")
    plugin = tmp_path / "plugin" / "nested.cu"
    plugin.write_text('#include "inc/level1.h"\nextern "C" __device__ float user_transform(float x) '
                      "{ return SCALE * x; }\n")
    result = compile_only("--plugin", str(plugin), cwd=tmp_path / "elsewhere")
    assert result.returncode == 0, result.stdout + result.stderr


def test_a_large_header_compiles_as_nvrtc_takes_it(tmp_path):
    (tmp_path / "table.h").write_text("__device__ const float table[] = {"
                                      + ",".join(["1.0f"] * 300_000) + "};\n")  # about 1.5 MB
    (tmp_path / "big.cu").write_text('#include "table.h"\nextern "C" __device__ float user_transform(float x) '
                                     "{ return table[0] * x; }\n")
    assert (tmp_path / "table.h").stat().st_size > 1 << 20
    assert compile_only("--plugin", str(tmp_path / "big.cu")).returncode == 0


def test_a_plugin_whose_last_line_is_a_comment_without_a_newline_builds_every_way(tmp_path):
    plugin = tmp_path / "comment.cu"
    plugin.write_text(sample.DEFAULT_PLUGIN_SOURCE + "// the end, no newline")
    assert lto_build(cuda_plugin(plugin)).user_transform == "inlined (0 calls left)"
    cubin = sample.compile_whole_program(sample.LIBRARY_SOURCE + cuda_plugin(plugin).source, ARCH)
    assert "apply_transform" in read_cubin(bytes(cubin.code))[0]
