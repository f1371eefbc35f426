# SPDX-License-Identifier: BSD-3-Clause
# Copyright (c) 2026, the jitLtoLinking authors
"""--library FILE: the library shipped as LTO-IR, built once for the oldest GPU it supports. No GPU
needed."""

import json
import random
import subprocess
import sys

import pytest
from helpers import ARCH, EXAMPLES, ROOT, assert_clean_failure, compile_only, run_sample, sample


@pytest.fixture(scope="module")
def shipped(tmp_path_factory):
    """The library's LTO-IR for sm_75, as the README says to make it."""
    emit = tmp_path_factory.mktemp("ship") / "lib"
    result = run_sample("--compile-only", "--arch", "sm_75", "--emit", str(emit))
    assert result.returncode == 0, result.stderr
    return emit / "library.ltoir"


def lto_ir(tmp_path, name: str, source: str, arch: str = ARCH):
    """A file of LTO-IR compiled from `source` by the sample's own step."""
    path = tmp_path / name
    path.write_bytes(bytes(sample.compile_ltoir(source, arch).code))
    return path


def test_a_library_built_for_sm_75_links_for_sm_90_as_the_one_compiled_there(tmp_path, shipped):
    path = tmp_path / "run.json"
    result = compile_only("--library", str(shipped), "--plugin", str(EXAMPLES / "polynomial.cu"), "--json", str(path))
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"  [lto] the library's LTO-IR: --library {shipped} (not compiled here)" in result.stdout
    builds = {build["kind"]: build for build in json.loads(path.read_text())["builds"]}
    own = json.loads(compile_only("--plugin", str(EXAMPLES / "polynomial.cu"), "--json", "-").stdout)
    own_lto = next(build for build in own["builds"] if build["kind"] == "lto")
    assert builds["lto"]["user_transform"] == builds["swap"]["user_transform"] == "inlined (0 calls left)"
    assert (builds["lto"]["registers"], builds["lto"]["cubin_bytes"]) == (own_lto["registers"], own_lto["cubin_bytes"])


def test_a_library_for_a_newer_gpu_is_refused_with_the_rule(tmp_path):
    library = lto_ir(tmp_path, "sm_100.ltoir", sample.LIBRARY_SOURCE, "sm_100")
    assert_clean_failure(compile_only("--library", str(library)), 1, "arch newer than target arch",
                         "built for a newer GPU than this one", "oldest GPU it supports")


@pytest.mark.parametrize(("name", "source", "why"), [
    ("renamed.ltoir", sample.LIBRARY_SOURCE.replace("apply_transform(", "apply_transform2("),
     "it makes apply_transform2, not the kernel apply_transform alone"),
    ("pointer.ltoir", sample.POINTER_LIBRARY_SOURCE, "library_user_transform_pointer, not the kernel"),
    ("whole.ltoir", sample.LIBRARY_SOURCE + sample.DEFAULT_PLUGIN.source, "it already defines user_transform"),
    ("plugin.ltoir", sample.DEFAULT_PLUGIN.source, "it already defines user_transform"),
])
def test_lto_ir_that_is_not_the_library_is_refused(tmp_path, name, source, why):
    library = lto_ir(tmp_path, name, source)
    assert_clean_failure(compile_only("--library", str(library)), 2, f"--library {library}: is not the "
                         "library's LTO-IR", why, "--compile-only --arch sm_XX --emit DIR")


@pytest.mark.parametrize("content", [b"", b"//\n.version 9.0\n.target sm_90\n", b"\x7fELF\x02\x01\x01" + b"\0" * 60],
                         ids=["empty", "ptx", "cubin"])
def test_a_file_that_is_not_lto_ir_is_refused(tmp_path, content):
    (tmp_path / "lib.bin").write_bytes(content)
    assert_clean_failure(compile_only("--library", str(tmp_path / "lib.bin")), 2, "is not the library's LTO-IR",
                         "nvJitLink cannot read it")


def test_a_missing_library_or_a_folder_is_refused(tmp_path):
    assert_clean_failure(compile_only("--library", str(tmp_path / "nope.ltoir")), 2, "No such file")
    assert_clean_failure(compile_only("--library", str(tmp_path)), 2, "Is a directory")


def test_damaged_lto_ir_is_refused_never_a_crash(tmp_path):
    junk = tmp_path / "junk.ltoir"
    for seed in range(3):  # LTO-IR's first bytes, then noise
        junk.write_bytes(b"\xedCN\x7f" + random.Random(seed).randbytes(3000))
        assert_clean_failure(compile_only("--library", str(junk)), 2, "is not the library's LTO-IR")


def test_a_library_from_a_pipe_is_read_once(tmp_path, shipped):
    command = f"{sys.executable} {ROOT / 'jitLtoLinking.py'} --compile-only --arch {ARCH} --library <(cat {shipped})"
    result = subprocess.run(["bash", "-c", command], capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_trial_link_runs_nothing_from_the_current_folder(tmp_path, shipped):
    ran = tmp_path / "ran"
    for module in ("random", "platform", "calendar", "csv"):  # what the standard library imports
        (tmp_path / f"{module}.py").write_text(f"open({str(ran)!r}, 'w').write('{module}')\n")
    (tmp_path / "cuda").mkdir()
    (tmp_path / "cuda" / "__init__.py").write_text(f"open({str(ran)!r}, 'w').write('cuda')\n")
    result = compile_only("--library", str(shipped), cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert not ran.exists(), ran.read_text()
