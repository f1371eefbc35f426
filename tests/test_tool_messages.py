# SPDX-License-Identifier: BSD-3-Clause
# Copyright (c) 2026, the jitLtoLinking authors
"""What NVRTC and nvJitLink say, made clean and put in the user's terms; the checks of the options' shapes."""

from __future__ import annotations

import argparse

import jitlto_builds
import jitlto_files
import pytest
from helpers import make_tools, utils


def test_tool_messages_lose_nul_and_control_bytes_but_keep_lines():
    assert jitlto_files.clean("a.cu(4): error\x00\n\tnext\x1b[31m red\x1b[0m\x07") == "a.cu(4): error\n\tnext red"


def test_a_compile_error_keeps_only_the_log_and_names_the_file():
    error = jitlto_files.compile_error("NVRTC_ERROR, compilation log:\n\nx.cu(2): error: bad", "x.cu")
    assert str(error) == "NVRTC could not compile x.cu:\nx.cu(2): error: bad" and error.exit_code == 1


def test_a_link_error_names_the_missing_symbol():
    error = jitlto_files.link_error("ERROR 4\nnvJitLink error log: Unresolved extern function 'user_transform'", "p.cu")
    assert "'user_transform' is not defined" in str(error) and "nvJitLink log:" in str(error)


def test_an_architecture_mismatch_says_what_a_library_ships():
    text = "ERROR_ARCH_MISMATCH (13)\nnvJitLink error log: ERROR NVVM_ERROR in LTOIR arch newer than target arch"
    error = jitlto_files.link_error(text, "default_plugin.cu")
    assert "built for a newer architecture than this target" in str(error)
    assert "oldest GPU it supports" in str(error) and "LTOIR arch newer than target arch" in str(error)


def test_libraries_that_cannot_be_loaded_are_an_install_problem(monkeypatch):
    def missing():
        raise RuntimeError("libnvJitLink.so.13: cannot open shared object file")

    monkeypatch.setattr(jitlto_builds.nvjitlink, "version", missing)
    with pytest.raises(utils.SampleError, match="the nvJitLink library could not be loaded .* pip install -r"):
        make_tools()


def test_cuda_headers_come_from_the_wheels():
    assert jitlto_builds.cuda_headers()


def test_architecture_checks_shape_and_support():
    assert jitlto_files.architecture("sm_90") == "sm_90"
    for text, phrase in (("sm_90a", "must look like"), ("compute_90", "must look like"), ("sm_91", "not supported")):
        with pytest.raises(argparse.ArgumentTypeError, match=phrase):
            jitlto_files.architecture(text)


def test_whole_numbers_and_paths():
    assert jitlto_files.whole_number(1, "x")("42") == 42
    with pytest.raises(argparse.ArgumentTypeError, match="at least 1"):
        jitlto_files.whole_number(1, "x")("0")
    with pytest.raises(argparse.ArgumentTypeError, match="must name a path"):
        jitlto_files.path_text(" ")
    assert jitlto_files.path_text("~/x") != "~/x" and jitlto_files.path_text("x").startswith("/")
