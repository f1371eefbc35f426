# SPDX-License-Identifier: BSD-3-Clause
# Copyright (c) 2026, the jitLtoLinking authors
"""Real NVRTC and nvJitLink builds for sm_90, read back from the built code. No GPU or driver needed."""

from __future__ import annotations

import json

import pytest
from conftest import PLUGINS, assert_clean_failure, run_sample, sample, utils

ARCH = "sm_90"


def lto_build(plugin: sample.Plugin, cache=None):
    """Compile library and plug-in to LTO-IR, link with LTO, and read the report off the cubin."""
    builder = sample.Builder(ARCH, cache)
    library = builder.compile(sample.LIBRARY_SOURCE, "library.cu", "ltoir")
    plugin_code, _ = builder.compile(plugin.translation_unit(), plugin.name, "ltoir")
    build = sample.Build("lto")
    build.cubin, build.link_ms, build.link_log = builder.link([library[0], plugin_code], lto=True)
    sample.read_build_report(build, device_kernel=None)
    return build, builder


def test_lto_inlines_the_default_plugin():
    build, _ = lto_build(sample.DEFAULT_PLUGIN)
    facts = utils.read_cubin(build.cubin)
    assert "apply_transform" in facts.functions
    assert "user_transform" not in facts.functions
    assert build.calls_left == 0 and build.inlined is True


def test_separately_compiled_machine_code_stays_a_call_and_every_call_site_is_counted():
    # Relocatable cubins linked without LTO: the same separation PTX linking
    # has, built without a driver. Nothing can inline across the two modules.
    def relocatable_cubin(source, name):
        options = sample.ProgramOptions(arch=ARCH, relocatable_device_code=True, name=name)
        return sample.Program(source, "c++", options).compile("cubin")

    library = relocatable_cubin(sample.LIBRARY_SOURCE, "library.cu")
    plugin = relocatable_cubin(sample.DEFAULT_PLUGIN.translation_unit(), "plugin.cu")
    build = sample.Build("separate")
    build.cubin, _, build.link_log = sample.Builder(ARCH).link([library, plugin], lto=False)
    sample.read_build_report(build, device_kernel=None)
    assert build.inlined is False
    # The library calls user_transform for the 4 lanes of a vector, the head, the tail and the scalar loop.
    assert build.calls_left == 7
    assert build.registers > 0


def test_a_recursive_plugin_cannot_be_inlined_and_is_reported_as_a_function():
    source = (
        'extern "C" __device__ float user_transform(float x) { return x > 1.0f ? 1.0f + user_transform(0.5f * x) : x; }'
    )
    build, _ = lto_build(sample.Plugin("recursive.cu", source))
    assert build.inlined is False
    assert utils.read_cubin(build.cubin).has_function("user_transform")


def test_registers_come_from_the_linker_log_without_a_gpu():
    build, _ = lto_build(sample.DEFAULT_PLUGIN)
    assert build.registers_from == "linker log"
    assert "Used" in build.link_log and 8 <= build.registers <= 255


def test_register_reading_takes_the_final_report_of_a_ptx_link():
    log = (
        "ptxas info    : Function properties for apply_transform\n"
        "ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n"
        "ptxas info    : Used 28 registers, used 0 barriers\n"
        "info    : Function properties for 'user_transform':\ninfo    : used 9 registers\n"
        "info    : Function properties for 'apply_transform':\n"
        "info    : used 34 registers, used 4 barriers, 0 stack, 0 bytes smem\n"
    )
    assert utils.registers_from_link_log(log, "apply_transform") == 34
    assert utils.registers_from_link_log(log, "user_transform") == 9
    assert utils.registers_from_link_log(log, "missing_kernel") is None


def test_read_cubin_rejects_what_is_not_a_cubin():
    with pytest.raises(ValueError):
        utils.read_cubin(b"not an ELF file at all")


def test_whole_program_build_needs_no_linker_and_inlines():
    builder = sample.Builder(ARCH)
    source = sample.LIBRARY_SOURCE + sample.DEFAULT_PLUGIN.translation_unit()
    cubin, record = builder.compile(source, "whole_program.cu", "cubin")
    facts = utils.read_cubin(bytes(cubin.code))
    assert record["ms"] > 0
    assert facts.calls_from("apply_transform", "user_transform") == 0
    assert "user_transform" not in facts.functions


def test_swap_relinks_the_library_ltoir_without_compiling_it_again():
    builder = sample.Builder(ARCH)
    library = builder.compile(sample.LIBRARY_SOURCE, "library.cu", "ltoir")
    for plugin in (sample.DEFAULT_PLUGIN, sample.SWAP_PLUGIN):
        code, _ = builder.compile(plugin.translation_unit(), plugin.name, "ltoir")
        cubin, _, _ = builder.link([library[0], code], lto=True)
        assert utils.read_cubin(cubin).calls_from("apply_transform", "user_transform") == 0
    assert builder.compiled == [
        ("library.cu", "ltoir"),
        ("default_plugin.cu", "ltoir"),
        ("swap_plugin.cu", "ltoir"),
    ]


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


