# SPDX-License-Identifier: BSD-3-Clause
# Copyright (c) 2026, the jitLtoLinking authors
"""The lesson's own compile and link functions, run for sm_90 and read back from the built code. No GPU needed."""

from __future__ import annotations

import json

import build_report
import pytest
import toolchain
from helpers import ARCH, PLUGINS, assert_clean_failure, lto_build, run_sample, sample, utils


def test_lto_inlines_the_default_plugin():
    build, _ = lto_build(sample.DEFAULT_PLUGIN)
    facts = build_report.read_cubin(build.cubin)
    assert "apply_transform" in facts.functions and "user_transform" not in facts.functions
    assert build.calls_left == 0 and build.inlined is True
    assert build.registers_from == "linker log" and 8 <= build.registers <= 255


def test_separately_compiled_machine_code_stays_a_call_and_every_call_site_is_counted():
    # Relocatable cubins linked without LTO: the same separation PTX linking
    # has, built without a driver. Nothing can inline across the two modules.
    tools = toolchain.Toolchain(ARCH)
    # compile_module makes a whole cubin (no -rdc) for target "cubin"; here both modules stay relocatable.
    options = sample.ProgramOptions(arch=ARCH, relocatable_device_code=True)
    library = sample.Program(sample.LIBRARY_SOURCE, "c++", options).compile("cubin")
    plugin = sample.Program(sample.DEFAULT_PLUGIN.translation_unit(), "c++", options).compile("cubin")
    build = build_report.Build("separate")
    build.code, build.link_log, build.link_ms = sample.link_modules(tools, [library, plugin], lto=False)
    build_report.read_report(build)
    assert build.inlined is False
    # The library calls user_transform for the 4 lanes of a vector, the head, the tail and the scalar loop.
    assert build.calls_left == 7 and build.registers > 0 and build.link_ms > 0


def test_a_recursive_plugin_cannot_be_inlined_and_is_reported_as_a_function():
    source = (
        'extern "C" __device__ float user_transform(float x) { return x > 1.0f ? 1.0f + user_transform(0.5f * x) : x; }'
    )
    build, _ = lto_build(sample.Plugin("recursive.cu", source))
    assert build.inlined is False
    assert build_report.read_cubin(build.cubin).has_function("user_transform")


def test_whole_program_build_needs_no_linker_and_inlines():
    tools = toolchain.Toolchain(ARCH)
    source = sample.LIBRARY_SOURCE + sample.DEFAULT_PLUGIN.translation_unit()
    code, record = sample.compile_module(tools, source, "whole_program.cu", "cubin")
    facts = build_report.read_cubin(bytes(code.code))
    assert record["ms"] > 0 and record["cache"] == "off"
    assert facts.calls_from("apply_transform", "user_transform") == 0 and "user_transform" not in facts.functions


def test_the_steps_compile_the_library_to_ltoir_once_and_the_swap_only_compiles_its_plugin(capsys):
    tools = toolchain.Toolchain(ARCH)
    ptx, lto, swap = sample.run_steps(tools, [sample.DEFAULT_PLUGIN], gpu=None)
    out = capsys.readouterr().out
    assert lto.inlined and swap.inlined and lto.code is not swap.code
    assert [c["module"] for c in swap.compiles] == ["swap_plugin.cu"]
    ltoir = [(c["module"], c["target"]) for c in tools.compiles if c["target"] == "ltoir"]
    assert ltoir == [("library.cu", "ltoir"), ("default_plugin.cu", "ltoir"), ("swap_plugin.cu", "ltoir")]
    assert "NVRTC compiled swap_plugin.cu in this step; library.cu to LTO-IR once in this run" in out


def test_a_plugin_named_like_the_library_does_not_count_as_the_library(tmp_path, capsys):
    tools = toolchain.Toolchain(ARCH)
    sample.run_steps(tools, [sample.Plugin("library.cu", sample.DEFAULT_PLUGIN_SOURCE)], gpu=None)
    assert "library.cu to LTO-IR once in this run" in capsys.readouterr().out


def test_the_linked_object_code_is_kept_as_it_came_from_the_linker():
    build, _ = lto_build(sample.DEFAULT_PLUGIN)
    assert build.code.code_type == "cubin" and build.cubin == bytes(build.code.code)


def test_a_plugin_using_math_constant_data_helpers_and_templates_links():
    plugin = sample.Plugin("math.cu", (PLUGINS / "math_constant_template.cu").read_text())
    build, _ = lto_build(plugin)
    assert build.inlined is True and len(build.cubin) > 0


@pytest.mark.parametrize("name", ["typo.cu", "empty.cu"])
def test_a_plugin_without_user_transform_shows_the_nvjitlink_log(name):
    result = run_sample("--compile-only", "--arch", ARCH, "--plugin", str(PLUGINS / name))
    assert_clean_failure(result, 1, "'user_transform' is not defined", "nvJitLink log:")
    log = result.stderr.split("nvJitLink log:", 1)[1]
    # LTO reports it from ptxas; PTX linking (where a driver lets it run first) from the linker.
    assert "Unresolved extern function 'user_transform'" in log or "Undefined reference to 'user_transform'" in log
    assert "\0" not in result.stderr


