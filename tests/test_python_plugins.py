# SPDX-License-Identifier: BSD-3-Clause
# Copyright (c) 2026, the jitLtoLinking authors
"""Plug-ins written in Python, as Python programmers write them: helpers, sibling modules, math.
Built for sm_90 with --compile-only, which needs no driver; numba-cuda tests are marked `numba`."""

import json
import os
import textwrap

import numpy as np
import pytest
from helpers import ARCH, EXAMPLES, ROOT, assert_clean_failure, compile_only, run_sample
from Utilities.jitlto_inputs import Plugin
from Utilities.jitlto_inputs import compile_python

numba = pytest.mark.numba


def write(folder, name: str, text: str):
    path = folder / name
    path.write_text(textwrap.dedent(text))
    return path


def built(path):
    """--compile-only --arch sm_90 --plugin path: the run, and the lto build of its record."""
    result = compile_only("--plugin", str(path), "--json", "-")
    lto = result.returncode == 0 and next(b for b in json.loads(result.stdout)["builds"] if b["kind"] == "lto")
    return result, lto


HELPERS = """
    import math
    from numpy import float32

    OFFSET = float32(1.0)

    def softplus(x):
        if x > float32(20.0):
            return x
        return float32(math.log1p(math.exp(x)))

    def shifted(x):
        return softplus(x) - OFFSET

    def user_transform(x):
        return shifted(x) * float32(2.0)
    """


@numba
def test_helpers_and_constants_compile_without_a_driver_and_are_inlined(tmp_path):
    result, lto = built(write(tmp_path, "plain.py", HELPERS))
    assert result.returncode == 0, result.stderr
    assert lto["user_transform"] == "inlined (0 calls left)"


@numba
def test_the_cpu_reference_is_the_same_function_with_the_same_helpers(tmp_path):
    plugin = Plugin(str(write(tmp_path, "plain.py", HELPERS)), None)
    compile_python(plugin, "ltoir", ARCH)
    x = np.array([-3.0, 0.0, 1.5, 30.0], dtype=np.float32)
    expected = np.where(x > 20, x, np.log1p(np.exp(x.astype(np.float64)))) - 1.0
    np.testing.assert_allclose(plugin.reference(x), 2.0 * expected, rtol=1e-6)
    assert plugin.reference(x).dtype == np.float32


@numba
@pytest.mark.parametrize("sibling", ["helpers_mod", "cuda_samples_utils", "jitlto_report", "jitlto_inputs"])
def test_a_sibling_module_is_the_plugin_s_own_whatever_its_name(tmp_path, sibling):
    write(tmp_path, f"{sibling}.py", """
        from numpy import float32

        def inner(x):
            return x * float32(3.0)

        def scale(x):
            return inner(x) + float32(1.0)
        """)
    write(tmp_path, "uses_sibling.py", f"""
        import {sibling}
        from {sibling} import scale

        def user_transform(x):
            return scale(x) + {sibling}.scale(x)
        """)
    result, lto = built(tmp_path)  # the folder: the modules without user_transform are no plug-ins
    assert result.returncode == 0, result.stderr
    assert lto["label"] == "lto uses_sibling.py" and lto["user_transform"] == "inlined (0 calls left)"


@numba
def test_the_example_python_plugin_builds_like_its_cuda_twin():
    result = compile_only("--plugin", str(EXAMPLES / "default.py"), "--plugin", str(EXAMPLES / "default.cu"),
                          "--json", "-")
    lto = {b["label"]: b for b in json.loads(result.stdout)["builds"] if b["kind"] == "lto"}
    assert lto["lto default.py"]["registers"] == lto["lto default.cu"]["registers"]
    assert lto["lto default.py"]["user_transform"] == "inlined (0 calls left)"


CANNOT = {  # what a Python plug-in cannot hold, and what the message says
    "recursive": ("def user_transform(x):\n    return user_transform(x - 1) if x > 1 else x\n",
                  "recursive.py, line 2: Untyped global name 'user_transform'"),
    "raises": ("def user_transform(x):\n    if x > 5:\n        raise ValueError('big')\n    return x\n",
               "raise, recursion"),
    "returns": ("def user_transform(x):\n    return (x, x)\n",
                "returns.py, line 2: No conversion from UniTuple(float32 x 2) to float32"),
    "globallist": ("VALUES = [1.0, 2.0]\n\ndef user_transform(x):\n    return x * VALUES[0]\n",
                   "globallist.py, line 4: The use of a reflected list"),
    "numpyfn": ("import numpy as np\n\ndef user_transform(x):\n    return np.exp(x)\n",
                "numpyfn.py: KeyError: <ufunc 'exp'>"),
    "syntax": ("def user_transform(x):\n    return x +\n", "syntax.py failed while it was loaded: SyntaxError"),
    "missing": ("def other(x):\n    return x\n", "missing.py does not define user_transform(x)"),
    "loading": ("raise ValueError('boom')\n", "loading.py failed while it was loaded: ValueError: boom"),
    "exits": ("import sys\nsys.exit(3)\n", "exits.py failed while it was loaded: SystemExit: 3"),
}


@numba
@pytest.mark.parametrize("name", sorted(CANNOT))
def test_what_cannot_be_compiled_is_one_message_with_numba_s_reason(tmp_path, name):
    source, phrase = CANNOT[name]
    result = compile_only("--plugin", str(write(tmp_path, f"{name}.py", source)))
    assert_clean_failure(result, 1, phrase)
    assert len(result.stderr.strip().splitlines()) <= 3 and " at 0x" not in result.stderr, result.stderr


def python_path(first) -> str:
    return os.pathsep.join(filter(None, [str(first), os.environ.get("PYTHONPATH")]))


@pytest.mark.parametrize(("stand_in", "phrase"), [
    ("raise ImportError('No module named numba')\n", "ImportError: No module named numba"),
    ("raise AttributeError(\"module 'numpy' has no attribute 'row_stack'\")\n", "'row_stack'"),
])
def test_without_a_working_numba_cuda_a_python_plugin_is_a_usage_error_with_the_fix(tmp_path, stand_in, phrase):
    (tmp_path / "numba.py").write_text(stand_in)  # found first, as a missing or broken numba would be
    result = run_sample("--plugin", str(EXAMPLES / "default.py"), env={"PYTHONPATH": python_path(tmp_path)})
    assert_clean_failure(result, 2, "Python plug-ins need numba-cuda, which cannot be imported here", phrase,
                         f"pip install -r {ROOT / 'requirements-python-plugins.txt'}")
    assert "[1]" not in result.stdout
