# SPDX-License-Identifier: BSD-3-Clause
# Copyright (c) 2026, the jitLtoLinking authors
"""The run around the lesson: one line and an exit code for whatever ends it, its clock, the
--json record (written whatever ends the run) and --emit. Standard library only, so that what goes
wrong while the packages load (one missing, Ctrl-C) can still be said."""

from __future__ import annotations

import contextlib
import errno
import json
import os
import signal
import sys
import tempfile
import time
from pathlib import Path

PROG = "jitLtoLinking.py"
SAMPLE_FOLDER = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
INSTALL_HINT = ("install what the sample needs with: python -m pip install -r "
                + os.path.join(SAMPLE_FOLDER, "requirements.txt"))
EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2  # usage: argparse's own code too
EXIT_WAIVED = 77  # no usable CUDA driver or GPU: a GPU runner reads it as "skipped"
EXIT_INTERRUPTED = 130  # Ctrl-C, as shells report it
# A print that fails: the reader went away, a full disk, a file too large.
STDOUT_ERRORS = (errno.EPIPE, errno.ENOSPC, errno.EFBIG, errno.EIO)
STARTED = [time.perf_counter()]  # when the script began: its first run's clock counts from there
RUNS: list = []  # the record of the run in progress, for Ctrl-C


class SampleError(Exception):
    """An error meant for the person at the terminal; exit_code says how the run ends."""

    exit_code = EXIT_FAILED


class UsageError(SampleError):
    exit_code = EXIT_USAGE


class WaivedError(SampleError):
    exit_code = EXIT_WAIVED


def say(text: str) -> None:
    """One line on standard error, whatever state the streams are in."""
    with contextlib.suppress(OSError, ValueError, AttributeError):
        print(f"{PROG}: {text}", file=sys.stderr, flush=True)


def is_record(path: str) -> bool:
    """Whether the file at `path` holds a --json record of this sample, so a run may replace it."""
    try:
        with open(path, encoding="utf-8") as file:
            return json.loads(file.read(64 << 20)).get("sample") == "jitLtoLinking"
    except (OSError, ValueError, AttributeError):
        return False


class Record:
    """What --json writes (the run's figures, builds and exit code), and the run's clock."""

    def __init__(self, json_path: str | None):
        self.json_path = json_path  # absolute, '-', or None
        self.approved = False  # --json checked: writable, not an input, no file of the user's
        self.data: dict = {"sample": "jitLtoLinking", "elements": None, "builds": []}
        self.builds: list = []  # every build, as it is made (each has .summary())
        self.started = STARTED.pop() if STARTED else time.perf_counter()

    def seconds(self) -> float:
        """Wall time since the run (or the script, for its first run) started."""
        return time.perf_counter() - self.started

    def all_verified(self) -> bool:
        """Whether every check of the run passed: each build's, and each benchmark row's."""
        rows = self.data.get("benchmark", {}).get("rows", [])
        return all([b.verification.ok for b in self.builds if b.verification]
                   + [row["verified"] is not False for row in rows])

    def write(self, exit_code: int) -> None:
        """Write the record to --json; UsageError if it cannot be. Before --json is checked, only
        over nothing or an earlier record: a run that fails early leaves no earlier success."""
        path, self.json_path = self.json_path, None  # written once
        if path is None or not self.approved and (path == "-" or os.path.exists(path)
                                                  and not is_record(path)):
            return
        self.data.update(builds=[build.summary() for build in self.builds], exit_code=exit_code)
        self.data["timings_s"] = {"total": self.seconds()}
        try:
            write_text(path, json.dumps(self.data, indent=2, default=str) + "\n")
        except (OSError, AttributeError) as exc:  # AttributeError: no standard output at all
            if self.approved:
                reason = getattr(exc, "strerror", None) or "standard output is closed"
                raise UsageError(f"--json {path}: cannot write there ({reason})") from None


