# SPDX-License-Identifier: BSD-3-Clause
# Copyright (c) 2026, the jitLtoLinking authors
"""The command line: its options, and every check of what they name, before anything is built.

A bad value ends the run with one line and exit code 2 (argparse's own for
the option's shape; `UsageError` for what only the file system can tell),
and the message names the option the user actually gave.
"""

from __future__ import annotations

import argparse
import os
import re
import tempfile
from pathlib import Path

import compile_cache
import emitted_files
import nvidia_tools
from cuda_samples_utils import UsageError
from input_files import Plugin, plugin_files, read_library, same_file, shown
from run_record import SAMPLE_FOLDER, is_record





def read(argv, run, default_plugin: Plugin, contract: str) -> argparse.Namespace:
    """The command line, read and checked (every path it names too), timed as one phase."""
    with run.clock.phase("command line"):
        args = parse_args(argv, run.prog, default_plugin, contract)
        sample_files = [*SAMPLE_FOLDER.glob("*.py"), *SAMPLE_FOLDER.joinpath("Utilities").glob("*")]
        check_paths(args, run, sample_files)
    return args


def parse_args(argv, prog: str, default_plugin: Plugin, contract: str) -> argparse.Namespace:
    """Read and check the command line; argparse exits with 2 on a usage error."""
    parser = argparse.ArgumentParser(
        prog=prog, description="Link a plug-in into a library kernel, with and without LTO"
    )
    add = parser.add_argument
    add(
        "--elements",
        type=whole_number(1, "a whole number of elements, at least 1"),
        default=65536,
        metavar="N",
        help="elements to transform (default 65536)",
    )
    add(
        "--device",
        type=whole_number(0, "a device number such as 0"),
        metavar="D",
        help="GPU to use (default 0)",
    )
    add(
        "--plugin",
        action="append",
        metavar="FILE",
        help=(
            'your plug-in (repeatable): a .cu file defining extern "C" __device__ float '
            "user_transform(float), a .py file defining user_transform(x), or a folder of them"
        ),
    )
    add(
        "--benchmark",
        action="store_true",
        help="time every build against CuPy and a device-to-device copy",
    )
    add(
        "--json",
        type=path_text,
        metavar="PATH",
        help="write every figure of the run as JSON to PATH ('-': standard output)",
    )
    add(
        "--cache-dir",
        type=path_text,
        metavar="DIR",
        help="keep compiled and linked code in DIR (yours alone) for later runs",
    )
    add(
        "--emit",
        type=path_text,
        metavar="DIR",
        help="write each build's PTX, LTO-IR and cubins under DIR",
    )
    add(
        "--library",
        type=path_text,
        metavar="FILE",
        help=(
            "link steps [2] and [3] against this library LTO-IR (e.g. library.ltoir written by "
            "--compile-only --arch sm_75 --emit DIR) instead of compiling library.cu"
        ),
    )
    add(
        "--compile-only",
        action="store_true",
        help="build and report without launching (no GPU needed with --arch)",
    )
    add(
        "--arch",
        type=architecture,
        metavar="sm_XX",
        help="architecture to build for; only with --compile-only",
    )
    args = parser.parse_args(argv)
    for problem in conflicts(args):
        parser.error(problem)
    args.device = args.device or 0
    try:
        found = plugin_files(args.plugin or [])
    except ValueError as exc:
        parser.error(f"--plugin {exc}")
    args.plugins = [plugin_of(path, text, contract) for path, text, _ in found] or [default_plugin]
    try:
        args.library_ltoir = read_library(Path(args.library)) if args.library else None
    except ValueError as exc:
        parser.error(str(exc))
    if any(p.is_python for p in args.plugins):
        import python_plugins  # numba-cuda loads in a second; only Python plug-ins need it

        if python_plugins.PROBLEM:
            parser.error(
                f"--plugin {next(p.path for p in args.plugins if p.is_python)}: "
                f"{python_plugins.PROBLEM}"
            )
    return args


def conflicts(args) -> list[str]:
    """What the options given cannot do together, each said in terms of the options given."""
    problems = []
    if args.arch and not args.compile_only:
        problems.append(
            "--arch only applies with --compile-only: a run on a GPU builds for that GPU's own "
            "architecture"
        )
    if args.compile_only and args.benchmark:
        problems.append(
            "--benchmark times kernels on a GPU, and --compile-only launches nothing: "
            "give one of them"
        )
    if args.compile_only and args.arch and args.device is not None:
        problems.append(
            f"--device {args.device} picks the GPU to build for, and --arch {args.arch} names the "
            "architecture instead: give one of them"
        )
    return problems


