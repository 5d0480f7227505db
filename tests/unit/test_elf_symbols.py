"""Function names for sampled addresses, read from ELF symbol tables: constructed files (sized and
unsized symbols, gaps, a stripped file), hostile ones (truncated, out-of-bounds tables, names past
their string table), and a real process's own code."""

from __future__ import annotations

import os
import struct
import subprocess
import sys
import time

import pytest

from fieldguide.host.elf_symbols import ElfSymbols, executable_mappings, symbolize

VADDR = 0x400000
TEXT = 0x1000  # file offset of the code the symbols describe


def build_elf(symbols: list[tuple[str, int, int, int]], *, symtab_kind: int = 2, strtab_size: int | None = None,
              symtab_offset: int | None = None) -> bytes:
    """A 64-bit little-endian ELF file: one PT_LOAD segment mapping the file at VADDR, a symbol
    table of (name, value, size, type) and its string table."""
    strtab = b"\0"
    entries = [struct.pack("<IBBHQQ", 0, 0, 0, 0, 0, 0)]
    for name, value, size, kind in symbols:
        entries.append(struct.pack("<IBBHQQ", len(strtab), (1 << 4) | kind, 0, 1, value, size))
        strtab += name.encode() + b"\0"
    symtab = b"".join(entries)
    body = bytearray(TEXT + 0x200)
    sym_at = len(body)
    body += symtab
    str_at = len(body)
    body += strtab
    sh_at = len(body)
    sections = [
        struct.pack("<IIQQQQIIQQ", 0, 0, 0, 0, 0, 0, 0, 0, 0, 0),
        struct.pack("<IIQQQQIIQQ", 0, symtab_kind, 0, 0, symtab_offset if symtab_offset is not None else sym_at,
                    len(symtab), 2, 1, 8, 24),
        struct.pack("<IIQQQQIIQQ", 0, 3, 0, 0, str_at, strtab_size if strtab_size is not None else len(strtab),
                    0, 0, 1, 0),
    ]
    body += b"".join(sections)
    ph_at = len(body)
    body += struct.pack("<IIQQQQQQ", 1, 5, 0, VADDR, VADDR, ph_at + 56, ph_at + 56, 0x1000)
    header = b"\x7fELF" + bytes([2, 1, 1]) + bytes(9)
    header += struct.pack("<HHIQQQIHHHHHH", 3, 62, 1, 0, ph_at, sh_at, 0, 64, 56, 1, 64, 3, 0)
    body[:64] = header
    return bytes(body)


FUNC, NOTYPE = 2, 0
SYMBOLS = [("alpha", VADDR + TEXT, 0x40, FUNC), ("beta", VADDR + TEXT + 0x40, 0x40, FUNC),
           ("mkl_blas_avx2_dgemm_kernel_0", VADDR + TEXT + 0x80, 0, NOTYPE),  # hand-written: no size
           ("delta", VADDR + TEXT + 0xC0, 0x10, FUNC)]


def test_each_offset_is_named_by_the_function_it_falls_in() -> None:
    elf = ElfSymbols(build_elf(SYMBOLS))
    names = elf.names([TEXT, TEXT + 0x3F, TEXT + 0x40, TEXT + 0x9F, TEXT + 0xC4])
    assert names == {TEXT: "alpha", TEXT + 0x3F: "alpha", TEXT + 0x40: "beta",
                     TEXT + 0x9F: "mkl_blas_avx2_dgemm_kernel_0", TEXT + 0xC4: "delta"}


def test_an_offset_past_a_sized_function_or_before_any_is_not_named() -> None:
    elf = ElfSymbols(build_elf(SYMBOLS))
    assert elf.names([TEXT + 0xD0, TEXT - 0x10, 10**9]) == {}


def test_a_file_without_symbols_names_nothing() -> None:
    assert ElfSymbols(build_elf(SYMBOLS, symtab_kind=1)).names([TEXT]) == {}


@pytest.mark.parametrize("data", [b"", b"\x7fELF", b"MZ" + bytes(100), b"\x7fELF" + bytes([1, 1]) + bytes(80)])
def test_what_is_not_a_64_bit_elf_is_refused_plainly(data: bytes) -> None:
    with pytest.raises(ValueError):
        ElfSymbols(data)


def test_hostile_tables_end_in_no_name_not_a_crash() -> None:
    # A symbol table said to lie past the file's end, and a string table too short for its names.
    assert ElfSymbols(build_elf(SYMBOLS, symtab_offset=10**7)).names([TEXT]) == {}
    short = ElfSymbols(build_elf(SYMBOLS, strtab_size=3))
    assert short.names([TEXT + 0x40]) == {}  # "beta" starts past the stated table
    truncated = build_elf(SYMBOLS)[:200]
    with pytest.raises(Exception) as caught:  # the section headers are gone: a plain error
        ElfSymbols(truncated).names([TEXT])
    assert isinstance(caught.value, (struct.error, ValueError, IndexError))


def test_a_hostile_file_in_a_process_map_gives_no_name(tmp_path, monkeypatch) -> None:
    from fieldguide.host import elf_symbols

    bad = tmp_path / "lib.so"
    bad.write_bytes(build_elf(SYMBOLS)[:200])
    monkeypatch.setattr(elf_symbols, "executable_mappings",
                        lambda pid: [elf_symbols.Mapping(0x7F0000000000, 0x7F0000001000, 0, str(bad))])
    # Named by its file only, as perf report does for a stripped library.
    assert symbolize(os.getpid(), [0x7F0000000010, 0x10]) == {0x7F0000000010: "[lib.so]"}


def test_a_running_processs_own_code_is_named() -> None:
    """The interpreter's evaluation loop, sampled where it is: its address, found through the
    process's maps in its binary or libpython, is named."""
    child = subprocess.Popen([sys.executable, "-c", "import time\nwhile True: time.sleep(1)"])
    try:
        time.sleep(0.5)
        mappings = executable_mappings(child.pid)
        assert any("python" in m.path for m in mappings), mappings
        # The entry of a function the child has mapped: its own address in the child, found by name
        # in this process (the same binary, so the same offset from its start).
        import ctypes

        here = ctypes.cast(ctypes.pythonapi.Py_IsInitialized, ctypes.c_void_p).value
        mine = next(m for m in executable_mappings(os.getpid()) if m.start <= here < m.end)
        theirs = next(m for m in mappings if m.path == mine.path and m.offset == mine.offset)
        address = here - mine.start + theirs.start
        assert symbolize(child.pid, [address]) == {address: "Py_IsInitialized"}
    finally:
        child.kill()
        child.wait()
