# SPDX-License-Identifier: BSD-3-Clause
# Copyright (c) 2026, the jitLtoLinking authors
"""Plug-ins written in Python, as Python programmers write them: helpers, imports, decorators.
Built for sm_90 with --compile-only, which needs no driver; numba-cuda tests are marked `numba`."""

from __future__ import annotations

import json
import os
import re
import textwrap

import numpy as np
import pytest
from helpers import ARCH, EXAMPLES, ROOT, assert_clean_failure, make_tools, run_sample, sample

import jitlto_files
import jitlto_python

numba = pytest.mark.numba


def write(folder, name: str, text: str):
    path = folder / name
    path.write_text(textwrap.dedent(text))
    return path


def built(path, *extra):
    """--compile-only --arch sm_90 --plugin path: the run, and its --json record."""
    record = path.parent / f"{path.stem}.json"
    result = run_sample("--compile-only", "--arch", ARCH, "--plugin", str(path), *extra, "--json", str(record))
    return result, json.loads(record.read_text()) if record.exists() else None


HELPERS = {
    "plain": """
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
        """,
    "decorated": """
        import numba
        from numba import cuda
        from numpy import float32

        @numba.njit
        def twice(x):
            return x * float32(2.0)

        @cuda.jit(device=True)
        def plus_one(x):
            return twice(x) + float32(1.0)

        def user_transform(x):
            return plus_one(x)
        """,
}


@numba
@pytest.mark.parametrize("kind", sorted(HELPERS))
def test_helpers_plain_or_decorated_compile_without_a_driver_and_are_inlined(tmp_path, kind):
    result, record = built(write(tmp_path, f"{kind}.py", HELPERS[kind]))
    assert result.returncode == 0, result.stdout + result.stderr
    lto = next(b for b in record["builds"] if b["build"] == "lto")
    assert lto["user_transform_inlined"] is True and record["exit_code"] == 0


@numba
def test_the_cpu_reference_sees_the_same_helpers(tmp_path):
    plugin = sample.Plugin("plain.py", "", path=write(tmp_path, "plain.py", HELPERS["plain"]))
    _, reference = jitlto_python.compile_plugin(plugin, "ltoir", ARCH)
    x = np.array([-3.0, 0.0, 1.5, 30.0], dtype=np.float32)
    expected = np.where(x > 20, x, np.log1p(np.exp(x.astype(np.float64)))) - 1.0
    np.testing.assert_allclose(reference(x), 2.0 * expected, rtol=1e-6)
    assert reference(x).dtype == np.float32


