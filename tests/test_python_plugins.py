# SPDX-License-Identifier: BSD-3-Clause
# Copyright (c) 2026, the jitLtoLinking authors
"""Plug-ins written in Python, loaded as written: helpers, sibling modules, math. Built for sm_90 with
--compile-only, which needs no driver; the tests that need numba-cuda are marked `numba`."""

import json
import os
import textwrap

import numpy as np
import pytest
from helpers import EXAMPLES, ROOT, assert_clean_failure, compile_only, read_plugins, run_sample, sample

numba = pytest.mark.numba


def write(folder, name: str, text: str):
    (folder / name).parent.mkdir(parents=True, exist_ok=True)
    (folder / name).write_text(textwrap.dedent(text))
    return folder / name


def builds(*args) -> dict:
    """--compile-only --arch sm_90 with `args`: the record's builds, by label."""
    result = compile_only(*args, "--json", "-")
    assert result.returncode == 0, result.stderr
    return {build["label"]: build for build in json.loads(result.stdout)["builds"]}


@numba
def test_inlined_helpers_compile_without_a_driver_and_build_like_the_cuda_twin():
    made = builds("--plugin", str(EXAMPLES / "default.py"), "--plugin", str(EXAMPLES / "default.cu"))
    assert made["lto default.py"]["user_transform"] == "inlined (0 calls left)"
    assert made["lto default.py"]["registers"] == made["lto default.cu"]["registers"]


PLAIN_HELPER = """
    import math
    from numpy import float32

    def softplus(x):
        return x if x > float32(20.0) else float32(math.log1p(math.exp(x)))

    def user_transform(x):
        return softplus(x) * float32(2.0)
    """


@numba
def test_a_plain_helper_says_how_to_decorate_it(tmp_path):  # with a driver too, measured on a GPU
    result = compile_only("--plugin", str(write(tmp_path, "plain.py", PLAIN_HELPER)))
    assert_clean_failure(result, 1, "numba-cuda could not compile plain.py, line",
                         'it is decorated: @numba.njit(inline="always") builds anywhere')


@numba
def test_a_helper_numba_does_not_inline_needs_a_driver_and_says_so(tmp_path, no_gpu_here):
    jitted = PLAIN_HELPER.replace("    import math", "    import math\n    import numba").replace(
        "    def softplus", "    @numba.njit\n    def softplus")
    result = compile_only("--plugin", str(write(tmp_path, "jitted.py", jitted)))
    assert_clean_failure(result, 1, 'decorate each with @numba.njit(inline="always")')


@numba
def test_the_reference_is_numba_s_cpu_build_where_it_compiles_else_none(tmp_path):
    default, plain = read_plugins([str(EXAMPLES / "default.py"), str(write(tmp_path, "plain.py", PLAIN_HELPER))],
                                  sample.PLUGIN_CONTRACT)
    x = np.random.default_rng(4).standard_normal(1000, dtype=np.float32)
    np.testing.assert_allclose(default.reference(x), sample.DEFAULT_PLUGIN.reference(x), rtol=1e-6, atol=1e-6)
    assert default.reference(x).dtype == np.float32 and "numba.vectorize" in default.against
    assert plain.reference is None  # a plain helper: checked against the ptx build, on a GPU


@numba
def test_sibling_modules_and_a_utilities_package_of_its_own_import_as_python_imports_them(tmp_path):
    write(tmp_path, "plugin/scales.py", "from numpy import float32\n\nSCALE = float32(0.5)\n")
    write(tmp_path, "plugin/Utilities/__init__.py", "from numpy import float32\n\nOFFSET = float32(1.0)\n")
    write(tmp_path, "plugin/uses.py", """
        import os
        import scales
        from Utilities import OFFSET

        os.chdir("/")  # the run's outputs stay where the user named them

        def user_transform(x):
            return x * scales.SCALE + OFFSET
        """)
    (tmp_path / "work").mkdir()
    result = compile_only("--plugin", "../plugin", "--emit", "out", "--json", "run.json", cwd=tmp_path / "work")
    assert result.returncode == 0, result.stdout + result.stderr
    made = {build["label"]: build for build in json.loads((tmp_path / "work" / "run.json").read_text())["builds"]}
    assert set(made) - {"ptx uses.py"} == {"lto uses.py", "swap", "parameters", "parameters set"}  # the folder: the modules are no plug-ins
    assert made["lto uses.py"]["user_transform"] == "inlined (0 calls left)"
    assert (tmp_path / "work" / "out" / "lto-uses.py.cubin").is_file()


CANNOT = {  # what a Python plug-in cannot hold, and what the message says
    "recursive": ("def user_transform(x):\n    return user_transform(x - 1) if x > 1 else x\n",
                  ["recursive.py, line 2:", "a function that calls itself"]),
    "numpyfn": ("import numpy as np\n\ndef user_transform(x):\n    return np.exp(x)\n",
                ["numpyfn.py, line 4:", "NumPy's functions do not compile here"]),
    "tryexcept": ("def user_transform(x):\n    try:\n        return x\n    except Exception:\n        return x\n",
                  ["tryexcept.py, line 2:", "try/except is not supported"]),
    "returns": ("def user_transform(x):\n    return (x, x)\n",
                ["returns.py, line 2: No conversion from UniTuple(float32 x 2) to float32"]),
    "twoargs": ("def user_transform(x, y):\n    return x\n", ["twoargs.py, line 1:", "takes one argument, x"]),
    "globallist": ("VALUES = [1.0, 2.0]\n\ndef user_transform(x):\n    return x * VALUES[0]\n",
                   ["globallist.py, line 4:"]),
    "syntax": ("def user_transform(x):\n    return x +\n", ["syntax.py failed while it was loaded: SyntaxError"]),
    "missing": ("def other(x):\n    return x\n", ["missing.py does not define user_transform(x)"]),
    "exits": ("import sys\nsys.exit(3)\n", ["exits.py failed while it was loaded: SystemExit: 3"]),
    "ctrl_c": ("raise KeyboardInterrupt\n", ["ctrl_c.py failed while it was loaded: KeyboardInterrupt"]),
}


@numba
@pytest.mark.parametrize("name", sorted(CANNOT))
def test_what_cannot_be_compiled_or_loaded_is_one_message_with_the_reason(tmp_path, name):
    source, phrases = CANNOT[name]
    result = compile_only("--plugin", str(write(tmp_path, f"{name}.py", source)))
    assert_clean_failure(result, 1, *phrases)
    assert len(result.stderr.strip().splitlines()) <= 2 and " at 0x" not in result.stderr, result.stderr


def test_without_a_working_numba_cuda_a_python_plugin_is_a_usage_error_with_the_fix(tmp_path):
    (tmp_path / "numba.py").write_text("raise ImportError('No module named numba')\n")  # found first
    path = os.pathsep.join(filter(None, [str(tmp_path), os.environ.get("PYTHONPATH")]))
    result = run_sample("--plugin", str(EXAMPLES / "default.py"), env={"PYTHONPATH": path})
    assert_clean_failure(result, 2, "Python plug-ins need numba-cuda, which cannot be imported here",
                         "ImportError: No module named numba", f"-r {ROOT / 'requirements-python-plugins.txt'}")
    assert "[1]" not in result.stdout
