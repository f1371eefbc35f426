# SPDX-License-Identifier: BSD-3-Clause
# Copyright (c) 2026, the jitLtoLinking authors
"""The build report: what one linked kernel is, and what is read off its code.

A `Build` holds the linked `ObjectCode` and the figures the sample prints for
it. `read_report()` fills in the facts that come from the built code itself,
never from what the sample expects: the cubin's ELF symbol table and
relocations (read with pyelftools) say whether `user_transform` is still a
function the kernel calls, and the kernel attributes (on a GPU) or the
cubin's own `.nv.info` records (without one) say how many registers a thread
uses.
"""

from __future__ import annotations

import hashlib
import io
import re
import struct
from dataclasses import dataclass, field

from elftools.common.exceptions import ELFError
from elftools.elf.elffile import ELFFile
from elftools.elf.relocation import RelocationSection

KERNEL, CALLEE = "apply_transform", "user_transform"


@dataclass
class Build:
    """One linked kernel, and what was measured and read off its code."""

    label: str  # "ptx", "lto", "swap", "whole program", "half-LTO" (+ the plug-in, with several)
    code: object = None  # the linked cuda.core ObjectCode (a cubin)
    plugin: str = ""  # the plug-in's file name
    inputs: list = field(default_factory=list)  # ObjectCodes linked: the library's, the plug-in's
    compiles: list[dict] = field(default_factory=list)  # made for this build, each counted once
    ready: object = None  # the cubin --cache-dir kept from an earlier run: nothing to link
    link_ms: float | None = None
    link_cache: dict | None = None  # hit or miss, with --cache-dir
    library_from: str | None = None  # --library FILE, when the library's LTO-IR came from there
    cubin_bytes: int | None = None
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
            "link_cache": self.link_cache and self.link_cache["cache"],
            "library_from": self.library_from,
            "compiles": self.compiles,
            "cubin_bytes": self.cubin_bytes,
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
    registers: dict[str, int] = field(default_factory=dict)  # per function, from .nv.info

    @staticmethod
    def names(symbol: str, function: str) -> bool:
        """Whether `symbol` is `function`, or LTO's copy of it for one caller ($caller$function)."""
        return symbol == function or symbol.endswith(f"${function}")

    def has_function(self, function: str) -> bool:
        return any(self.names(symbol, function) for symbol in self.functions)

    def calls_from(self, caller: str, callee: str) -> int:
        """Call sites in caller's section that point at callee through a relocation."""
        return sum(
            n for symbol, n in self.calls.get(caller, {}).items() if self.names(symbol, callee)
        )


EIATTR_REGCOUNT = 0x2F  # an .nv.info record: (symbol index, registers per thread)


def read_cubin(cubin: bytes) -> CubinFacts:
    """List a cubin's functions, the call sites between them, and each one's register count.

    A call from one function to another stays in the cubin as a relocation (an
    entry the loader fills in with the callee's address) in the caller's
    `.rel(a).text.<caller>` section, naming the callee's symbol. An inlined
    callee that nobody calls any more is not in the symbol table at all. (LTO
    may also keep a private copy of a function inside the caller's own
    section, called by relative address: that copy is in the symbol table,
    but its calls need no relocation.) The `.nv.info` sections hold, among
    other attributes, the registers the assembler gave each function.
    """
    try:
        elf = ELFFile(io.BytesIO(cubin))
        symbols = list(elf.get_section_by_name(".symtab").iter_symbols())
    except (ELFError, AttributeError, ValueError) as exc:
        raise ValueError(f"not an ELF cubin ({exc})") from None
    facts = CubinFacts(functions=[s.name for s in symbols if s["st_info"]["type"] == "STT_FUNC"])
    for section in elf.iter_sections():
        if section.name.startswith(".nv.info"):
            facts.registers.update(_register_counts(section.data(), symbols))
        caller = re.sub(r"^\.rela?\.text\.", "", section.name)
        if not isinstance(section, RelocationSection) or caller == section.name:
            continue
        for relocation in section.iter_relocations():
            callee = symbols[relocation["r_info_sym"]].name
            if callee in facts.functions:
                facts.calls.setdefault(caller, {})
                facts.calls[caller][callee] = facts.calls[caller].get(callee, 0) + 1
    return facts


def _register_counts(data: bytes, symbols: list) -> dict[str, int]:
    """The REGCOUNT records of an .nv.info section: each record is a format byte, an attribute
    byte, then either a 2-byte value or a 2-byte size and that many bytes."""
    counts, at = {}, 0
    while at + 4 <= len(data):
        form, attribute = data[at], data[at + 1]
        size = struct.unpack_from("<H", data, at + 2)[0] if form == 0x04 else 0
        if attribute == EIATTR_REGCOUNT and size == 8:
            index, registers = struct.unpack_from("<II", data, at + 4)
            if index < len(symbols):
                counts[symbols[index].name] = registers
        at += 4 + size
    return counts


