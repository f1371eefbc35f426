# SPDX-License-Identifier: BSD-3-Clause
# Copyright (c) 2026, the jitLtoLinking authors
"""The README's core of the sample is a program that runs as written, and the README keeps its promises."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest
from helpers import ARCH, ROOT
from jitlto_gpu import read_cubin

CORE_HEADING = "## The sample in one program"


def core_program() -> str:
    """The one Python block of the README's core section."""
    section = (ROOT / "README.md").read_text().split(CORE_HEADING, 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```python\n(.*?)```", section, re.DOTALL)
    assert len(blocks) == 1, "the core of the sample is one program"
    return blocks[0]


def test_the_core_program_is_whole_short_and_literal():
    program = core_program()
    assert len(program.splitlines()) <= 45
    assert "jitLtoLinking" not in program, "it stands alone: its own kernel and plug-in"
    compile(program, "core.py", "exec")
    for literal in ("relocatable_device_code=True, link_time_optimization=True", '.compile("ltoir")',
                    "LinkerOptions(arch=arch, link_time_optimization=True)", '.link("cubin")',
                    'get_kernel("apply_transform")', "launch(", '.compile("ptx")'):  # fmt: skip
        assert literal in program, literal


def test_the_build_part_of_the_core_program_inlines_user_transform_for_sm_90():
    program = core_program().split("kernel = cubin.get_kernel")[0]
    # No GPU here: the architecture is named instead of read off the device.
    build_part = re.sub(r"device = Device\(0\)\ndevice\.set_current\(\)\narch = [^\n]*\n", f'arch = "{ARCH}"\n', program)
    assert "Device(0)" not in build_part
    namespace: dict = {}
    exec(compile(build_part, "core.py", "exec"), namespace)  # noqa: S102 -- the README's own code
    functions, _, _ = read_cubin(bytes(namespace["cubin"].code))
    assert "apply_transform" in functions and "user_transform" not in functions


@pytest.mark.gpu
def test_the_core_program_runs_as_written_on_its_own(tmp_path):
    (tmp_path / "core.py").write_text(core_program())
    result = subprocess.run([sys.executable, "core.py"], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "matches NumPy" in result.stdout


def test_the_readme_states_a_python_floor_pip_can_meet():
    readme = (ROOT / "README.md").read_text()
    assert "Python 3.11 or newer" in readme and "3.10" not in readme
