# SPDX-License-Identifier: BSD-3-Clause
# Copyright (c) 2026, the jitLtoLinking authors
"""Plug-ins written in Python, loaded as written: helpers, sibling modules, math. Built for sm_90,
which needs no driver; the tests that need numba-cuda are marked `numba`."""

import os
import textwrap
from pathlib import Path

import numpy as np
import pytest
from helpers import (EXAMPLES, ROOT, assert_clean_failure, compile_only, cuda_plugin, lto_build,
                     report_lines, run_sample, sample)

numba = pytest.mark.numba


def write(folder, name: str, text: str):
    (folder / name).parent.mkdir(parents=True, exist_ok=True)
    (folder / name).write_text(textwrap.dedent(text))
    return folder / name


@numba
def test_an_inlined_helper_builds_without_a_driver_as_the_cuda_twin_does():
    python = lto_build(sample.read_plugins([str(EXAMPLES / "default.py")], "")[0])
    cuda = lto_build(cuda_plugin(EXAMPLES / "default.cu"))
    assert python.label == "lto default.py" and python.user_transform == "inlined (0 calls left)"
    assert python.registers == cuda.registers


PLAIN_HELPER = """import math
from numpy import float32

def softplus(x):
    return x if x > float32(20.0) else float32(math.log1p(math.exp(x)))

def user_transform(x):
    return softplus(x) * float32(2.0)
"""


@numba
def test_a_plain_helper_says_how_to_decorate_it(tmp_path):  # with a driver too
    result = compile_only("--plugin", str(write(tmp_path, "plain.py", PLAIN_HELPER)))
    assert_clean_failure(result, 1, "numba-cuda could not compile plain.py, line 8:",
                         'it is decorated: @numba.njit(inline="always") builds anywhere')
    assert len(result.stderr.splitlines()) == 2, result.stderr  # the message, and its hint


@numba
def test_a_helper_numba_does_not_inline_needs_a_driver_and_says_so(tmp_path, no_gpu_here):
    jitted = "import numba\n" + PLAIN_HELPER.replace("def softplus", "@numba.njit\ndef softplus")
    result = compile_only("--plugin", str(write(tmp_path, "jitted.py", jitted)))
    assert_clean_failure(result, 1, "numba-cuda could not compile jitted.py",
                         'without a CUDA driver', 'decorate each with @numba.njit(inline="always")')


@numba
def test_the_reference_is_numba_s_cpu_build_where_it_compiles_else_none(tmp_path):
    plain = write(tmp_path, "plain.py", PLAIN_HELPER)
    default, plain = sample.read_plugins([str(EXAMPLES / "default.py"), str(plain)], "")
    x = np.random.default_rng(4).standard_normal(1000, dtype=np.float32)
    expected = sample.DEFAULT_PLUGIN.reference(x)
    np.testing.assert_allclose(default.reference(x), expected, rtol=1e-6, atol=1e-6)
    assert default.reference(x).dtype == np.float32 and "numba.vectorize" in default.against
    assert plain.reference is None  # checked against its ptx build, on a GPU


@numba
def test_sibling_modules_and_a_utilities_package_of_its_own_import_as_python_does(tmp_path):
    write(tmp_path, "plugin/scales.py", "from numpy import float32\n\nSCALE = float32(0.5)\n")
    write(tmp_path, "plugin/Utilities/__init__.py",
          "from numpy import float32\n\nOFFSET = float32(1.0)\n")
    write(tmp_path, "plugin/uses.py", """
        import os
        import scales
        from Utilities import OFFSET

        os.chdir("/")  # the run's outputs stay where the user named them

        def user_transform(x):
            return x * scales.SCALE + OFFSET
        """)
    (tmp_path / "work").mkdir()
    result = compile_only("--plugin", "../plugin", "--emit", "out", cwd=tmp_path / "work")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "skipped Utilities (a folder), scales.py (defines no user_transform)" in result.stdout
    assert report_lines(result, "lto uses.py")[0].endswith("user_transform inlined (0 calls left)")
    assert (tmp_path / "work" / "out" / "lto uses.py.cubin").is_file() and not Path("/out").exists()


DEF = "def user_transform(x):\n    "
LOADED = "failed while it was loaded:"
CANNOT = {  # what a Python plug-in cannot hold, and what the message says
    "recursive": (DEF + "return user_transform(x - 1) if x > 1 else x\n",
                  ["recursive.py, line 2:", "a function that calls itself"]),
    "numpyfn": ("import numpy as np\n" + DEF + "return np.exp(x)\n",
                ["numpyfn.py, line 3:", "NumPy's functions do not compile here"]),
    "tryexcept": (DEF + "try:\n        return x\n    except Exception:\n        return x\n",
                  ["tryexcept.py, line 2:", "try/except is not supported"]),
    "returns": (DEF + "return (x, x)\n",
                ["returns.py, line 2: No conversion from UniTuple(float32 x 2) to float32"]),
    "twoargs": (DEF.replace("x)", "x, y)") + "return x\n",
                ["twoargs.py, line 1:", "takes one argument, x"]),
    "syntax": (DEF + "return x +\n", [f"syntax.py {LOADED} SyntaxError"]),
    "missing": ("def other(x):\n    return x\n", ["missing.py does not define user_transform(x)"]),
    "exits": ("import sys\nsys.exit(3)\n", [f"exits.py {LOADED} SystemExit: 3"]),
    "ctrl_c": ("raise KeyboardInterrupt\n", [f"ctrl_c.py {LOADED} KeyboardInterrupt"]),
}


@numba
@pytest.mark.parametrize("name", sorted(CANNOT))
def test_what_cannot_be_compiled_or_loaded_is_one_message_with_the_reason(tmp_path, name):
    source, phrases = CANNOT[name]
    result = compile_only("--plugin", str(write(tmp_path, f"{name}.py", source)))
    assert_clean_failure(result, 1, *phrases)
    assert len(result.stderr.strip().splitlines()) <= 2 and " at 0x" not in result.stderr


def test_without_a_working_numba_cuda_a_python_plugin_is_a_usage_error_with_the_fix(tmp_path):
    (tmp_path / "numba.py").write_text("raise ImportError('No module named numba')\n")  # first
    path = os.pathsep.join(filter(None, [str(tmp_path), os.environ.get("PYTHONPATH")]))
    result = run_sample("--plugin", str(EXAMPLES / "default.py"), env={"PYTHONPATH": path})
    assert_clean_failure(result, 2, "Python plug-ins need numba-cuda, which cannot be imported",
                         "ImportError: No module named numba",
                         f"-r {ROOT / 'requirements-python-plugins.txt'}")
    assert "[1]" not in result.stdout
