# SPDX-License-Identifier: BSD-3-Clause
# Copyright (c) 2026, the jitLtoLinking authors
"""The README's standalone program, in "## The sample in one program", runs as written."""

import re
import subprocess
import sys

import pytest
from helpers import ARCH, ROOT
from jitlto_report import read_cubin


def standalone_program() -> str:
    """The one Python block of the README's section "The sample in one program"."""
    section = (ROOT / "README.md").read_text().split("## The sample in one program", 1)[1]
    blocks = re.findall(r"```python\n(.*?)```", section.split("\n## ", 1)[0], re.DOTALL)
    assert len(blocks) == 1, "the sample in one program is one block"
    return blocks[0]


def test_its_build_part_links_for_sm_90_without_a_gpu_and_inlines_the_plugin():
    build_part = standalone_program().split("kernel = cubin.get_kernel")[0]
    build_part, found = re.subn(r"device = Device\(0\)\ndevice\.set_current\(\)\narch = [^\n]*\n",
                                f'arch = "{ARCH}"\n', build_part)
    assert found == 1 and "Device(0)" not in build_part
    namespace: dict = {}
    exec(compile(build_part, "readme.py", "exec"), namespace)  # noqa: S102 -- the README's code
    functions, _, calls, registers = read_cubin(bytes(namespace["cubin"].code), "apply_transform")
    assert "apply_transform" in functions and "user_transform" not in functions
    assert calls == 0 and registers > 0


@pytest.mark.gpu
def test_it_runs_whole_on_its_own_and_matches_numpy(tmp_path):
    (tmp_path / "readme.py").write_text(standalone_program())
    result = subprocess.run([sys.executable, "readme.py"], cwd=tmp_path, capture_output=True,
                            text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "matches NumPy" in result.stdout