def write_text(path: str, text: str) -> None:
    """Write text to path ('-': standard output); a file whole, never half a record."""
    if path == "-":
        sys.__stdout__.write(text)
        sys.__stdout__.flush()
    elif os.path.exists(path) and not os.path.isfile(path):
        fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK)  # a pipe without a reader fails, not waits
        os.set_blocking(fd, True)
        with open(fd, "w", encoding="utf-8") as file:
            file.write(text)
    else:  # written beside the file, then renamed over it
        folder, name = os.path.split(path)
        file = tempfile.NamedTemporaryFile("w", encoding="utf-8", dir=folder, prefix=f".{name}.",
                                           delete=False)
        try:
            with file:
                file.write(text)
            os.replace(file.name, path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(file.name)
            raise


def json_path_in(argv: list[str]) -> str | None:
    """--json PATH as given (absolute), read before the rest of the command line."""
    for arg, value in zip(argv, [*argv[1:], ""]):
        value = value if arg == "--json" else arg.removeprefix("--json=")
        if (arg == "--json" or arg.startswith("--json=")) and value.strip():
            return value if value == "-" else os.path.abspath(os.path.expanduser(value))
    return None


def interrupted(signum=None, frame=None) -> None:
    """Ctrl-C in a script: one line, the record, and exit 130 at once (no finalizer half run)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    say("interrupted")
    with contextlib.suppress(SampleError):
        (RUNS[-1] if RUNS else Record(json_path_in(sys.argv[1:]))).write(EXIT_INTERRUPTED)
    os._exit(EXIT_INTERRUPTED)


def import_problem(missing: ImportError) -> str:
    """What a failed import means: a file of Utilities/ missing, or a package to install."""
    if (missing.name or "").startswith(("jitlto_", "cuda_samples_utils")):
        return (f"the Utilities/ folder next to {PROG} is missing or incomplete ({missing}); "
                "restore it from the sample")
    return f"{missing}: a package is missing or broken; {INSTALL_HINT}"


@contextlib.contextmanager
def startup(as_script: bool):
    """Around a script's imports: Ctrl-C is `interrupted`, a missing package is one line, and
    standard output goes line by line (a pipe shows the run as it goes)."""
    if as_script:
        signal.signal(signal.SIGINT, interrupted)
        if sys.stdout is not None:
            sys.stdout.reconfigure(line_buffering=True, errors="backslashreplace")
    try:
        yield
    except ImportError as missing:
        if not as_script:
            raise
        say(f"error: {import_problem(missing)}")
        sys.exit(EXIT_FAILED)


class Run:
    """One run: its record, what it holds (the GPU session), and how it ends (a line, a code)."""

    def __init__(self, argv: list[str] | None):
        self.record = Record(json_path_in(sys.argv[1:] if argv is None else argv))
        self.exit_code = EXIT_FAILED
        self.held = contextlib.ExitStack()

    def __enter__(self) -> Run:
        RUNS.append(self.record)
        if self.record.json_path == "-":  # standard output carries the JSON, the story stderr
            self.held.enter_context(contextlib.redirect_stdout(sys.stderr))
        return self

    def __exit__(self, kind, error, traceback) -> bool:
        try:
            self.held.close()
            if error is None and sys.stdout is not None:
                sys.stdout.flush()  # the last lines may still wait in the buffer
        except BaseException as late:  # noqa: BLE001 -- a closed pipe, Ctrl-C while giving back
            error = error or late
        handled = self.explain(error)
        try:
            self.record.write(self.exit_code)
        except SampleError as problem:
            say(f"error: {problem}")
            self.exit_code = problem.exit_code
        RUNS.remove(self.record)
        return handled

    def explain(self, error) -> bool:
        """Say what ended the run and set its exit code; False for a bug, which goes on up."""
        if isinstance(error, SystemExit):  # argparse has said it: 0 after --help, else 2
            self.exit_code = error.code
            return False
        if isinstance(error, OSError) and error.errno in STDOUT_ERRORS and not error.filename:
            with contextlib.suppress(OSError, ValueError):  # so that exit's last flush cannot fail
                os.dup2(os.open(os.devnull, os.O_WRONLY), 1)
            reason = "it was closed" if isinstance(error, BrokenPipeError) else error.strerror
            error = SampleError(f"standard output could not be written ({reason}); the run "
                                "stopped there")
        if isinstance(error, SampleError):
            say(f"{'waived' if error.exit_code == EXIT_WAIVED else 'error'}: {error}")
            self.exit_code = error.exit_code
        elif isinstance(error, KeyboardInterrupt):
            say("interrupted")
            self.exit_code = EXIT_INTERRUPTED
        elif isinstance(error, ImportError):  # a package loaded only when needed (CuPy)
            say(f"error: {import_problem(error)}")
        elif error is not None:
            return False
        return True


# ==== What a run writes, checked before anything is built: --json and --emit ====


def check_outputs(args, record) -> None:
    """UsageError unless --json and --emit can be written and are none of the run's inputs."""
    record.data["elements"] = args.elements
    if sys.stdout is None:
        raise (UsageError if args.json == "-" else SampleError)(
            "standard output is closed, so nothing the run says could be seen")
    reads = [Path(SAMPLE_FOLDER, "jitLtoLinking.py"), *Path(SAMPLE_FOLDER, "Utilities").glob("*"),
             *([Path(args.library)] if args.library else [])]
    for plugin in args.plugins:
        if plugin.path:
            folder = plugin.path.parent  # a Python plug-in may import any module of its folder
            reads += [*folder.glob("**/*.py")] if plugin.is_python else [plugin.path]
            reads += plugin.headers or []
    for option, path in (("--json", args.json), ("--emit", args.emit)):
        if path in (None, "-"):
            continue
        try:
            os.stat(path)  # a name too long, or a folder it cannot enter, shows here
        except FileNotFoundError:
            continue
        except OSError as exc:
            raise UsageError(f"{option} {path}: cannot write there ({exc.strerror})") from None
        if any(os.path.samefile(path, source) for source in reads if source.exists()):
            raise UsageError(f"{option} {path}: is an input of this run; it would be overwritten")
    if args.json not in (None, "-"):
        check_json_path(args.json, args.emit)
    if args.emit:
        make_emit_folder(Path(args.emit), args.plugins)
    record.json_path, record.approved = args.json, True


def check_json_path(path: str, emit: str | None) -> None:
    where = f"--json {path}"
    if emit and Path(path).is_relative_to(emit):  # said first: the folder may not be made yet
        raise UsageError(f"{where}: is inside --emit {emit}, which holds what the run builds; "
                         "choose a path outside it")
    if os.path.isdir(path):
        raise UsageError(f"{where}: cannot write there (it is a directory, not a file)")
    folder = os.path.dirname(path)
    if not os.path.isdir(folder) or not os.access(folder, os.W_OK | os.X_OK):
        raise UsageError(f"{where}: cannot write there (no folder {folder} this user can write to)")
    if os.path.isfile(path) and not is_record(path):
        raise UsageError(f"{where}: the file exists and is not a --json record of this sample; "
                         "remove it or choose another path")


def make_emit_folder(folder: Path, plugins: list) -> None:
    """Make --emit DIR, or take it if it is an empty folder: the run never replaces a file there."""
    where = f"--emit {folder}"
    if folder.exists() and not folder.is_dir():
        raise UsageError(f"{where}: is not a directory")
    if any(p.path and p.path.parent == folder for p in plugins):
        raise UsageError(f"{where}: holds a plug-in; give a folder of its own, so that what the "
                         "run writes never mixes with your sources")
    try:
        folder.mkdir(parents=True, exist_ok=True)
        if any(folder.iterdir()):
            raise UsageError(f"{where}: already holds files; give a new or empty folder (the run "
                             "writes only where nothing would be replaced)")
    except OSError as exc:
        raise UsageError(f"{where}: cannot write there ({exc.strerror or exc})") from None
    if not os.access(folder, os.W_OK | os.X_OK):
        raise UsageError(f"{where}: cannot write there (Permission denied)")


def emit(path: Path, data: bytes) -> None:
    """Write one --emit file, never over an existing one (the folder was new or empty)."""
    path.parent.mkdir(exist_ok=True)
    with open(path, "xb") as file:
        file.write(data)


def emit_build(root: Path, build, arch: str) -> None:
    """A build's files under --emit: its inputs (each once), its cubin, and after LTO the PTX that
    LTO made of them (linked once more, with ptx=True, to read)."""
    from cuda.core import Linker, LinkerOptions

    stem, _, extension = build.plugin.rpartition(".")  # a folder name any locale can write:
    mine = os.fsdecode(f"{stem}-{extension}".encode("utf-8", "surrogateescape"))
    folder = root / ("swap" if build.kind == "swap" else mine)
    name = build.kind.replace(" ", "-")
    for code in build.inputs if len(build.inputs) == 2 else []:  # the library's, the plug-in's
        base = folder / "plugin" if code is build.inputs[1] else root / Path(code.name).stem
        path = base.with_suffix(f".{code.code_type}")
        if not path.exists():  # shared by several builds
            emit(path, as_bytes(code))
    emit(folder / f"{name}.cubin", as_bytes(build.code))
    if len(build.inputs) == 2 and all(code.code_type == "ltoir" for code in build.inputs):
        options = LinkerOptions(arch=arch, link_time_optimization=True, ptx=True)
        emit(folder / f"{name}.ptx", as_bytes(Linker(*build.inputs, options=options).link("ptx")))


def as_bytes(code) -> bytes:
    """An ObjectCode's bytes, as a file holds them (NVRTC ends its PTX with the C string's NUL)."""
    data = code.code.encode() if isinstance(code.code, str) else bytes(code.code)
    return data.rstrip(b"\0") if code.code_type == "ptx" else data
