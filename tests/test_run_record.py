# SPDX-License-Identifier: BSD-3-Clause
# Copyright (c) 2026, the jitLtoLinking authors
"""Utilities/run_record.py: one clock whose line adds up, and the JSON record written whole, also on failure."""

from __future__ import annotations

import json
import re
import time

import pytest
import run_record
import timeline
from helpers import utils


def test_the_timeline_counts_from_process_start_and_its_parts_add_up(monkeypatch):
    monkeypatch.setattr(timeline.Timeline, "first", True)  # as for the first run of a process
    clock = timeline.Timeline()
    assert clock.seconds["start-up"] > 0  # the interpreter and the imports came first
    assert timeline.Timeline().seconds["start-up"] < 0.01, "a second run in the process counts from its own start"
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
    clock = timeline.Timeline()
    with clock.phase("benchmark") as outer:
        time.sleep(0.02)
        with clock.phase("compile") as inner:
            time.sleep(0.05)
    assert outer.ms >= inner.ms + 15
    assert abs(clock.seconds["benchmark"] + clock.seconds["compile"] - outer.ms / 1e3) < 1e-6


def test_a_failure_inside_a_run_is_one_message_an_exit_code_and_a_json_record(tmp_path, capsys):
    path = tmp_path / "run.json"
    with run_record.Run("sample.py", ["--json", str(path)]) as run:
        run.record["elements"] = 10
        raise utils.UsageError("--device 3 does not exist")
    assert run.exit_code == 2
    assert capsys.readouterr().err == "sample.py: error: --device 3 does not exist\n"
    record = json.loads(path.read_text())
    assert record["exit_code"] == 2 and record["elements"] == 10 and "total" in record["timings_s"]


def test_ctrl_c_inside_a_run_is_exit_130(capsys):
    with run_record.Run("sample.py", []) as run:
        raise KeyboardInterrupt
    assert run.exit_code == 130 and capsys.readouterr().err == "sample.py: interrupted\n"


def test_other_errors_are_not_hidden():
    with pytest.raises(ZeroDivisionError), run_record.Run("sample.py", []):
        1 / 0  # noqa: B018 -- a bug in the sample stays a bug, with its traceback


def test_a_record_is_recognised_and_other_files_are_not(tmp_path):
    record, other, empty = tmp_path / "run.json", tmp_path / "other.json", tmp_path / "empty.json"
    run_record.write_json({"sample": "jitLtoLinking", "exit_code": 0}, str(record), None)
    other.write_text('{"sample": "something else"}')
    empty.write_text("")
    assert run_record.is_record(record) and run_record.is_record(empty)
    assert not run_record.is_record(other) and not run_record.is_record(tmp_path)
    with pytest.raises(utils.UsageError, match="is not a --json record of this sample"):
        run_record.write_json({"sample": "jitLtoLinking"}, str(other), None)
    assert other.read_text() == '{"sample": "something else"}'
