# SPDX-License-Identifier: BSD-3-Clause
# Copyright (c) 2026, the jitLtoLinking authors
"""The README's core of the sample is a program that runs as written; the README keeps its
promises (its line count, the Python floor, every option and message it quotes)."""

import re
import subprocess
import sys

import pytest
from helpers import ARCH, ROOT
from Utilities.jitlto_report import read_cubin

README = (ROOT / "README.md").read_text()


def core_program() -> str:
    """The one Python block of the README's section "The sample in one program"."""
    section = README.split("## The sample in one program", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```python\n(.*?)```", section, re.DOTALL)
    assert len(blocks) == 1, "the core of the sample is one program"
    return blocks[0]


def test_the_core_program_is_whole_short_and_literal():
    program = core_program()
    assert len(program.splitlines()) <= 45 and "jitLtoLinking" not in program
    for literal in ("relocatable_device_code=True, link_time_optimization=True", '.compile("ltoir")',
                    "LinkerOptions(arch=arch, link_time_optimization=True)", '.link("cubin")',
                    'get_kernel("apply_transform")', "launch(", '.compile("ptx")'):
        assert literal in program, literal


def test_the_core_program_builds_and_inlines_for_sm_90_without_a_gpu():
    program = core_program().split("kernel = cubin.get_kernel")[0]
    build_part = re.sub(r"device = Device\(0\)\ndevice\.set_current\(\)\narch = [^\n]*\n", f'arch = "{ARCH}"\n',
                        program)
    assert "Device(0)" not in build_part
    namespace: dict = {}
    exec(compile(build_part, "core.py", "exec"), namespace)  # noqa: S102 -- the README's own code
    functions = read_cubin(bytes(namespace["cubin"].code))[0]
    assert "apply_transform" in functions and "user_transform" not in functions


@pytest.mark.gpu
def test_the_core_program_runs_as_written_on_its_own(tmp_path):
    (tmp_path / "core.py").write_text(core_program())
    result = subprocess.run([sys.executable, "core.py"], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "matches NumPy" in result.stdout


def test_the_readme_is_at_most_300_lines_and_states_a_python_floor_pip_can_meet():
    assert len(README.splitlines()) <= 300
    assert "Python 3.11 or newer" in README and "3.10" not in README
