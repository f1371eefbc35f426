# SPDX-License-Identifier: BSD-3-Clause
# Copyright (c) 2026, the jitLtoLinking authors
"""The build report: what one linked kernel is, and what is read off its code.

A `Build` holds the linked `ObjectCode` and the figures the sample prints for
it. `read_report()` fills in the facts that come from the built code itself,
never from what the sample expects: the cubin's ELF symbol table and
relocations (read with pyelftools) say whether `user_transform` is still a
function the kernel calls, and the kernel attributes (or, without a GPU, the
linker's verbose log) say how many registers a thread uses.
"""

from __future__ import annotations

import hashlib
import io
import re
from dataclasses import dataclass, field

from elftools.common.exceptions import ELFError
from elftools.elf.elffile import ELFFile
from elftools.elf.relocation import RelocationSection


@dataclass
class Build:
    """One linked kernel, and what was measured and read off its code."""

    label: str  # "ptx", "lto", "swap", "whole program", "half-LTO" (and the plug-in's name, with several)
    code: object = None  # the linked cuda.core ObjectCode (a cubin)
    plugin: str = ""  # the plug-in's file name
    inputs: list = field(default_factory=list)  # the ObjectCodes linked: the library's, the plug-in's
    compiles: list[dict] = field(default_factory=list)  # one record per NVRTC compile made for this build
    link_ms: float | None = None
    link_log: str = ""
    registers: int | None = None
    registers_from: str = ""
    calls_left: int | None = None
    inlined: bool | None = None
    kernel: object = None  # the loaded apply_transform, on a GPU run
    verification: object = None
    skipped: str | None = None

    @property
    def cubin(self) -> bytes:
        return bytes(self.code.code) if self.code is not None else b""

    @property
    def kind(self) -> str:
        """The label without the plug-in's name: 'ptx', 'lto', 'half-LTO', ..."""
        return self.label.removesuffix(f" {self.plugin}") if self.plugin else self.label

    @property
    def compile_ms(self) -> float:
        return sum(record["ms"] for record in self.compiles)

    def summary(self) -> dict:
        """The build's figures, for --json."""
        return {
            "build": self.label,
            "plugin": self.plugin or None,
            "skipped": self.skipped,
            "compile_ms": self.compile_ms,
            "link_ms": self.link_ms,
            "compiles": self.compiles,
            "cubin_bytes": len(self.cubin) or None,
            "registers": self.registers,
            "registers_from": self.registers_from or None,
            "user_transform_calls_left": self.calls_left,
            "user_transform_inlined": self.inlined,
            "verification": self.verification.as_dict() if self.verification else None,
        }


# ---------------------------------------------------------------------------
# Reading the cubin
# ---------------------------------------------------------------------------


@dataclass
class CubinFacts:
    """What a linked cubin holds, read from its ELF sections."""

    functions: list[str]
    # calls[caller][callee]: call sites in caller's code still pointing at callee
    calls: dict[str, dict[str, int]] = field(default_factory=dict)

    @staticmethod
    def names(symbol: str, function: str) -> bool:
        """Whether `symbol` is `function` or a copy LTO made of it for one caller ($caller$function)."""
        return symbol == function or symbol.endswith(f"${function}")

    def has_function(self, function: str) -> bool:
        return any(self.names(symbol, function) for symbol in self.functions)

    def calls_from(self, caller: str, callee: str) -> int:
        """Call sites in caller's section that point at callee through a relocation."""
        return sum(n for symbol, n in self.calls.get(caller, {}).items() if self.names(symbol, callee))


def read_cubin(cubin: bytes) -> CubinFacts:
    """List a cubin's functions and the call sites between them.

    A call from one function to another stays in the cubin as a relocation
    (an entry the loader fills in with the callee's address) in the caller's
    `.rel(a).text.<caller>` section, naming the callee's symbol. An inlined
    callee that nobody calls any more is not in the symbol table at all. (LTO
    may also keep a private copy of a function inside the caller's own
    section, called by relative address: that copy is in the symbol table,
    but its calls need no relocation.)
    """
    try:
        elf = ELFFile(io.BytesIO(cubin))
        symbols = list(elf.get_section_by_name(".symtab").iter_symbols())
    except (ELFError, AttributeError, ValueError) as exc:
        raise ValueError(f"not an ELF cubin ({exc})") from None
    functions = [s.name for s in symbols if s["st_info"]["type"] == "STT_FUNC"]
    calls: dict[str, dict[str, int]] = {}
    for section in elf.iter_sections():
        caller = re.sub(r"^\.rela?\.text\.", "", section.name)
        if not isinstance(section, RelocationSection) or caller == section.name:
            continue
        for relocation in section.iter_relocations():
            callee = symbols[relocation["r_info_sym"]].name
            if callee in functions:
                calls.setdefault(caller, {})
                calls[caller][callee] = calls[caller].get(callee, 0) + 1
    return CubinFacts(functions=functions, calls=calls)