def plugin_of(path: Path, text: str, contract: str) -> Plugin:
    """The Plugin for a file: CUDA C++ with the library's contract in front, or Python as it is."""
    name = shown(path).name
    if path.suffix == ".py":
        # its reference is numba's CPU build, made with the GPU one
        return Plugin(name, text, path=path)
    return Plugin.cuda(name, text, contract, path=path)


def whole_number(minimum: int, what: str):
    """An argparse type: a whole number, at least `minimum`; `what` says what is expected."""

    def parse(text: str) -> int:
        try:
            value = int(text, 10)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be {what} (got {text!r})") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be at least {minimum} (got {value})")
        return value

    return parse


def architecture(text: str) -> str:
    """An argparse type for --arch: sm_XX, among the architectures this NVRTC compiles for."""
    if not re.fullmatch(r"sm_\d{2,3}", text):
        raise argparse.ArgumentTypeError(f"must look like sm_90 (got {text!r})")
    numbers = nvidia_tools.supported_architectures()
    if numbers is not None and int(text[3:]) not in numbers:
        listing = ", ".join(f"sm_{n}" for n in numbers)
        raise argparse.ArgumentTypeError(
            f"{text} is not supported by this NVRTC (it supports {listing})"
        )
    return text


def path_text(text: str) -> str:
    """An argparse type: a path, with ~ expanded as a shell would; an empty one would mean the
    current folder, which no option means."""
    if not text.strip():
        raise argparse.ArgumentTypeError("must name a path (got an empty one)")
    return os.path.expanduser(text)


# ---------------------------------------------------------------------------
# Where the run writes: checked before anything is built
# ---------------------------------------------------------------------------


def check_paths(args, run, sample_files: list[Path]) -> None:
    """UsageError unless --json, --emit and --cache-dir can be written and name none of the run's
    inputs (the sample's files, the plug-ins, the headers they include, --library); then the
    run's record goes to --json."""
    include_path = nvidia_tools.cuda_headers().get("include_path")
    reads = [
        *sample_files,
        *(p.path for p in args.plugins if p.path),
        *([Path(args.library)] if args.library else []),
    ]
    reads += [
        h
        for p in args.plugins
        if p.path and not p.is_python
        for h in compile_cache.headers_of(p, include_path)
    ]
    run.json_path, run.record["elements"] = None, args.elements
    if args.json not in (None, "-"):
        check_json_path(Path(args.json), reads)
    run.json_path = args.json
    if args.emit:
        args.emit = writable_folder("--emit", Path(args.emit), reads)
        holding = [p.name for p in args.plugins if p.path and same_file(p.path.parent, args.emit)]
        if holding:
            raise UsageError(
                f"--emit {args.emit}: holds the plug-in {holding[0]}; give a folder of its own, "
                "so that what the run writes never mixes with your sources"
            )
        emitted_files.clear_earlier_run(args.emit)
    args.cache = compile_cache.open_cache(Path(args.cache_dir), reads) if args.cache_dir else None


def check_json_path(target: Path, reads: list[Path]) -> None:
    """UsageError unless --json PATH is a file the run may write: never an input, never a file it
    did not write."""
    where = f"--json {target}"
    input_named = (
        next((source for source in reads if same_file(target, source)), None)
        if target.exists()
        else None
    )
    if input_named:
        raise UsageError(
            f"{where}: is an input of this run ({input_named}); it would be overwritten"
        )
    if target.is_dir():
        raise UsageError(f"{where}: cannot write there (it is a directory, not a file)")
    if not target.parent.is_dir() or not os.access(target.parent, os.W_OK):
        raise UsageError(f"{where}: cannot write there (no writable folder {target.parent})")
    if target.is_file() and not is_record(target):
        raise UsageError(f"{where}: the file exists and is not a --json record of this sample; "
                         "remove it or choose another path")  # fmt: skip


def writable_folder(option: str, folder: Path, reads: list[Path]) -> Path:
    """The folder, created if need be; UsageError unless the run can write files into it."""
    if any(same_file(folder, source) for source in reads if folder.exists()):
        raise UsageError(f"{option} {folder}: is an input of this run; give a folder")
    if folder.exists() and not folder.is_dir():
        raise UsageError(f"{option} {folder}: is not a directory")
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=folder):  # the only sure test that files can be made there
            pass
    except OSError as exc:
        raise UsageError(f"{option} {folder}: cannot write there ({exc.strerror or exc})") from None
    return folder
