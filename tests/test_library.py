# SPDX-License-Identifier: BSD-3-Clause
# Copyright (c) 2026, the jitLtoLinking authors
"""--library FILE: the library shipped as LTO-IR, built once for the oldest GPU it supports, and
checked by a trial link in a child process before it is used. No GPU needed."""

import os
import random
import re
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import pytest
from cuda.bindings import nvrtc
from helpers import ARCH, EXAMPLES, ROOT, assert_clean_failure, compile_only, report_lines, sample
from jitlto_cli import check_library


def test_the_shipped_library_links_for_every_architecture_from_sm_75(shipped):
    targets = [f"sm_{number}" for number in nvrtc.nvrtcGetSupportedArchs()[1] if number >= 75]
    assert {"sm_75", "sm_90", "sm_100"} <= set(targets)  # Blackwell's link adds a function
    with ThreadPoolExecutor() as pool:  # a trial link each, in a child process: side by side
        linked = pool.map(lambda arch: bytes(check_library(str(shipped), arch).code), targets)
        assert list(linked) == [shipped.read_bytes()] * len(targets)


def test_a_library_built_for_sm_75_links_for_sm_90_as_the_one_compiled_there(shipped):
    plugin = str(EXAMPLES / "polynomial.cu")
    theirs = compile_only("--library", str(shipped), "--plugin", plugin)
    mine = compile_only("--plugin", plugin)
    assert theirs.returncode == mine.returncode == 0, theirs.stderr + mine.stderr
    assert f"--library {shipped}: the library's LTO-IR, trial-linked for {ARCH}" in theirs.stdout
    for label in ("lto polynomial.cu", "swap"):  # cubin size, registers, user_transform
        figures = [[re.sub(r"compile [\d.]+ ms, link [\d.]+ ms, ", "", line)  # not the times
                    for line in report_lines(result, label)] for result in (theirs, mine)]
        assert figures[0] == figures[1] != [], label


def test_a_library_for_a_newer_gpu_is_refused_with_the_rule(tmp_path):
    newer = tmp_path / "sm_100.ltoir"
    newer.write_bytes(bytes(sample.compile_ltoir(sample.LIBRARY_SOURCE, "sm_100").code))
    assert_clean_failure(compile_only("--library", str(newer)), 1, "built for a newer GPU",
                         "oldest GPU it supports")


NO_CALL = ('extern "C" __global__ void apply_transform(const float* in, float* out, size_t n) '
           "{ *out = *in; }")
NOT_LTO_IR = "is not the library's LTO-IR ("
NOT_THE_LIBRARY = {  # LTO-IR (from a source), bytes or nothing; what the refusal says
    "no call": (sample.PLUGIN_CONTRACT + NO_CALL, [NOT_LTO_IR, "links without a plug-in"]),
    "defines user_transform": (sample.LIBRARY_SOURCE + sample.DEFAULT_PLUGIN_SOURCE,
                               [NOT_LTO_IR, "user_transform"]),
    "another kernel": (sample.LIBRARY_SOURCE.replace("apply_transform(", "apply_other("),
                       [NOT_LTO_IR, "it makes no kernel apply_transform"]),
    "empty": (b"", [NOT_LTO_IR + "nvJitLink"]),
    "junk": (b"\xedCN\x7f" + random.Random(0).randbytes(3000), [NOT_LTO_IR + "nvJitLink"]),
    "missing": (None, ["cannot be read (No such file or directory)"]),
}


@pytest.mark.parametrize("what", sorted(NOT_THE_LIBRARY))
def test_what_is_not_the_library_is_refused_with_the_reason(tmp_path, what):
    content, phrases = NOT_THE_LIBRARY[what]
    library = tmp_path / "library.ltoir"
    if isinstance(content, str):
        content = bytes(sample.compile_ltoir(content, ARCH).code)
    if content is not None:
        library.write_bytes(content)
    result = compile_only("--library", str(library))
    assert_clean_failure(result, 2, f"--library {library}: {phrases[0]}", *phrases[1:])


def test_a_library_from_a_pipe_is_refused_at_once(shipped):
    command = (f"{sys.executable} {ROOT / 'jitLtoLinking.py'} --compile-only --arch "
               f"{ARCH} --library <(cat {shipped})")
    result = subprocess.run(["bash", "-c", command], capture_output=True, text=True, timeout=600)
    assert_clean_failure(result, 2, "is not a regular file")
    assert "[1]" not in result.stdout


def test_the_trial_link_runs_nothing_from_the_current_folder_nor_reads_what_python_prints(
        tmp_path, shipped):
    ran = tmp_path / "ran"
    for module in ("random", "json", "cuda/__init__"):
        (tmp_path / f"{module}.py").parent.mkdir(exist_ok=True)
        (tmp_path / f"{module}.py").write_text(f"open({str(ran)!r}, 'w').write('{module}')\n")
    (tmp_path / "site").mkdir()
    (tmp_path / "site" / "sitecustomize.py").write_text("print('hello as Python starts')\n")
    path = os.pathsep.join(filter(None, [str(tmp_path / "site"), os.environ.get("PYTHONPATH")]))
    result = compile_only("--library", str(shipped), cwd=tmp_path, env={"PYTHONPATH": path})
    assert result.returncode == 0 and not ran.exists(), result.stdout + result.stderr
    assert result.stdout.startswith("hello as Python starts\n")  # the run's Python printed it too
    assert f"trial-linked for {ARCH}" in result.stdout
