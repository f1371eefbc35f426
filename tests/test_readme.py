# SPDX-License-Identifier: BSD-3-Clause
# Copyright (c) 2026, the jitLtoLinking authors
"""The README's core of the sample, "The sample in one program", is a program that runs as
written."""

import re
import subprocess
import sys

import pytest
from helpers import ARCH, ROOT
from jitlto_report import read_cubin


def core_program() -> str:
    """The one Python block of the README's section "The sample in one program"."""
    section = (ROOT / "README.md").read_text().split("## The sample in one program", 1)[1]
    blocks = re.findall(r"```python\n(.*?)```", section.split("\n## ", 1)[0], re.DOTALL)
    assert len(blocks) == 1, "the core of the sample is one program"
    return blocks[0]


def test_the_core_program_builds_and_inlines_for_sm_90_without_a_gpu():
    program = core_program().split("kernel = cubin.get_kernel")[0]
    build_part = re.sub(r"device = Device\(0\)\ndevice\.set_current\(\)\narch = [^\n]*\n",
                        f'arch = "{ARCH}"\n', program)
    assert "Device(0)" not in build_part
    namespace: dict = {}
    exec(compile(build_part, "core.py", "exec"), namespace)  # noqa: S102 -- the README's own code
    functions, _, calls, registers = read_cubin(bytes(namespace["cubin"].code), "apply_transform")
    assert "apply_transform" in functions and "user_transform" not in functions
    assert calls == 0 and registers > 0


@pytest.mark.gpu
def test_the_core_program_runs_as_written_on_its_own(tmp_path):
    (tmp_path / "core.py").write_text(core_program())
    result = subprocess.run([sys.executable, "core.py"], cwd=tmp_path, check=False, capture_output=True,
                            text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "matches NumPy" in result.stdout
