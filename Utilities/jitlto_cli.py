# SPDX-License-Identifier: BSD-3-Clause
# Copyright (c) 2026, the jitLtoLinking authors
"""The command line: what it says and names checked before anything is built (exit 2,
as argparse's), the compilers it needs, --library trial-linked, and how it ends."""

import argparse
import json
import os
import signal
import stat
import subprocess
import sys
from pathlib import Path

import numpy as np
from cuda.core import ObjectCode

REQUIREMENTS = Path(__file__).resolve().parent.parent / "requirements.txt"
LARGEST_INPUT = 64 << 20  # bytes: a plug-in or a library


class SampleError(Exception):
    exit_code = 1  # a build or a check failed


class UsageError(SampleError):
    exit_code = 2  # an input cannot be used, as argparse exits


class WaivedError(SampleError):
    exit_code = 77  # no usable driver or GPU: "skipped" to a GPU runner


def path_given(text: str) -> str:
    """A path as the user typed it, but not an empty one."""
    if not text:
        raise argparse.ArgumentTypeError("an empty path (is a variable unset?)")
    return text


def values_given(text: str) -> tuple[str, np.ndarray]:
    """NAME=V1,V2,...: a name, and its values as float32s."""
    name, _, values = text.partition("=")
    try:
        with np.errstate(over="ignore"):  # past float32's range: inf
            numbers = np.array(values.split(","), float).astype(np.float32)
    except ValueError:  # not a number
        numbers = np.array([np.nan], np.float32)
    if not name.isidentifier() or not np.isfinite(numbers).all():
        raise argparse.ArgumentTypeError(
            f"{text!r}: give NAME=V1,V2,... with values that round to finite float32s, "
            "for example coefficients=0.5,-2,0.25")
    return name, numbers


def parse_args(argv, description: str, study=False):
    """The command line, checked (argparse's exit 2); no compiler is loaded."""
    parser = argparse.ArgumentParser(description=description, allow_abbrev=False)
    add = parser.add_argument
    add("--elements", type=int, default=65536, metavar="N", help="elements (65536)")
    add("--device", type=int, default=0, metavar="D", help="the GPU to use (0)")
    add("--plugin", type=path_given, action="append", default=[], metavar="FILE",
        help="your plug-in, a .cu or .py file that defines user_transform, or a "
             "folder of them (repeatable)")
    add("--emit", type=path_given, metavar="DIR",
        help="each build's code, into a new or empty DIR")
    if study:
        add("--json", type=path_given, metavar="PATH",
            help="every figure, as JSON ('-': standard output)")
    else:
        add("--set", type=values_given, action="append", default=[],
            metavar="NAME=V1,V2,...", help="step [4]'s new values of a float "
            "variable: your plug-ins' (repeatable), or without --plugin its own "
            "plug-in's coefficients (default 0.5,-2,0.25)")
        add("--library", type=path_given, metavar="FILE",
            help="the library's LTO-IR, for steps [2] to [4]")
        add("--compile-only", action="store_true",
            help="build and report for --arch; no GPU, no launch")
        add("--arch", metavar="sm_XX", help="the GPU to build for, with --compile-only")
    args = parser.parse_args(argv)
    try:
        check_numbers(args, study)
        if not study and args.library:  # its kind and size; read when it is linked
            read_input("--library", args.library, read=False)
        check_outputs(args.emit, args.json if study else None)
    except UsageError as error:
        parser.error(str(error))
    return args


def check_numbers(args, study: bool) -> None:
    """--elements and --device; the lesson's --compile-only, --arch and --set."""
    if args.elements < 1:
        raise UsageError(f"--elements must be at least 1 (got {args.elements})")
    if args.device < 0:
        raise UsageError(f"--device must be at least 0 (got {args.device})")
    if study:
        return
    if args.compile_only != (args.arch is not None):
        raise UsageError("--compile-only and --arch go together: a run on a GPU "
                         "builds for it")
    names = [name for name, _ in args.set]
    twice = sorted({name for name in names if names.count(name) > 1})
    if twice:
        raise UsageError(f"--set {', '.join(twice)}: given twice")


def check_outputs(emit: str | None, json_path: str | None) -> None:
    """--emit DIR made or found empty; --json PATH new, or a record of the study's."""
    if emit:
        try:
            os.makedirs(emit, exist_ok=True)
            if os.listdir(emit):
                raise UsageError(f"--emit {emit}: is not a new or empty folder")
            if not os.access(emit, os.W_OK | os.X_OK):
                raise PermissionError(13, "Permission denied")
        except OSError as error:
            raise UsageError(f"--emit {emit}: cannot be made or read "
                             f"({error.strerror})") from None
    if json_path in (None, "-"):
        return
    if emit and Path(emit).resolve() in Path(json_path).resolve().parents:
        raise UsageError(f"--json {json_path}: is inside --emit {emit}")
    if os.path.lexists(json_path) and not is_study_record(json_path):
        raise UsageError(f"--json {json_path}: is not a record the study wrote, or "
                         "is read-only: name a new file, or one the study wrote "
                         "(--json - for standard output)")


def is_study_record(path: str) -> bool:
    """Whether PATH is a regular file, not read-only, holding the study's record."""
    try:
        info = os.lstat(path)
        if not stat.S_ISREG(info.st_mode) or info.st_size > LARGEST_INPUT:
            return False
        with open(path, "rb") as file:
            record = json.loads(file.read())
    except (OSError, ValueError):
        return False
    return (info.st_mode & 0o222 != 0 and isinstance(record, dict)
            and record.get("sample") == "jitLtoBenchmark")