def registers_from_link_log(log: str, kernel: str) -> int | None:
    """Registers per thread of `kernel`, as ptxas reports it in a verbose link log.

    The last report wins: when nvJitLink compiles PTX inputs, ptxas reports each
    module and then the linker reports the final, linked kernel.
    """
    lines = log.splitlines()
    found = None
    header = re.compile(rf"Function properties for '?{re.escape(kernel)}'?:?\s*$")
    used = re.compile(r"[Uu]sed (\d+) registers")
    for i, line in enumerate(lines):
        if header.search(line):
            for following in lines[i + 1 : i + 4]:
                match = used.search(following)
                if match:
                    found = int(match.group(1))
                    break
    return found


def read_report(build: Build, kernel_name: str = "apply_transform", callee: str = "user_transform") -> None:
    """Fill in registers and call/inline facts from the built code (and build.kernel, loaded on a GPU run)."""
    facts = read_cubin(build.cubin)
    build.inlined = not facts.has_function(callee)
    build.calls_left = facts.calls_from(kernel_name, callee)
    if not build.inlined and build.calls_left == 0:
        build.calls_left = None  # a private copy called by relative address: its call sites are not in the ELF
    if build.kernel is not None:
        build.registers = build.kernel.attributes.num_regs
        build.registers_from = "kernel attributes"
    else:
        build.registers = registers_from_link_log(build.link_log, kernel_name)
        build.registers_from = "linker log"


def report_lines(build: Build) -> list[str]:
    """The build's report: compile and link time, cubin size, registers, inlined or not, cache state."""
    if build.skipped:
        return [f"  [{build.label}] skipped: {build.skipped}"]
    if build.inlined:
        calls = "user_transform inlined (0 calls left)"
    elif build.calls_left is None:
        calls = "user_transform still a function (a private copy the kernel calls)"
    else:
        calls = f"user_transform still a call ({build.calls_left} call sites)"
    link = "no link" if build.link_ms is None else f"link {build.link_ms:.1f} ms"
    compiled = f"compile {build.compile_ms:.1f} ms" if build.compiles else "nothing compiled"
    lines = [
        f"  [{build.label}] {compiled}, {link}, cubin {len(build.cubin):,} bytes, {build.registers} registers, {calls}"
    ]
    for record in build.compiles:
        if record["cache"] != "off":
            saved = record.get("saved_ms")
            extra = f", saved {saved:.1f} ms" if saved is not None else ""
            note = f"; {record['note']}" if record.get("note") else ""
            lines.append(
                f"  [{build.label}] cache {record['cache']}: {record['module']} ({record['ms']:.1f} ms{extra}){note}"
            )
    return lines


def verification_lines(build: Build) -> list[str]:
    """What the check of a build's output found: the count and largest error, then which check passed."""
    check = build.verification
    if not check.ok:
        return [f"  [{build.label}] FAILED: {check.describe()}"]
    passed = {
        "reference": "verified against NumPy reference",
        "cpu-compiled": "verified against the same Python function compiled for the CPU (numba.vectorize)",
        "cross-check": "cross-checked against the ptx build: they match",
    }[check.method]
    return [f"  [{build.label}] {check.describe()}", f"  [{build.label}] result {passed}"]


def digest(source: str) -> str:
    """A source's SHA-256, kept in each compile record: which source a compile was of, whatever its file name."""
    return hashlib.sha256(source.encode()).hexdigest()


def compile_record(module: str, target: str, ms: float, source: str, cache: dict) -> dict:
    """One compile, as the report and --json keep it: what was compiled, to what, how long, and the cache's part."""
    return {"module": module, "target": target, "ms": ms, **cache, "source_sha256": digest(source)}


def swap_line(label: str, compiles: list[dict], step_start: int, library_source: str, library_name: str) -> str:
    """Step [3]'s proof: what was compiled in the step (from compiles[step_start:]), and the library's LTO-IR compiles."""
    compiled = ", ".join(r["module"] for r in compiles[step_start:] if r["cache"] != "hit") or "nothing"
    library = digest(library_source)
    count = sum(r.get("source_sha256") == library and r["target"] == "ltoir" and r["cache"] != "hit" for r in compiles)
    times = {0: "not at all (cache hit)", 1: "once"}.get(count, f"{count} times")
    return (
        f"  [{label}] library LTO-IR reused from step [2], not compiled again: NVRTC compiled {compiled} in this step; "
        f"{library_name} to LTO-IR {times} in this run"
    )