def read_report(build: Build) -> None:
    """Fill in registers and call/inline facts from the built code (and build.kernel, on a GPU)."""
    facts = read_cubin(build.cubin)
    build.cubin_bytes = len(build.cubin)
    build.inlined = not facts.has_function(CALLEE)
    build.calls_left = facts.calls_from(KERNEL, CALLEE)
    if not build.inlined and build.calls_left == 0:
        # a private copy called by relative address: its call sites are not in the ELF
        build.calls_left = None
    if build.kernel is not None:
        build.registers, build.registers_from = (
            build.kernel.attributes.num_regs,
            "kernel attributes",
        )
    else:
        build.registers, build.registers_from = facts.registers.get(KERNEL), "cubin"


# ---------------------------------------------------------------------------
# What is printed and recorded
# ---------------------------------------------------------------------------


def report_lines(build: Build) -> list[str]:
    """The build's report: compile and link time, cubin size, registers, inlined or not; then
    NVRTC's warnings, where the library came from, and what --cache-dir did."""
    tag = f"  [{build.label}]"
    if build.skipped:
        return [f"{tag} skipped: {build.skipped}"]
    if build.inlined:
        calls = "user_transform inlined (0 calls left)"
    elif build.calls_left is None:
        calls = "user_transform still a function (a private copy the kernel calls)"
    else:
        calls = f"user_transform still a call ({build.calls_left} call sites)"
    compiled = f"compile {build.compile_ms:.1f} ms" if build.compile_ms else "nothing compiled"
    link = "no link" if build.link_ms is None else f"link {build.link_ms:.1f} ms"
    size = f"cubin {build.cubin_bytes or 0:,} bytes, {build.registers} registers"
    lines = [f"{tag} {compiled}, {link}, {size}, {calls}"]
    if build.library_from and build.kind != "swap":  # the swap's own line says it
        shipped = build.library_from
        lines.append(f"{tag} library.cu not compiled in this run: its LTO-IR is {shipped}")
    for record in build.compiles:
        if record.get("warnings"):
            lines.append(f"{tag} NVRTC warned about {record['module']}:")
            lines += [f"    {line}" for line in record["warnings"].splitlines()]
        if record["cache"] != "off" or record.get("note"):
            ms = f"{record['ms']:.1f} ms{_saved(record, ', ')}"
            lines.append(f"{tag} cache {record['cache']}: {record['module']} ({ms}){_note(record)}")
    if build.link_cache:
        link_cache = build.link_cache
        saved = f" ({_saved(link_cache, '')})" if link_cache.get("saved_ms") is not None else ""
        lines.append(f"{tag} link cache {link_cache['cache']}{saved}{_note(link_cache)}")
    return lines


def _saved(record: dict, before: str) -> str:
    saved = record.get("saved_ms")
    return "" if saved is None else f"{before}saved {saved:.1f} ms"


def _note(record: dict) -> str:
    return f"; {record['note']}" if record.get("note") else ""


def verification_lines(build: Build) -> list[str]:
    """What the check of a build's output found: the count and largest error, then which check."""
    check = build.verification
    if not check.ok:
        return [f"  [{build.label}] FAILED: {check.describe()}"]
    passed = {
        "reference": "verified against NumPy reference",
        "cpu-compiled": "verified against the same Python function compiled for the CPU"
        " (numba.vectorize)",
        "cross-check": "cross-checked against the ptx build: they match",
    }[check.method]
    return [f"  [{build.label}] {check.describe()}", f"  [{build.label}] result {passed}"]


def digest(source: str) -> str:
    """A source's SHA-256, kept in each compile record: what was compiled, whatever its name."""
    return hashlib.sha256(source.encode("utf-8", "backslashreplace")).hexdigest()


def compile_record(module, target: str, ms: float, cache: dict, warnings: str = "") -> dict:
    """One compile, as the report and --json keep it: what, to what, how long, the cache's part."""
    record = {
        "module": module.name,
        "target": target,
        "ms": ms,
        **cache,
        "source_sha256": digest(module.source),
    }
    if module.is_python:
        record["compiler"] = "numba-cuda"
    if warnings:
        record["warnings"] = warnings
    return record


def swap_line(build: Build, compiles: list[dict], library, shipped: str | None) -> str:
    """Step [3]'s proof: what this build compiled, and how often the library (by its source's
    digest, whatever a file is named) became LTO-IR in the run."""
    compiled = ", ".join(r["module"] for r in build.compiles if r["cache"] != "hit") or "nothing"
    if shipped:
        library = f"library.cu not compiled in this run (its LTO-IR: {shipped})"
    else:
        mine = digest(library.source)
        count = sum(
            r["source_sha256"] == mine and r["target"] == "ltoir" and r["cache"] != "hit"
            for r in compiles
        )
        library = (
            "library.cu to LTO-IR "
            + {0: "not at all (cache hit)", 1: "once"}.get(count, f"{count} times")
            + " in this run"
        )
    return (
        f"  [{build.label}] library LTO-IR reused from step [2], not compiled again: "
        f"NVRTC compiled {compiled} in this step; {library}"
    )
