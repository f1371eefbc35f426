# SPDX-License-Identifier: BSD-3-Clause
# Copyright (c) 2026, the jitLtoLinking authors
"""The lesson's own steps, run for sm_90 and read back from the built code. No GPU needed."""

from __future__ import annotations

import json

import pytest
from jitlto_gpu import read_cubin
from helpers import (
    ARCH, EXAMPLES, PLUGINS, assert_clean_failure, cuda_plugin, lto_build, make_tools, run_sample, sample, utils,
)


def test_lto_inlines_the_default_plugin():
    build, _ = lto_build(sample.DEFAULT_PLUGIN)
    functions, _, _ = read_cubin(bytes(build.code.code))
    assert "apply_transform" in functions and "user_transform" not in functions
    assert build.calls_left == 0 and build.inlined is True
    assert build.registers_from == "cubin" and 8 <= build.registers <= 255


def test_a_recursive_plugin_cannot_be_inlined_and_is_reported_as_a_function():
    source = 'extern "C" __device__ float user_transform(float x) { return x > 1.0f ? 1.0f + user_transform(0.5f * x) : x; }'
    build, _ = lto_build(sample.Plugin.cuda("recursive.cu", source, sample.PLUGIN_CONTRACT))
    assert build.inlined is False
    assert any(name.endswith("user_transform") for name in read_cubin(bytes(build.code.code))[0])


def test_whole_program_build_needs_no_linker_and_inlines():
    tools = make_tools()
    whole = sample.replace(sample.DEFAULT_PLUGIN, name="whole_program.cu",
                           source=sample.LIBRARY_SOURCE + sample.DEFAULT_PLUGIN.source)
    code = tools.compile(sample.compile_whole_program, whole)
    build = tools.report(tools.new_build("whole program", sample.DEFAULT_PLUGIN, [code], code))
    assert build.link_ms is None and [c["module"] for c in build.compiles] == ["whole_program.cu"]
    functions, calls, _ = read_cubin(bytes(build.code.code))
    assert calls.get("apply_transform", {}) == {} and "user_transform" not in functions
    assert build.inlined is True


def test_the_steps_compile_the_library_to_ltoir_once_and_the_swap_only_compiles_its_plugin(capsys):
    tools = make_tools()
    library_ltoir = sample.lto_linking(tools, [sample.DEFAULT_PLUGIN], None, None)
    sample.plugin_swap(tools, library_ltoir, None)
    out = capsys.readouterr().out
    lto, swap = tools.find("lto", sample.DEFAULT_PLUGIN), tools.find("swap", sample.SWAP_PLUGIN)
    assert lto.inlined and swap.inlined and lto.code is not swap.code
    assert [c["module"] for c in swap.compiles] == ["swap_plugin.cu"]
    assert [c["module"] for c in lto.compiles] == ["library.cu", "default_plugin.cu"]
    ltoir = [c["module"] for b in tools.builds for c in b.compiles if c["target"] == "ltoir"]
    assert ltoir == ["library.cu", "default_plugin.cu", "swap_plugin.cu"]
    assert "NVRTC compiled swap_plugin.cu in this step; library.cu to LTO-IR once in this run" in out
    assert swap.inputs[0] is library_ltoir


def test_with_several_plugins_the_library_compile_is_counted_once(capsys):
    plugins = [cuda_plugin(EXAMPLES / "default.cu"), cuda_plugin(EXAMPLES / "polynomial.cu")]
    tools = make_tools(several_plugins=True)
    sample.lto_linking(tools, plugins, None, None)
    first, second = (tools.find("lto", plugin) for plugin in plugins)
    assert [c["module"] for c in first.compiles] == ["library.cu", "default.cu"]
    assert [c["module"] for c in second.compiles] == ["polynomial.cu"]


def test_a_plugin_named_like_the_library_does_not_count_as_the_library(capsys):
    tools = make_tools()
    impostor = sample.Plugin.cuda("library.cu", sample.DEFAULT_PLUGIN_SOURCE, sample.PLUGIN_CONTRACT)
    sample.plugin_swap(tools, sample.lto_linking(tools, [impostor], None, None), None)
    assert "library.cu to LTO-IR once in this run" in capsys.readouterr().out


def test_a_plugin_using_math_constant_data_helpers_and_templates_links():
    build, _ = lto_build(cuda_plugin(PLUGINS / "math_constant_template.cu"))
    assert build.inlined is True and build.cubin_bytes == len(bytes(build.code.code)) > 0


