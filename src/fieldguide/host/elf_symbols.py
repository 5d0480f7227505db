"""Names for addresses sampled in another process: /proc/PID/maps gives the file each address is
mapped from, the file's ELF symbol table the function it falls in. Read in fieldguide's own
process, after sampling, so the job never waits for it (py-spy --native reads libtorch's 500,000
symbols with the job's threads stopped).

The files are the job's: malformed or hostile ELF data ends in "no name", never an exception, and
nothing is read past a section's stated bounds.
"""

from __future__ import annotations

import bisect
import mmap
import struct
from collections.abc import Iterable
from dataclasses import dataclass

SHT_SYMTAB, SHT_DYNSYM, PT_LOAD = 2, 11, 1
STT_NOTYPE, STT_FUNC, STT_GNU_IFUNC = 0, 2, 10
SYMBOL = struct.Struct("<IBBHQQ")  # st_name, st_info, st_other, st_shndx, st_value, st_size
MAX_SYMBOLS = 4_000_000  # libtorch_cpu.so has ~530,000
MAX_NAME = 4096


@dataclass(frozen=True)
class Mapping:
    start: int
    end: int
    offset: int
    path: str


def executable_mappings(pid: int) -> list[Mapping]:
    """The process's file-backed executable mappings, by start address."""
    found = []
    try:
        with open(f"/proc/{pid}/maps") as maps:
            for line in maps:
                parts = line.rstrip("\n").split(maxsplit=5)
                if len(parts) < 6 or "x" not in parts[1] or not parts[5].startswith("/"):
                    continue
                start, _, end = parts[0].partition("-")
                try:
                    found.append(Mapping(int(start, 16), int(end, 16), int(parts[2], 16),
                                         parts[5].removesuffix(" (deleted)")))
                except ValueError:
                    continue
    except OSError:
        return []
    return sorted(found, key=lambda m: m.start)


def symbolize(pid: int, ips: Iterable[int]) -> dict[int, str]:
    """Each address's function name, where its file's symbol table has one, else its file's name
    in brackets (`[libgomp.so.1]`, as perf report writes it); an address in no file is left out."""
    mappings = executable_mappings(pid)
    starts = [m.start for m in mappings]
    by_file: dict[str, dict[int, int]] = {}  # path -> {file offset: address}
    for ip in set(ips):
        i = bisect.bisect_right(starts, ip) - 1
        if i >= 0 and ip < mappings[i].end:
            m = mappings[i]
            by_file.setdefault(m.path, {})[ip - m.start + m.offset] = ip
    names: dict[int, str] = {}
    for path, offsets in by_file.items():
        found = _names_in_file(f"/proc/{pid}/root{path}", offsets.keys())
        for offset, ip in offsets.items():
            names[ip] = found.get(offset) or f"[{path.rsplit('/', 1)[-1]}]"
    return names


def _names_in_file(path: str, offsets: Iterable[int]) -> dict[int, str]:
    try:
        with open(path, "rb") as file, mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ) as data:
            return ElfSymbols(data).names(offsets)
    except (OSError, ValueError, struct.error, IndexError, OverflowError):
        return {}


class ElfSymbols:
    """A 64-bit little-endian ELF file's function symbols, looked up by file offset."""

    def __init__(self, data: mmap.mmap | bytes) -> None:
        self.data = data
        if len(data) < 64 or data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
            raise ValueError("not a 64-bit little-endian ELF file")
        (self.phoff, self.shoff, _, _, self.phentsize, self.phnum, self.shentsize, self.shnum,
         _) = struct.unpack_from("<QQIHHHHHH", data, 32)

    def _loads(self) -> list[tuple[int, int, int]]:
        """(file offset, file size, virtual address) of each loaded segment."""
        loads = []
        for i in range(min(self.phnum, 256)):
            kind, _, offset, vaddr, _, filesz = struct.unpack_from("<IIQQQQ", self.data, self.phoff + i * self.phentsize)
            if kind == PT_LOAD:
                loads.append((offset, filesz, vaddr))
        return loads

    def _table(self) -> tuple[int, int, int, int] | None:
        """(offset, size, string table offset, string table size) of .symtab, else .dynsym."""
        sections = {}
        for i in range(min(self.shnum, 65535)):
            _, kind, _, _, offset, size, link = struct.unpack_from("<IIQQQQI", self.data, self.shoff + i * self.shentsize)
            sections[i] = (kind, offset, size, link)
        for wanted in (SHT_SYMTAB, SHT_DYNSYM):
            for kind, offset, size, link in sections.values():
                if kind == wanted and link in sections:
                    _, str_offset, str_size, _ = sections[link]
                    if offset + size <= len(self.data) and str_offset + str_size <= len(self.data):
                        return offset, size, str_offset, str_size
        return None

    def names(self, offsets: Iterable[int]) -> dict[int, str]:
        """Each file offset's function: the nearest symbol at or below its address, if the address
        lies within that symbol's size (or the symbol states none, as hand-written kernels may)."""
        loads, table = self._loads(), self._table()
        if table is None:
            return {}
        wanted: dict[int, int] = {}  # address -> file offset
        for offset in offsets:
            for seg_offset, seg_size, vaddr in loads:
                if seg_offset <= offset < seg_offset + seg_size:
                    wanted[offset - seg_offset + vaddr] = offset
                    break
        addresses = sorted(wanted)
        if not addresses:
            return {}
        sym_offset, sym_size, str_offset, str_size = table
        # best[j]: the highest symbol start in (addresses[j-1], addresses[j]]: one bisect a symbol.
        best: list[tuple[int, int, int] | None] = [None] * len(addresses)
        count = min(sym_size // SYMBOL.size, MAX_SYMBOLS)
        view = memoryview(self.data)[sym_offset:sym_offset + count * SYMBOL.size]
        try:
            for name, info, _, shndx, value, size in SYMBOL.iter_unpack(view):
                if not value or not shndx or (info & 0xF) not in (STT_FUNC, STT_NOTYPE, STT_GNU_IFUNC) or not name:
                    continue
                j = bisect.bisect_left(addresses, value)
                if j < len(addresses):
                    held = best[j]
                    if held is None or value > held[0] or (value == held[0] and size > held[1]):
                        best[j] = (value, size, name)
        finally:
            view.release()
        found: dict[int, str] = {}
        nearest: tuple[int, int, int] | None = None
        for address, candidate in zip(addresses, best, strict=True):
            if candidate is not None:
                nearest = candidate
            if nearest is None:
                continue
            value, size, name = nearest
            if size and address >= value + size:
                continue
            if name < str_size:
                start = str_offset + name
                stop = self.data.find(b"\0", start, min(start + MAX_NAME, str_offset + str_size))
                if stop > start:
                    found[wanted[address]] = bytes(self.data[start:stop]).decode("utf-8", "replace")
        return found
