# SPDX-License-Identifier: BSD-3-Clause
# Copyright (c) 2026, the jitLtoLinking authors
"""Utilities/run_record.py: one clock whose line adds up, and the JSON record written whole, also on failure."""

from __future__ import annotations

import json
import re
import time

import pytest
import run_record
from helpers import utils


def test_the_timeline_counts_from_process_start_and_its_parts_add_up():
    clock = run_record.Timeline()
    assert clock.seconds["start-up"] > 0  # the interpreter and the imports came first
    with clock.phase("compile") as lap:
        time.sleep(0.05)
    with clock.phase("compile"):
        time.sleep(0.02)
    assert 45 <= lap.ms <= 500 and clock.seconds["compile"] >= 0.07
    line = clock.line()
    total = float(line.split()[2])
    parts = [float(s) for s in re.findall(r"([\d.]+) s", line.split(": ", 1)[1])]
    assert abs(sum(parts) - total) <= 0.02
    assert line.split(": ", 1)[1].startswith("start-up ")


def test_a_phase_inside_another_counts_only_under_its_own_name():
    clock = run_record.Timeline()
    with clock.phase("benchmark") as outer:
        time.sleep(0.02)
        with clock.phase("compile") as inner:
            time.sleep(0.05)
    assert outer.ms >= inner.ms + 15
    assert abs(clock.seconds["benchmark"] + clock.seconds["compile"] - outer.ms / 1e3) < 1e-6


def test_a_failure_inside_a_run_is_one_message_an_exit_code_and_a_json_record(tmp_path, capsys):
    path = tmp_path / "run.json"
    with run_record.Run("sample.py", str(path), 10) as run:
        raise utils.UsageError("--device 3 does not exist")
    assert run.exit_code == 2
    assert capsys.readouterr().err == "sample.py: error: --device 3 does not exist\n"
    record = json.loads(path.read_text())
    assert record["exit_code"] == 2 and record["elements"] == 10 and "total" in record["timings_s"]


def test_ctrl_c_inside_a_run_is_exit_130(capsys):
    with run_record.Run("sample.py", None, 1) as run:
        raise KeyboardInterrupt
    assert run.exit_code == 130 and capsys.readouterr().err == "sample.py: interrupted\n"


def test_other_errors_are_not_hidden():
    with pytest.raises(ZeroDivisionError), run_record.Run("sample.py", None, 1):
        1 / 0  # noqa: B018 -- a bug in the sample stays a bug, with its traceback


def test_the_output_path_may_not_be_a_directory_or_an_input(tmp_path):
    source = tmp_path / "plugin.cu"
    source.write_text("x")
    for path, phrase in ((str(tmp_path), "is a directory"), (str(source), "is an input"), ("", "is a directory")):
        with pytest.raises(utils.UsageError, match=phrase):
            run_record.check_output_path(path, [source])
    run_record.check_output_path(str(tmp_path / "new.json"), [source])