@pytest.mark.parametrize("name", ["typo.cu", "empty.cu"])
def test_a_plugin_without_user_transform_shows_the_nvjitlink_log(name):
    result = run_sample("--compile-only", "--arch", ARCH, "--plugin", str(PLUGINS / name))
    assert_clean_failure(result, 1, "'user_transform' is not defined", "nvJitLink log:")
    log = result.stderr.split("nvJitLink log:", 1)[1]
    # LTO reports it from ptxas; PTX linking (where a driver lets it run first) from the linker.
    assert "Unresolved extern function 'user_transform'" in log or "Undefined reference to 'user_transform'" in log
    assert "\0" not in result.stderr


def test_a_forceinline_user_transform_is_explained_not_just_called_undefined(tmp_path):
    plugin = tmp_path / "forced.cu"
    plugin.write_text('extern "C" __device__ __forceinline__ float user_transform(float x) { return 2.0f * x; }\n')
    result = run_sample("--compile-only", "--arch", ARCH, "--plugin", str(plugin))
    assert_clean_failure(result, 1, "'user_transform' is not defined", "not inline or __forceinline__")


def test_a_plugin_with_another_signature_is_a_compile_error_naming_user_transform():
    result = run_sample("--compile-only", "--arch", ARCH, "--plugin", str(PLUGINS / "wrong_signature.cu"))
    assert_clean_failure(result, 1, "NVRTC could not compile wrong_signature.cu", "wrong_signature.cu(2)", '"user_transform"')


def test_a_plugin_that_does_not_compile_shows_the_nvrtc_log_with_file_and_line_and_no_nul_byte():
    result = run_sample("--compile-only", "--arch", ARCH, "--plugin", str(PLUGINS / "syntax_error.cu"))
    assert_clean_failure(result, 1, "NVRTC could not compile syntax_error.cu", "syntax_error.cu(4): error")
    assert "\0" not in result.stdout + result.stderr


def test_including_cmath_gets_a_hint_that_cuda_math_is_built_in(tmp_path):
    plugin = tmp_path / "uses_cmath.cu"
    plugin.write_text('#include <cmath>\nextern "C" __device__ float user_transform(float x) { return std::sin(x); }\n')
    result = run_sample("--compile-only", "--arch", ARCH, "--plugin", str(plugin))
    assert_clean_failure(result, 1, 'cannot open source file "cmath"', "hint:", "<cuda/std/cmath>")


def test_nvrtc_warnings_are_shown_under_the_build(tmp_path):
    plugin = tmp_path / "unused.cu"
    plugin.write_text('extern "C" __device__ float user_transform(float x)\n{\n    int unused = 3;\n    return x;\n}\n')
    result = run_sample("--compile-only", "--arch", ARCH, "--plugin", str(plugin))
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    at = lines.index("  [lto] NVRTC warned about unused.cu:")
    assert lines[at - 1].startswith("  [lto] compile") and "unused.cu(3): warning #177-D" in lines[at + 1]


@pytest.mark.parametrize("name", ['it\'s "good".cu', "back\\slash.cu", "space name.cu"])
def test_a_plugin_file_name_with_quotes_or_backslashes_compiles_and_is_named_in_messages(tmp_path, name):
    good = tmp_path / name
    good.write_text(sample.DEFAULT_PLUGIN_SOURCE)
    assert run_sample("--compile-only", "--arch", ARCH, "--plugin", str(good)).returncode == 0
    broken = tmp_path / ("broken " + name)
    broken.write_text('extern "C" __device__ float user_transform(float x)\n{\n    return x +* 2.0f;\n}\n')
    result = run_sample("--compile-only", "--arch", ARCH, "--plugin", str(broken))
    assert_clean_failure(result, 1, f"{broken.name}(3): error")


def test_a_plugin_whose_name_is_not_utf8_builds_and_is_named_with_escapes(tmp_path):
    plugin = tmp_path / "caf\udce9.cu"  # the byte 0xE9: 'é' in Latin-1, not UTF-8
    plugin.write_text(sample.DEFAULT_PLUGIN_SOURCE)
    result = run_sample("--compile-only", "--arch", ARCH, "--plugin", str(plugin), env={"LC_ALL": "C"})
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Traceback" not in result.stderr


def test_a_plugin_includes_headers_next_to_it_not_from_the_current_folder(tmp_path):
    plugin_dir, elsewhere = tmp_path / "plugin", tmp_path / "elsewhere"
    plugin_dir.mkdir(), elsewhere.mkdir()
    (plugin_dir / "helper.cuh").write_text("__device__ inline float twice(float x) { return 2.0f * x; }\n")
    (elsewhere / "helper.cuh").write_text("this is not C++\n")
    plugin = plugin_dir / "uses_helper.cu"
    plugin.write_text('#include "helper.cuh"\nextern "C" __device__ float user_transform(float x) { return twice(x); }\n')
    result = run_sample("--compile-only", "--arch", ARCH, "--plugin", str(plugin), cwd=elsewhere)
    assert result.returncode == 0, result.stdout + result.stderr


