# SPDX-License-Identifier: BSD-3-Clause
# Copyright (c) 2026, the jitLtoLinking authors
"""The README's core of the sample is the script's own code, line for line."""

from __future__ import annotations

import re

from helpers import ROOT


def test_every_line_of_the_core_section_is_in_the_script():
    readme = (ROOT / "README.md").read_text()
    section = readme.split("## The sample in 20 lines", 1)[1]
    section = section.split("\n## ", 1)[0]
    code = "".join(re.findall(r"```(?:cuda|python)\n(.*?)```", section, re.DOTALL))
    script = {line.strip() for line in (ROOT / "jitLtoLinking.py").read_text().splitlines()}
    lines = [line.strip() for line in code.splitlines() if line.strip()]
    assert 15 <= len(lines) <= 25
    missing = [line for line in lines if line not in script]
    assert not missing, missing


def test_the_readme_states_a_python_floor_pip_can_meet():
    readme = (ROOT / "README.md").read_text()
    assert "Python 3.11 or newer" in readme and "3.10" not in readme
