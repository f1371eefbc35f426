# SPDX-License-Identifier: BSD-3-Clause
# Copyright (c) 2026, the jitLtoLinking authors
"""--library FILE: the library shipped as LTO-IR, built once for the oldest GPU it supports, and
checked by a trial link before it is used. No GPU needed."""

import json
import random
import subprocess
import sys

import pytest
from cuda.bindings import nvrtc
from helpers import ARCH, EXAMPLES, ROOT, assert_clean_failure, compile_only, sample
from jitlto_inputs import check_library, read_library


def test_the_library_the_sample_ships_links_for_every_architecture_from_sm_75(shipped):
    library = read_library(str(shipped))
    targets = [f"sm_{number}" for number in nvrtc.nvrtcGetSupportedArchs()[1] if number >= 75]
    assert {"sm_75", "sm_90"} <= set(targets)
    for arch in targets:  # Blackwell's too, whose link adds a helper function of its own
        assert check_library(library, arch) is library, arch


def test_a_library_built_for_sm_75_links_for_sm_90_as_the_one_compiled_there(shipped):
    plugin = str(EXAMPLES / "polynomial.cu")
    result = compile_only("--library", str(shipped), "--plugin", plugin, "--json", "-")
    assert f"  [lto] the library's LTO-IR: --library {shipped} (not compiled here)" in result.stderr
    own = json.loads(compile_only("--plugin", plugin, "--json", "-").stdout)["builds"]
    for theirs, mine in zip(json.loads(result.stdout)["builds"], own, strict=True):  # stdout: the record
        assert theirs["label"] == mine["label"] and theirs["user_transform"] == mine["user_transform"]
        assert (theirs["registers"], theirs["cubin_bytes"]) == (mine["registers"], mine["cubin_bytes"])


def test_a_library_for_a_newer_gpu_is_refused_with_the_rule(tmp_path):
    (tmp_path / "sm_100.ltoir").write_bytes(bytes(sample.compile_ltoir(sample.LIBRARY_SOURCE, "sm_100").code))
    assert_clean_failure(compile_only("--library", str(tmp_path / "sm_100.ltoir")), 1,
                         "built for a newer GPU", "oldest GPU it supports")


NO_CALL = 'extern "C" __global__ void apply_transform(const float* in, float* out, size_t n) { *out = *in; }'
NOT_LTO_IR = "is not the library's LTO-IR ("
NOT_THE_LIBRARY = {  # LTO-IR, bytes or nothing that is not the library; what the refusal says
    "no call": (sample.PLUGIN_CONTRACT + NO_CALL, [NOT_LTO_IR, "links without a plug-in"]),
    "defines user_transform": (sample.LIBRARY_SOURCE + sample.DEFAULT_PLUGIN_SOURCE, [NOT_LTO_IR, "user_transform"]),
    "another kernel": (sample.LIBRARY_SOURCE.replace("apply_transform(", "apply_transform2("),
                       [NOT_LTO_IR, "it makes no kernel apply_transform"]),
    "empty": (b"", [NOT_LTO_IR + "nvJitLink"]),  # nvJitLink's reason
    "junk": (b"\xedCN\x7f" + random.Random(0).randbytes(3000), [NOT_LTO_IR + "nvJitLink"]),  # magic, noise
    "missing": (None, ["cannot be read (No such file or directory)"]),
}


@pytest.mark.parametrize("what", sorted(NOT_THE_LIBRARY))
def test_what_is_not_the_library_is_refused(tmp_path, what):
    content, phrases = NOT_THE_LIBRARY[what]
    library = tmp_path / "library.ltoir"
    if content is not None:
        library.write_bytes(content if isinstance(content, bytes) else bytes(sample.compile_ltoir(content, ARCH).code))
    result = compile_only("--library", str(library))
    assert_clean_failure(result, 2, *(f"--library {library}: {phrase}" for phrase in phrases[:1]), *phrases[1:])
    assert content is None or "--compile-only --arch sm_XX --emit DIR" in result.stderr


def test_a_library_from_a_pipe_is_read_once(shipped):
    command = f"{sys.executable} {ROOT / 'jitLtoLinking.py'} --compile-only --arch {ARCH} --library <(cat {shipped})"
    result = subprocess.run(["bash", "-c", command], check=False, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_trial_link_runs_nothing_from_the_current_folder(tmp_path, shipped):
    ran = tmp_path / "ran"
    for module in ("random", "platform", "calendar", "csv", "json", "cuda/__init__"):
        (tmp_path / f"{module}.py").parent.mkdir(exist_ok=True)
        (tmp_path / f"{module}.py").write_text(f"open({str(ran)!r}, 'w').write('{module}')\n")
    result = compile_only("--library", str(shipped), cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert not ran.exists(), ran.read_text()