def test_a_header_in_a_subfolder_finds_its_sibling_as_nvcc_does(tmp_path):
    # inc/level1.h includes "level2.h": the one next to it, in inc/, as nvcc and NVRTC look first.
    (tmp_path / "inc").mkdir()
    (tmp_path / "inc" / "level1.h").write_text('#include "level2.h"\n')
    (tmp_path / "inc" / "level2.h").write_text("#define SCALE 2.0f\n")
    plugin = tmp_path / "nested.cu"
    plugin.write_text('#include "inc/level1.h"\nextern "C" __device__ float user_transform(float x) { return SCALE * x; }\n')
    result = run_sample("--compile-only", "--arch", ARCH, "--plugin", str(plugin))
    assert result.returncode == 0, result.stdout + result.stderr


def test_cuda_headers_from_the_installed_wheels_are_found():
    source = (
        "#include <cuda_fp16.h>\n"
        'extern "C" __device__ float user_transform(float x) { return __half2float(__float2half(x) * __float2half(2.0f)); }\n'
    )
    build, _ = lto_build(sample.Plugin.cuda("half.cu", source, sample.PLUGIN_CONTRACT, path=PLUGINS / "half.cu"))
    assert build.inlined is True


def test_compile_only_builds_and_reports_without_a_gpu(tmp_path):
    result = run_sample("--compile-only", "--arch", ARCH, "--json", str(tmp_path / "run.json"))
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "[2] LTO linking (link-time optimization)" in out and "[3] Plug-in swap" in out
    assert "[lto] compile" in out and "user_transform inlined (0 calls left)" in out
    assert "not compiled again" in out and "library.cu to LTO-IR once in this run" in out
    assert "Built and reported without launching. Done" in out
    record = json.loads((tmp_path / "run.json").read_text())
    ptx, lto, swap = record["builds"]
    if utils.driver_version() is None:
        assert "[ptx] skipped" in out and "no driver" in ptx["skipped"]
    assert lto["registers_from"] == "cubin" and lto["registers"] > 0
    assert lto["user_transform_inlined"] is True and lto["user_transform_calls_left"] == 0
    assert [(c["module"], c["target"], c["cache"]) for c in swap["compiles"]] == [("swap_plugin.cu", "ltoir", "off")]
    assert swap["compiles"][0]["ms"] == swap["compile_ms"] and swap["link_cache"] is None
    assert record["exit_code"] == 0 and record["arch"] == ARCH


def test_json_to_standard_output_is_pure_json_and_the_story_goes_to_stderr():
    result = run_sample("--compile-only", "--arch", ARCH, "--json", "-")
    assert result.returncode == 0, result.stderr
    record = json.loads(result.stdout)
    assert "[2] LTO linking" in result.stderr
    for key in ("sample", "elements", "versions", "builds", "timings_s", "exit_code"):
        assert key in record
    for key in ("nvrtc", "nvjitlink", "cuda_core", "numpy"):
        assert record["versions"][key]
    for build in record["builds"]:
        for key in ("build", "compile_ms", "link_ms", "cubin_bytes", "registers", "user_transform_inlined", "verification"):
            assert key in build


def test_a_failed_build_still_writes_the_json_record_with_its_exit_code(tmp_path):
    path = tmp_path / "run.json"
    result = run_sample("--compile-only", "--arch", ARCH, "--plugin", str(PLUGINS / "typo.cu"), "--json", str(path))
    assert result.returncode == 1
    assert json.loads(path.read_text())["exit_code"] == 1


def test_the_json_record_holds_every_build_printed_before_a_later_plugin_failed(tmp_path):
    folder = tmp_path / "plugins"
    folder.mkdir()
    (folder / "a_good.cu").write_text(sample.DEFAULT_PLUGIN_SOURCE)
    (folder / "b_broken.cu").write_text('extern "C" __device__ float user_transform(float x) { return x +* 2.0f; }\n')
    path = tmp_path / "run.json"
    result = run_sample("--compile-only", "--arch", ARCH, "--plugin", str(folder), "--json", str(path))
    # With a driver step [1] builds first, and fails there; without one, step [2] does.
    printed = [line.split("]")[0][3:] for line in result.stdout.splitlines() if line.startswith("  [") and " compile " in line]
    assert result.returncode == 1 and printed and all(label.endswith("a_good.cu") for label in printed)
    builds = json.loads(path.read_text())["builds"]
    assert set(printed) <= {b["build"] for b in builds}