def test_a_plugin_with_another_signature_is_a_compile_error_naming_user_transform():
    result = run_sample("--compile-only", "--arch", ARCH, "--plugin", str(PLUGINS / "wrong_signature.cu"))
    assert_clean_failure(
        result, 1, "NVRTC could not compile wrong_signature.cu", "wrong_signature.cu(2)", '"user_transform"'
    )


def test_a_plugin_that_does_not_compile_shows_the_nvrtc_log_with_file_and_line_and_no_nul_byte():
    result = run_sample("--compile-only", "--arch", ARCH, "--plugin", str(PLUGINS / "syntax_error.cu"))
    assert_clean_failure(result, 1, "NVRTC could not compile syntax_error.cu", "syntax_error.cu(4): error")
    assert "\0" not in result.stdout + result.stderr


@pytest.mark.parametrize("name", ['it\'s "good".cu', "back\\slash.cu", "space name.cu"])
def test_a_plugin_file_name_with_quotes_or_backslashes_compiles_and_is_named_in_messages(tmp_path, name):
    good = tmp_path / name
    good.write_text(sample.DEFAULT_PLUGIN_SOURCE)
    assert run_sample("--compile-only", "--arch", ARCH, "--plugin", str(good)).returncode == 0
    broken = tmp_path / ("broken " + name)
    broken.write_text('extern "C" __device__ float user_transform(float x)\n{\n    return x +* 2.0f;\n}\n')
    result = run_sample("--compile-only", "--arch", ARCH, "--plugin", str(broken))
    assert_clean_failure(result, 1, f"{broken.name}(3): error")


def test_a_plugin_includes_headers_next_to_it_not_from_the_current_folder(tmp_path):
    plugin_dir, elsewhere = tmp_path / "plugin", tmp_path / "elsewhere"
    plugin_dir.mkdir(), elsewhere.mkdir()
    (plugin_dir / "helper.cuh").write_text("__device__ inline float twice(float x) { return 2.0f * x; }\n")
    (elsewhere / "helper.cuh").write_text("this is not C++\n")
    plugin = plugin_dir / "uses_helper.cu"
    plugin.write_text(
        '#include "helper.cuh"\nextern "C" __device__ float user_transform(float x) { return twice(x); }\n'
    )
    result = run_sample("--compile-only", "--arch", ARCH, "--plugin", str(plugin), cwd=elsewhere)
    assert result.returncode == 0, result.stdout + result.stderr


def test_cuda_headers_from_the_installed_wheels_are_found():
    source = (
        "#include <cuda_fp16.h>\n"
        'extern "C" __device__ float user_transform(float x) { return __half2float(__float2half(x) * __float2half(2.0f)); }\n'
    )
    build, _ = lto_build(sample.Plugin("half.cu", source))
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
    assert lto["registers_from"] == "linker log" and lto["registers"] > 0
    assert lto["user_transform_inlined"] is True and lto["user_transform_calls_left"] == 0
    assert [(c["module"], c["target"], c["cache"]) for c in swap["compiles"]] == [("swap_plugin.cu", "ltoir", "off")]
    assert swap["compiles"][0]["ms"] == swap["compile_ms"]
    assert record["exit_code"] == 0 and record["arch"] == ARCH


def test_compile_only_builds_a_working_custom_plugin():
    result = run_sample("--compile-only", "--arch", ARCH, "--plugin", str(PLUGINS / "math_constant_template.cu"))
    assert result.returncode == 0, result.stderr
    assert "[lto] compile" in result.stdout and "Done" in result.stdout


def test_json_to_standard_output_is_pure_json_and_the_story_goes_to_stderr():
    result = run_sample("--compile-only", "--arch", ARCH, "--json", "-")
    assert result.returncode == 0, result.stderr
    record = json.loads(result.stdout)
    assert "[2] LTO linking" in result.stderr
    for key in ("sample", "elements", "versions", "builds", "timings_s", "exit_code"):
        assert key in record
    for key in ("nvrtc", "nvjitlink", "cuda_core", "cupy", "numpy"):
        assert record["versions"][key]
    for build in record["builds"]:
        for key in (
            "build",
            "compile_ms",
            "link_ms",
            "cubin_bytes",
            "registers",
            "user_transform_inlined",
            "verification",
        ):
            assert key in build


def test_a_failed_build_still_writes_the_json_record_with_its_exit_code(tmp_path):
    path = tmp_path / "run.json"
    result = run_sample("--compile-only", "--arch", ARCH, "--plugin", str(PLUGINS / "typo.cu"), "--json", str(path))
    assert result.returncode == 1
    assert json.loads(path.read_text())["exit_code"] == 1


def test_the_driver_older_than_nvrtc_warning_becomes_one_explaining_line(capsys):
    import warnings

    import toolchain

    text = "The CUDA driver version is older than the backend version. The generated ptx will not be loadable."
    notes: set = set()
    for _ in range(2):
        with toolchain.driver_warning_note(notes):
            warnings.warn(text, RuntimeWarning, stacklevel=1)
            warnings.warn(text, RuntimeWarning, stacklevel=1)
    out = capsys.readouterr().out
    assert out.count("note:") == 1 and "nvJitLink turns the PTX into a cubin" in out


def test_other_compiler_warnings_are_passed_on():
    import warnings

    import toolchain

    with pytest.warns(RuntimeWarning, match="something else"), toolchain.driver_warning_note(set()):
        warnings.warn("something else", RuntimeWarning, stacklevel=1)