def read_input(option: str, path: str, read=True) -> bytes | None:
    """An input file, read (if `read`) once it is known to be a regular file of at
    most 64 MiB: a device, a FIFO or a huge file is never read."""
    try:
        info = os.stat(path)
        if not stat.S_ISREG(info.st_mode):
            raise UsageError(f"{option} {path}: is not a regular file")
        if info.st_size > LARGEST_INPUT:
            raise UsageError(f"{option} {path}: is {info.st_size:,} bytes; "
                             "an input is at most 64 MiB")
        if read:
            with open(path, "rb") as file:
                return file.read(LARGEST_INPUT + 1)
    except OSError as error:
        raise UsageError(f"{option} {path}: cannot be read ({error.strerror})") from None


def check_compilers(arch: str | None) -> None:
    """NVRTC and nvJitLink loaded (else how to install them), --arch one they build."""
    from cuda.bindings import nvjitlink, nvrtc

    try:
        nvjitlink.version()
        numbers = nvrtc.nvrtcGetSupportedArchs()[1]
    except RuntimeError as error:
        raise SampleError(f"NVRTC or nvJitLink could not be loaded ({error}); install "
                          f"what the sample needs with: python -m pip install -r "
                          f"{REQUIREMENTS}") from None
    supported = [f"sm_{number}" for number in numbers]
    if arch is not None and arch not in supported:
        raise UsageError(f"--arch {arch}: not an architecture this NVRTC builds for "
                         f"({', '.join(supported)})")


# The trial link of --library's LTO-IR (standard input) for sys.argv[1]: alone, it must
# miss user_transform; with a plug-in that returns x, make the kernel apply_transform.
TRIAL_LINK = """import sys
from cuda.core import Linker, LinkerOptions, ObjectCode, Program, ProgramOptions
def link(*codes):
    options = LinkerOptions(arch=sys.argv[1], link_time_optimization=True)
    return Linker(*codes, options=options).link("cubin")
try:
    library = ObjectCode.from_ltoir(sys.stdin.buffer.read())
    try:
        link(library)
        sys.exit("trial link: it links without a plug-in: its kernel never calls "
                 "user_transform, or defines it")
    except Exception as error:
        if "user_transform" not in str(error):
            raise
    options = ProgramOptions(arch=sys.argv[1], relocatable_device_code=True,
                             link_time_optimization=True)
    plugin = Program('extern "C" __device__ float user_transform(float x) { return x; }',
                     "c++", options).compile("ltoir")
    if b".text.apply_transform" not in bytes(link(library, plugin).code):
        sys.exit("trial link: it makes no kernel apply_transform")
except Exception as error:  # nvJitLink's words, not a traceback
    log = str(error).split("error log:")[-1].replace("\\0", "")  # a C string's end
    sys.exit("trial link: nvJitLink: " + log.strip())
"""


def check_library(path: str, arch: str) -> ObjectCode:
    """--library's LTO-IR, once a trial link in a child process (a damaged file can
    crash nvJitLink; -P: the child imports nothing from the current folder) made the
    kernel apply_transform."""
    data = read_input("--library", path)
    child = subprocess.run([sys.executable, "-P", "-c", TRIAL_LINK, arch], input=data,
                           capture_output=True, check=False)
    why = child.stderr.decode(errors="replace").rpartition("trial link: ")[2].strip()
    if "arch newer than target" in why:
        raise UsageError(f"nvJitLink could not link --library {path}:\n{why}\nhint: it "
                          "was built for a newer GPU than this one: a library ships "
                          "LTO-IR for the oldest GPU it supports, which links for that "
                          "GPU and every newer one")
    if child.returncode:
        raise UsageError(f"--library {path}: is not the library's LTO-IR "
                         f"({why or 'nvJitLink crashed on it'}); give the library.ltoir "
                         "that --compile-only --arch sm_XX --emit DIR writes")
    print(f"--library {path}: the library's LTO-IR, trial-linked for {arch}")
    return ObjectCode.from_ltoir(data, name="library.ltoir")  # as --emit writes it


def run_command(main) -> None:
    """Exit with main()'s code; a SampleError as one line and its code; Ctrl-C as
    one line and 130; a closed standard output as 1."""
    name = os.path.basename(sys.argv[0])
    sys.stderr = sys.stderr or sys.stdout  # 2>&-: messages still show
    try:
        if sys.stdout is None:  # >&-: the run has nowhere to go
            raise SampleError("standard output is closed")
        # Each line shows as it is printed; a path, as the user typed it
        sys.stdout.reconfigure(line_buffering=True, errors="surrogateescape")
        sys.stderr.reconfigure(errors="surrogateescape")
        exit_code = main()
    except SampleError as error:
        word = "waived" if error.exit_code == 77 else "error"
        print(f"{name}: {word}: {error}", file=sys.stderr)
        exit_code = error.exit_code
    except KeyboardInterrupt:
        print(f"{name}: interrupted", file=sys.stderr)
        exit_code = 130
    except BrokenPipeError:  # Python's recipe: no second error as Python exits
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        exit_code = 1
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the exit code is settled
    sys.exit(exit_code)