@numba
def test_a_sibling_module_is_imported_and_a_folder_takes_only_files_that_define_user_transform(tmp_path):
    write(tmp_path, "helpers_mod.py", "from numpy import float32\n\ndef scale(x):\n    return x * float32(3.0)\n")
    write(tmp_path, "uses_sibling.py", "from helpers_mod import scale\n\ndef user_transform(x):\n    return scale(x)\n")
    result, record = built(tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert [b["plugin"] for b in record["builds"] if b["build"].startswith("lto")] == ["uses_sibling.py"]
    assert next(b for b in record["builds"] if b["build"].startswith("lto"))["user_transform_inlined"] is True


@numba
def test_a_python_plugin_builds_for_sm_90_and_lto_inlines_it_like_the_cuda_one():
    tools = make_tools(several_plugins=True)
    plugins = [jitlto_files.plugin_of(EXAMPLES / name, (EXAMPLES / name).read_text(), sample.PLUGIN_CONTRACT)
               for name in ("default.py", "default.cu")]  # fmt: skip
    sample.lto_linking(tools, plugins, None, None)
    python, cuda = (tools.find("lto", plugin) for plugin in plugins)
    assert python.inlined is True and python.registers == cuda.registers
    assert python.compiles[-1]["compiler"] == "numba-cuda"


CANNOT = {
    "recursive": (
        "def user_transform(x):\n    return user_transform(x - 1) if x > 1 else x\n",
        "recursive.py, line 1: user_transform calls itself",
    ),
    "raises": ("def user_transform(x):\n    if x > 5:\n        raise ValueError('big')\n    return x\n", "raises.py, line 3"),
    "decorated": ("from numba import vectorize\n\n@vectorize\ndef user_transform(x):\n    return x\n", "define it without a decorator"),
    "returns": ("def user_transform(x):\n    return (x, x)\n", "user_transform must return a number"),
    "syntax": ("def user_transform(x):\n    return x +\n", "syntax.py:2: syntax error"),
    "list": ("def user_transform(x):\n    return [x]\n", "numba-cuda could not compile list.py, line 2"),
    "missing": ("def other(x):\n    return x\n", "missing.py does not define a function user_transform(x)"),
    "params": ("def user_transform(x, y):\n    return x\n", "must take one float32 argument, not 2"),
    "loading": ("raise ValueError('boom')\ndef user_transform(x):\n    return x\n", "loading.py failed while it was loaded: ValueError: boom"),
    "exits": ("import sys\nsys.exit(3)\ndef user_transform(x):\n    return x\n", "exits.py called sys.exit(3) while it was loaded"),
    "base": ("raise BaseException('odd')\ndef user_transform(x):\n    return x\n", "base.py failed while it was loaded: BaseException: odd"),
}


@numba
@pytest.mark.parametrize("name", sorted(CANNOT))
def test_what_cannot_work_is_one_message_exit_1_and_the_json_agrees(tmp_path, name):
    source, phrase = CANNOT[name]
    result, record = built(write(tmp_path, f"{name}.py", source))
    assert_clean_failure(result, 1, phrase)
    assert record["exit_code"] == result.returncode == 1
    if name in ("recursive", "raises"):
        assert "write it as a loop" in result.stderr or "return a value" in result.stderr


INTERNALS = {  # what numba cannot type, and the name it should show for it
    "math_on_a_tuple": ("math.exp((x, x))", "Function(exp) found for signature"),
    "ufunc_on_a_list": ("numpy.exp([x])", "Function(exp) found for signature"),
    "numpy_function": ("numpy.clip(x)", "Function(clip) found for signature"),
}


@numba
@pytest.mark.parametrize("name", sorted(INTERNALS))
def test_numba_messages_name_python_objects_without_their_reprs_or_addresses(tmp_path, name):
    call, phrase = INTERNALS[name]
    source = f"import math\nimport numpy\n\ndef user_transform(x):\n    return {call}\n"
    result, _ = built(write(tmp_path, f"{name}.py", source))
    assert_clean_failure(result, 1, f"numba-cuda could not compile {name}.py", phrase)
    assert not re.search(r"<(built-in|function|ufunc|class|module)\b| at 0x[0-9a-f]", result.stderr)


def test_numba_objects_in_a_message_lose_their_addresses():
    text = "Invalid use of Function(<numba.core.typing.templates.Foo object at 0x7f3a94188fe0>)"
    shown = "Invalid use of Function(<numba.core.typing.templates.Foo>)"
    message = jitlto_python.numba_message(text, "p.py")
    assert message == f"numba-cuda could not compile p.py: {shown}"


def python_path(first) -> str:
    """PYTHONPATH with `first` in front of what the tests run with."""
    return os.pathsep.join(filter(None, [str(first), os.environ.get("PYTHONPATH")]))


def test_without_numba_cuda_a_python_plugin_is_a_usage_error_naming_the_install_command(tmp_path):
    (tmp_path / "numba.py").write_text("raise ImportError('No module named numba')\n")
    result = run_sample("--plugin", str(EXAMPLES / "default.py"), env={"PYTHONPATH": python_path(tmp_path)})
    install = f"pip install -r {ROOT / 'requirements-python-plugins.txt'}"
    assert_clean_failure(result, 2, "Python plug-ins need numba-cuda", install)
    assert "[1]" not in result.stdout


def test_a_numba_cuda_that_cannot_be_imported_is_named_with_the_reason(tmp_path):
    (tmp_path / "numba.py").write_text("raise AttributeError(\"module 'numpy' has no attribute 'row_stack'\")\n")
    result = run_sample("--plugin", str(EXAMPLES / "default.py"), env={"PYTHONPATH": python_path(tmp_path)})
    assert_clean_failure(result, 2, "numba-cuda is installed but cannot be imported", "row_stack")


def test_two_plugins_of_one_name_are_refused_before_numba_is_asked(tmp_path):
    (tmp_path / "numba.py").write_text("raise ImportError('No module named numba')\n")
    (tmp_path / "default.py").write_text("def user_transform(x):\n    return x\n")
    result = run_sample("--plugin", str(EXAMPLES / "default.py"), "--plugin", str(tmp_path / "default.py"),
                        env={"PYTHONPATH": python_path(tmp_path)})  # fmt: skip
    assert_clean_failure(result, 2, "two plug-ins have this file name")
