# SPDX-License-Identifier: BSD-3-Clause
# Copyright (c) 2026, the jitLtoLinking authors
"""What a run reports: one record per build (read off its cubin as it is made), the report line,
the --json record and the --emit files, and how the command ends (its exit code, once settled)."""

import contextlib
import io
import json
import os
import signal
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from cuda.core import Linker, LinkerOptions, ObjectCode
from elftools.elf.elffile import ELFFile


class SampleError(Exception):
    exit_code = 1  # a build or a check failed


class UsageError(SampleError):
    exit_code = 2  # an option or input cannot be used, as argparse exits


class WaivedError(SampleError):
    exit_code = 77  # no usable driver or GPU: a GPU runner reads it as "skipped"


def timed(call):
    """What call() returns, and the milliseconds it took."""
    start = time.perf_counter()
    return call(), (time.perf_counter() - start) * 1e3


def read_cubin(cubin: bytes, kernel: str) -> tuple[list[str], dict, int, int | None]:
    """The cubin's functions; its variables a host can write ({name: float32 count}); the kernel's
    calls of user_transform the loader fills in; and the kernel's registers per thread."""
    elf = ELFFile(io.BytesIO(cubin))
    symbols = list(elf.get_section_by_name(".symtab").iter_symbols())
    functions = [symbol.name for symbol in symbols if symbol["st_info"]["type"] == "STT_FUNC"]
    variables = {symbol.name: symbol["st_size"] // 4 for symbol in symbols  # global, defined here
                 if symbol["st_info"]["bind"] == "STB_GLOBAL" and symbol["st_shndx"] != "SHN_UNDEF"
                 and symbol["st_info"]["type"] in ("STT_OBJECT", "STT_LOPROC")}  # LOPROC: in -rdc
    # A call to another module's function stays a relocation in the caller's code
    relocations = elf.get_section_by_name(f".rela.text.{kernel}")
    calls = sum(symbols[r["r_info_sym"]].name == "user_transform"
                for r in relocations.iter_relocations()) if relocations else 0
    registers = None
    for section in elf.iter_sections():  # NVIDIA's .nv.info records: format, attribute, size
        records = section.data() if section.name.startswith(".nv.info") else b""
        at = 0
        while at + 4 <= len(records):
            size = int.from_bytes(records[at + 2:at + 4], "little") if records[at] == 4 else 0
            if records[at + 1] == 0x2F:  # EIATTR_REGCOUNT: the function's symbol, its registers
                function = symbols[int.from_bytes(records[at + 4:at + 8], "little")].name
                if function == kernel:
                    registers = int.from_bytes(records[at + 8:at + 12], "little")
            at += 4 + size
    return functions, variables, calls, registers


@dataclass(eq=False)  # a build is itself: two are never equal
class Build:
    """One build: what it linked and how, what its code holds, how its kernel ran. It is the report
    line, the benchmark's row and the --json entry."""

    label: str  # "ptx", "lto", "swap"; "lto polynomial.cu" for a user's plug-in
    arch: str
    cubin: ObjectCode = field(repr=False)
    library: ObjectCode | None = field(repr=False)  # the codes linked (None: one source, no link)
    plugin: ObjectCode | None = field(repr=False)
    kernel: str = "apply_transform"
    compile_ms: float | None = None  # the plug-in's compile
    link_ms: float | None = None
    through_pointer: bool = False  # its library calls user_transform through a pointer (study)
    set_values: dict = field(default_factory=dict)  # written into its code after linking
    set_ms: float | None = None  # their write, a launch and the kernel's end
    # Read off the cubin as the build is made
    variables: dict = field(init=False)  # its variables a host can write: {name: float32 count}
    cubin_bytes: int = field(init=False)
    registers: int | None = field(init=False)  # per thread, of the kernel
    calls: int = field(init=False)  # the kernel's direct calls of user_transform
    user_transform: str = field(init=False)  # what became of it
    verification: dict | None = None  # what the check of its output found
    kernel_ms: float | None = None  # the study's: the median kernel time

    def __post_init__(self):
        code = bytes(self.cubin.code)
        functions, self.variables, self.calls, self.registers = read_cubin(code, self.kernel)
        self.cubin_bytes = len(code)
        if self.through_pointer:
            self.user_transform = "called through the library's pointer (an indirect call)"
        elif self.calls:
            self.user_transform = f"still a call ({self.calls} call sites)"
        elif any(name.endswith("user_transform") for name in functions):
            self.user_transform = "still a function (a private copy the kernel calls)"
        else:
            self.user_transform = "inlined (0 calls left)"

    @property
    def failed(self) -> bool:
        return bool(self.verification and self.verification["bad"])

    def figures(self) -> dict:  # for --json: all but the code
        return {key: value for key, value in vars(self).items()
                if not isinstance(value, ObjectCode)}