def test_a_plugin_that_does_not_compile_shows_the_nvrtc_log_with_file_and_line():
    result = run_sample("--compile-only", "--arch", ARCH, "--plugin", str(PLUGINS / "syntax_error.cu"))
    assert_clean_failure(result, 1, "NVRTC could not compile syntax_error.cu", "syntax_error.cu(4): error")


def test_compile_only_builds_and_reports_without_a_gpu(tmp_path):
    result = run_sample("--compile-only", "--arch", ARCH, "--json", str(tmp_path / "run.json"))
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "[2] LTO linking (link-time optimization)" in out and "[3] Plug-in swap" in out
    assert "[lto] compile" in out and "user_transform inlined (0 calls left)" in out
    assert "not compiled again" in out and "library.cu to LTO-IR 1 time(s) in this run" in out
    assert "Built and reported without launching. Done" in out
    record = json.loads((tmp_path / "run.json").read_text())
    ptx, lto, swap = record["builds"]
    if utils.driver_version() is None:
        assert "[ptx] skipped" in out and "no driver" in ptx["skipped"]
    assert lto["registers_from"] == "linker log" and lto["registers"] > 0
    assert lto["user_transform_inlined"] is True and lto["user_transform_calls_left"] == 0
    assert swap["compiles"] == [
        {"module": "swap_plugin.cu", "target": "ltoir", "cache": "off", "ms": swap["compile_ms"]}
    ]
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
    for key in ("nvrtc", "cuda_core", "cupy", "numpy"):
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


def test_the_program_cache_misses_then_hits_and_changes_miss(tmp_path):
    cache_dir = tmp_path / "cache"

    def run(*extra):
        result = run_sample("--compile-only", "--arch", ARCH, "--cache-dir", str(cache_dir), "--json", "-", *extra)
        assert result.returncode == 0, result.stderr
        return json.loads(result.stdout), result.stderr

    def states(record):
        return {(c["module"], c["target"]): c["cache"] for b in record["builds"] for c in b["compiles"]}

    first, _ = run()
    lto_modules = {("library.cu", "ltoir"), ("default_plugin.cu", "ltoir"), ("swap_plugin.cu", "ltoir")}
    assert lto_modules <= set(states(first)) and set(states(first).values()) == {"miss"}

    second, story = run()
    assert states(second) == {key: "hit" for key in states(first)}
    compiles = [c for b in second["builds"] for c in b["compiles"]]
    assert all(c["saved_ms"] is not None and c["saved_ms"] >= 0 for c in compiles)
    assert "cache hit: library.cu" in story and "saved" in story

    changed = tmp_path / "changed.cu"
    changed.write_text(sample.DEFAULT_PLUGIN_SOURCE.replace("3.0f", "4.0f"))
    third, _ = run("--plugin", str(changed))
    for (module, target), state in states(third).items():
        assert state == ("miss" if module == "changed.cu" else "hit"), (module, target)

    other_arch, _ = run("--arch", "sm_80")
    assert set(states(other_arch).values()) == {"miss"}


def test_the_cache_key_follows_the_options(tmp_path):
    cache = sample.FileStreamProgramCache(tmp_path)
    first = sample.Builder(ARCH, cache, cache_dir=tmp_path).compile(
        "__device__ int f() { return 1; }", "m.cu", "ltoir"
    )[1]
    again = sample.Builder(ARCH, cache, cache_dir=tmp_path).compile(
        "__device__ int f() { return 1; }", "m.cu", "ltoir"
    )[1]
    as_cubin = sample.Builder(ARCH, cache, cache_dir=tmp_path).compile(
        "__device__ int f() { return 1; }", "m.cu", "cubin"
    )[1]
    assert (first["cache"], again["cache"], as_cubin["cache"]) == ("miss", "hit", "miss")


def test_the_driver_older_than_nvrtc_warning_becomes_one_explaining_line(capsys):
    import warnings

    text = (
        "The CUDA driver version is older than the backend version. "
        "The generated ptx will not be loadable by the current driver."
    )
    caught = [warnings.WarningMessage(RuntimeWarning(text), RuntimeWarning, "x.py", 1) for _ in range(2)]
    builder = sample.Builder(ARCH)
    builder.explain_driver_warning(caught)
    builder.explain_driver_warning(caught)
    out = capsys.readouterr().out
    assert out.count("note:") == 1 and "nvJitLink turns the PTX into a cubin" in out


def test_other_compiler_warnings_are_passed_on():
    import warnings

    other = warnings.WarningMessage(RuntimeWarning("something else"), RuntimeWarning, "x.py", 1)
    with pytest.warns(RuntimeWarning, match="something else"):
        sample.Builder(ARCH).explain_driver_warning([other])


def test_a_failed_build_still_writes_the_json_record_with_its_exit_code(tmp_path):
    path = tmp_path / "run.json"
    result = run_sample("--compile-only", "--arch", ARCH, "--plugin", str(PLUGINS / "typo.cu"), "--json", str(path))
    assert result.returncode == 1
    assert json.loads(path.read_text())["exit_code"] == 1
