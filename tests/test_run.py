# SPDX-License-Identifier: BSD-3-Clause
# Copyright (c) 2026, the jitLtoLinking authors
"""Utilities/jitlto_run.py: a clock, and one line, an exit code and the record for what ends a run."""

from __future__ import annotations

import json
import time

import jitlto_run
import pytest
from helpers import utils


def test_the_clock_counts_from_the_start_of_the_run():
    record = jitlto_run.Record(None)
    before = record.seconds()
    time.sleep(0.05)
    assert 0.05 <= record.seconds() - before < 5


def test_a_failure_inside_a_run_is_one_message_an_exit_code_and_a_json_record(tmp_path, capsys):
    path = tmp_path / "run.json"
    with jitlto_run.Run(["--json", str(path)]) as run:
        run.record.approved = True  # as once the command line is checked
        run.record.data["elements"] = 10
        raise utils.UsageError("--device 3 does not exist")
    assert run.exit_code == 2
    assert capsys.readouterr().err == "jitLtoLinking.py: error: --device 3 does not exist\n"
    record = json.loads(path.read_text())
    assert record["exit_code"] == 2 and record["elements"] == 10 and "total" in record["timings_s"]


def test_ctrl_c_inside_a_run_is_exit_130(capsys):
    with jitlto_run.Run([]) as run:
        raise KeyboardInterrupt
    assert run.exit_code == 130 and capsys.readouterr().err == "jitLtoLinking.py: interrupted\n"


def test_other_errors_are_not_hidden():
    with pytest.raises(ZeroDivisionError), jitlto_run.Run([]):
        1 / 0  # noqa: B018 -- a bug in the sample stays a bug, with its traceback


def test_a_record_is_recognised_and_other_files_are_not(tmp_path):
    record, other, empty = tmp_path / "run.json", tmp_path / "other.json", tmp_path / "empty.json"
    record.write_text('{"sample": "jitLtoLinking", "exit_code": 0}')
    other.write_text('{"sample": "something else"}')
    empty.write_text("")  # an empty file may be a module a plug-in imports: never a record
    assert jitlto_run.is_record(str(record))
    assert not any(jitlto_run.is_record(str(p)) for p in (other, empty, tmp_path))