def print_report(build: Build) -> None:
    """The build's figures, and what the check of its output found."""
    times = [f"{what} {ms:.1f} ms" for what, ms in (("compile", build.compile_ms),
                                                     ("link", build.link_ms)) if ms is not None]
    times += [f"{name} = {', '.join(f'{value:g}' for value in values)}"
              for name, values in build.set_values.items()]
    if build.set_values:
        times.append("not written (no GPU)" if build.set_ms is None else
                     f"written into the linked code and launched in {build.set_ms:.2f} ms, "
                     "without compiling or linking again")
    lines = [", ".join([*times, f"cubin {build.cubin_bytes:,} bytes",
                        f"{build.registers} registers", f"user_transform {build.user_transform}"])]
    found = build.verification
    if found and not found["bad"]:
        lines.append(f"{found['checked']:,} elements checked, largest error "
                     f"{found['largest_error']:.3g}")
        lines.append(f"result {found['against']}")
    elif found:
        unwritten = f" ({found['unwritten']:,} never written)" if found["unwritten"] else ""
        lines.append(f"FAILED: {found['bad']:,} of {found['checked']:,} elements wrong, first at "
                     f"index {found['first_bad']:,}, largest error {found['largest_error']:.3g}"
                     f"{unwritten}")
    print("\n".join(f"  [{build.label}] {line}" for line in lines))


# ==== What a run writes: --json and --emit ====================================
@contextlib.contextmanager
def run_record(json_path: str | None, emit: str | None, **run):
    """The run's record: its figures (run's), and "builds", a list to add to. --json PATH gets it
    whole as the run starts, with "exit_code": null (a killed run says it did not finish), and again
    as it ends; --emit DIR gets each build's code as it ends. With --json -, standard output gets
    the record alone, at the end (the report goes to standard error). A failed run emits nothing."""
    record = {"sample": "jitLtoLinking", **run, "exit_code": None, "builds": []}
    exit_code = 1  # until the run ends well
    if json_path not in (None, "-"):
        write_json(json_path, record, UsageError)
    report_to = sys.stderr if json_path == "-" else sys.stdout
    try:
        with contextlib.redirect_stdout(report_to):
            yield record
            if emit:
                emit_builds(Path(emit), record["builds"])
        exit_code = 0
    except SampleError as error:
        exit_code = error.exit_code
        raise
    finally:
        if json_path:
            builds = [build.figures() for build in record["builds"]]
            write_json(json_path, {**record, "exit_code": exit_code, "builds": builds})


def write_json(path: str, record: dict, error=SampleError) -> None:
    """The record to PATH ('-': standard output), whole: a temporary file, then renamed."""
    text = json.dumps(record, indent=2) + "\n"
    if path == "-":
        print(text, end="")  # nothing, if standard output is closed
        return
    temporary = os.path.join(os.path.dirname(path), f".jitLtoLinking-{os.getpid()}.json")
    try:
        with open(temporary, "x") as file:  # a new file, as the umask has it
            file.write(text)
        os.replace(temporary, path)
    except OSError as exc:
        raise error(f"--json {path}: cannot be written ({exc.strerror})") from None


def emit_builds(folder: Path, builds: list[Build]) -> None:
    """Each build's code in --emit DIR, named after its label: its cubin, the plug-in code it
    linked, the PTX that LTO made; each library once (library.ltoir: what --library takes)."""
    files = {}
    for build in builds:
        name = build.label.replace(" ", "-")
        files[folder / f"{name}.cubin"] = build.cubin
        if build.library:
            library, plugin = build.library, build.plugin
            files[folder / f"{Path(library.name).stem}.{library.code_type}"] = library
            files[folder / f"{name}.plugin.{plugin.code_type}"] = plugin
            if library.code_type == plugin.code_type == "ltoir":
                options = LinkerOptions(arch=build.arch, link_time_optimization=True, ptx=True)
                files[folder / f"{name}.ptx"] = Linker(library, plugin, options=options).link("ptx")
    for path, code in files.items():
        data = bytes(code.code)  # PTX as NVRTC makes it ends with a C string's NUL
        created = False
        try:
            folder.mkdir(parents=True, exist_ok=True)
            with open(path, "xb") as file:  # a file that is not there yet
                created = True
                file.write(data.rstrip(b"\0") if code.code_type == "ptx" else data)
        except OSError as exc:
            if created:  # ours, and not whole
                path.unlink()
            raise SampleError(f"--emit: {path} could not be written ({exc.strerror})") from None


# ==== How the command ends ====================================================
def run_command(main) -> None:
    """Exit with what main() returns; a SampleError as one line ("error", or "waived" for 77) and
    its exit code; a closed standard output (Python's BrokenPipeError recipe) as 1."""
    sys.stderr = sys.stderr or sys.stdout  # standard error closed (2>&-): messages still show
    if sys.stdout:
        sys.stdout.reconfigure(line_buffering=True)  # each line shows as it is printed, pipes too
    try:
        exit_code = main()
    except SampleError as error:
        word = "waived" if error.exit_code == 77 else "error"
        print(f"{os.path.basename(sys.argv[0])}: {word}: {error}", file=sys.stderr)
        exit_code = error.exit_code
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        exit_code = 1
    for signum in (signal.SIGINT, signal.SIGTERM):  # the record has the exit code: so will the
        signal.signal(signum, signal.SIG_IGN)  # process, whatever comes as Python shuts down
    sys.exit(exit_code)
