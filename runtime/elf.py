"""A small, bounds-checked reader of the relocatable ELF objects our code generator emits.

LLVM's object loader (RuntimeDyld) trusts its input: a damaged section header crashes the process
instead of raising. :func:`read_object` therefore checks every structure of an object before any
byte of it reaches LLVM, and :class:`ElfObject` gives the pieces the loader needs (undefined symbols,
the relocations, the bytes of a named section).

Accepted: ELF64, little-endian, ``ET_REL``, ``EM_X86_64``, whose section headers, section names,
string tables, symbol tables and relocation tables are all in bounds and consistent, and whose
relocations are only of the kinds :data:`ALLOWED_RELOCATIONS` (what the large code model with a
static relocation model produces: absolute 64-bit addresses; see
``runtime.native.host_target_machine``). Format reference: the System V ABI, "Object Files"
(gABI chapter 4), and the x86-64 psABI's relocation table.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass

__all__ = ["ElfObject", "Section", "Relocation", "read_object", "ALLOWED_RELOCATIONS", "RELOCATION_NAMES"]

_EHDR = struct.Struct("<16sHHIQQQIHHHHHH")
_SHDR = struct.Struct("<IIQQQQIIQQ")
_SYM = struct.Struct("<IBBHQQ")
_RELA = struct.Struct("<QQq")

SHT_NULL, SHT_PROGBITS, SHT_SYMTAB, SHT_STRTAB, SHT_RELA, SHT_NOBITS, SHT_REL = 0, 1, 2, 3, 4, 8, 9
SHN_UNDEF, SHN_LORESERVE, SHN_ABS, SHN_COMMON, SHN_XINDEX = 0, 0xFF00, 0xFFF1, 0xFFF2, 0xFFFF
SHF_ALLOC, SHF_EXECINSTR = 0x2, 0x4
#: Section flags our objects may use: write, alloc, execinstr, merge, strings, info-link, link-order,
#: x86-64 large, exclude. Thread-local storage, groups and compression (which the JIT's loader does
#: not implement, and aborts on) are refused.
_SECTION_FLAGS = 0x1 | 0x2 | 0x4 | 0x10 | 0x20 | 0x40 | 0x80 | 0x10000000 | 0x80000000
SHT_NOTE, SHT_LLVM_ADDRSIG, SHT_X86_64_UNWIND = 7, 0x6FFF4C03, 0x70000001

#: Section types an object of ours may have.
_SECTION_TYPES = frozenset({SHT_NULL, SHT_PROGBITS, SHT_SYMTAB, SHT_STRTAB, SHT_RELA, SHT_NOBITS, SHT_NOTE,
                            SHT_LLVM_ADDRSIG, SHT_X86_64_UNWIND})

#: x86-64 relocation types by number (the psABI's names) that this reader can name in messages.
RELOCATION_NAMES = {0: "R_X86_64_NONE", 1: "R_X86_64_64", 2: "R_X86_64_PC32", 3: "R_X86_64_GOT32",
                    4: "R_X86_64_PLT32", 9: "R_X86_64_GOTPCREL", 10: "R_X86_64_32", 11: "R_X86_64_32S",
                    24: "R_X86_64_PC64", 25: "R_X86_64_GOTOFF64", 26: "R_X86_64_GOTPC32",
                    27: "R_X86_64_GOT64", 29: "R_X86_64_GOTPC64", 41: "R_X86_64_GOTPCRELX",
                    42: "R_X86_64_REX_GOTPCRELX"}

#: Relocation kinds an object may use: absolute 64-bit addresses, and 64-bit PC-relative ones (what
#: unwind tables use under the large code model). Every 32-bit relative kind is refused: its target
#: must land within 2 GB, which the JIT's memory layout does not promise.
ALLOWED_RELOCATIONS = frozenset({1, 24})

_MAX_SECTIONS = 1 << 16


@dataclass(frozen=True)
class Section:
    """One section header: ``name``, ``type`` (SHT_*), ``flags``, file ``offset`` and ``size`` in bytes,
    ``link`` / ``info`` (section indices whose meaning depends on the type), ``entsize``."""

    index: int
    name: str
    type: int
    flags: int
    offset: int
    size: int
    link: int
    info: int
    entsize: int


@dataclass(frozen=True)
class Relocation:
    """One RELA entry: the section it patches (``section``, by name), the ``offset`` patched, its
    ``type`` (see :data:`RELOCATION_NAMES`), and the ``symbol`` it refers to (a name, or the section
    name for section symbols)."""

    section: str
    offset: int
    type: int
    symbol: str

    @property
    def type_name(self) -> str:
        """The psABI name of the type (``R_X86_64_PC32``), or its number."""
        return RELOCATION_NAMES.get(self.type, f"type {self.type}")


class ElfObject:
    """A checked relocatable object; build it with :func:`read_object`."""

    def __init__(self, data: bytes, sections: list[Section], symbols: list[tuple[str, int, int]],
                 relocations: list[Relocation]) -> None:
        self.data = data
        self.sections = sections
        self.symbols = symbols          # (name, section index, info) of every symbol table entry
        self.relocations = relocations

    def section(self, name: str) -> bytes | None:
        """The bytes of the first section called ``name``, or None when there is none."""
        for s in self.sections:
            if s.name == name and s.type != SHT_NOBITS:
                return self.data[s.offset:s.offset + s.size]
        return None

    @property
    def undefined_symbols(self) -> list[str]:
        """Names of the symbols the object needs from outside (libm, libc, the thread pool)."""
        return sorted({name for name, shndx, _ in self.symbols if shndx == SHN_UNDEF and name})

    @property
    def defined_functions(self) -> list[str]:
        """Names of the global function symbols the object defines."""
        return sorted(name for name, shndx, info in self.symbols
                      if name and shndx != SHN_UNDEF and info >> 4 == 1 and info & 0xF == 2)


def _fail(message: str):
    raise ValueError(f"invalid object code: {message}")


def _string(table: bytes, offset: int, what: str) -> str:
    if not 0 <= offset < len(table):
        _fail(f"{what} name offset {offset} is outside its string table ({len(table)} bytes)")
    end = table.find(b"\0", offset)
    if end < 0:
        _fail(f"{what} name at offset {offset} is not NUL-terminated")
    try:
        return table[offset:end].decode("utf-8")
    except UnicodeDecodeError:
        _fail(f"{what} name at offset {offset} is not UTF-8")


def read_object(data: bytes) -> ElfObject:
    """Check ``data`` as an ELF64 x86-64 relocatable object and return its parsed form.

    Raises ValueError ("invalid object code: ...") naming the first inconsistency found: a wrong
    class / byte order / type / machine, a header or table outside the data, a bad string-table
    index, a symbol or relocation naming a section or symbol that does not exist, a relocation
    outside its section, or a relocation kind outside :data:`ALLOWED_RELOCATIONS`.
    """
    data = bytes(data)
    n = len(data)
    if n < _EHDR.size:
        _fail(f"{n} bytes is shorter than an ELF header")
    (ident, e_type, e_machine, e_version, _entry, _phoff, e_shoff, _flags, e_ehsize, _phentsize, e_phnum,
     e_shentsize, e_shnum, e_shstrndx) = _EHDR.unpack_from(data, 0)
    if ident[:4] != b"\x7fELF":
        _fail("not an ELF file (bad magic)")
    if ident[4] != 2 or ident[5] != 1 or ident[6] != 1:
        _fail("not a 64-bit little-endian ELF version 1 object")
    if e_type != 1:
        _fail(f"ELF type {e_type} is not a relocatable object (1)")
    if e_machine != 62:
        _fail(f"machine {e_machine} is not x86-64 (62)")
    if e_version != 1 or e_ehsize != _EHDR.size or e_shentsize != _SHDR.size or e_phnum != 0:
        _fail("unexpected ELF header fields (version, header sizes or program headers)")
    if not 1 <= e_shnum <= _MAX_SECTIONS or e_shoff < _EHDR.size or e_shoff + e_shnum * _SHDR.size > n:
        _fail(f"the section header table ({e_shnum} entries at offset {e_shoff}) is outside the "
              f"{n}-byte object")
    if not 0 < e_shstrndx < e_shnum:
        _fail(f"section header string table index {e_shstrndx} does not exist ({e_shnum} sections)")
    raw = [_SHDR.unpack_from(data, e_shoff + k * _SHDR.size) for k in range(e_shnum)]
    for k, (_name, sh_type, _fl, _addr, off, size, link, _info, _align, _ent) in enumerate(raw):
        if sh_type != SHT_NOBITS and (off > n or size > n - off):
            _fail(f"section {k} (offset {off}, {size} bytes) is outside the {n}-byte object")
        if link >= e_shnum:
            _fail(f"section {k} links to section {link}, which does not exist")
    shstr = raw[e_shstrndx]
    if shstr[1] != SHT_STRTAB:
        _fail(f"section {e_shstrndx} named as the section header string table is not a string table")
    names = data[shstr[4]:shstr[4] + shstr[5]]
    sections = [Section(k, _string(names, r[0], f"section {k}") if k else "", r[1], r[2], r[4], r[5], r[6],
                        r[7], r[9]) for k, r in enumerate(raw)]
    for s, r in zip(sections, raw):
        align = r[8]
        if s.type not in _SECTION_TYPES:
            _fail(f"section {s.name!r} has type {s.type:#x}, which object code of ours never has")
        if align > 4096 or align & (align - 1):
            _fail(f"section {s.name!r} has alignment {align}")
        if s.flags & ~_SECTION_FLAGS:
            _fail(f"section {s.name!r} has flags {s.flags:#x} (thread-local, grouped or compressed data), which "
                  "object code of ours never has")
        if s.type == SHT_STRTAB and (s.size == 0 or data[s.offset + s.size - 1] != 0):
            _fail(f"string table {s.name!r} is empty or does not end with a NUL byte")   # LLVM aborts on it

    symbols: list[tuple[str, int, int]] = []
    symtab_index = None
    for s in sections:
        if s.type != SHT_SYMTAB:
            continue
        if symtab_index is not None:
            _fail("more than one symbol table")
        symtab_index = s.index
        if s.entsize != _SYM.size or s.size % _SYM.size:
            _fail(f"symbol table entries of {s.entsize} bytes (expected {_SYM.size})")
        strtab = sections[s.link]
        if strtab.type != SHT_STRTAB:
            _fail(f"the symbol table's string table (section {s.link}) is not a string table")
        strings = data[strtab.offset:strtab.offset + strtab.size]
        for j in range(s.size // _SYM.size):
            st_name, st_info, _other, st_shndx, _value, _size = _SYM.unpack_from(data, s.offset + j * _SYM.size)
            if st_shndx == SHN_XINDEX or (SHN_UNDEF < st_shndx < SHN_LORESERVE and st_shndx >= len(sections)):
                _fail(f"symbol {j} is in section {st_shndx}, which does not exist")
            name = _string(strings, st_name, f"symbol {j}") if st_name else ""
            if not name and st_info & 0xF == 3 and st_shndx < len(sections):   # STT_SECTION
                name = sections[st_shndx].name
            st_type, st_bind = st_info & 0xF, st_info >> 4
            if st_type not in (0, 1, 2, 3, 4) or st_bind not in (0, 1, 2) or st_shndx == SHN_COMMON:
                _fail(f"symbol {name or j!r} has type {st_type}, binding {st_bind} or section {st_shndx} "
                      "that object code of ours never has")
            if st_shndx == SHN_UNDEF and j and (st_bind == 0 or st_type not in (0, 1, 2)):
                _fail(f"undefined symbol {name or j!r} must be a global function or object")
            if SHN_UNDEF < st_shndx < SHN_LORESERVE:
                home = sections[st_shndx]
                if _value > home.size or _size > home.size - _value:
                    _fail(f"symbol {name or j!r} ({_size} bytes at {_value}) lies outside its section {home.name!r}")
                if st_info & 0xF == 2 and home.flags & (SHF_ALLOC | SHF_EXECINSTR) != SHF_ALLOC | SHF_EXECINSTR:
                    _fail(f"function {name!r} is in section {home.name!r}, which is not executable code")
            symbols.append((name, st_shndx, st_info))

    relocations: list[Relocation] = []
    for s in sections:
        if s.type == SHT_REL:
            _fail(f"section {s.name!r}: REL relocations are not used on x86-64")
        if s.type != SHT_RELA:
            continue
        if s.entsize != _RELA.size or s.size % _RELA.size:
            _fail(f"section {s.name!r}: relocation entries of {s.entsize} bytes (expected {_RELA.size})")
        if s.link != symtab_index or symtab_index is None:
            _fail(f"section {s.name!r} does not refer to the symbol table")
        if not 0 < s.info < len(sections) or sections[s.info].type in (SHT_NULL, SHT_NOBITS):
            _fail(f"section {s.name!r} patches section {s.info}, which does not exist or has no data")
        target = sections[s.info]
        for j in range(s.size // _RELA.size):
            r_offset, r_info, _addend = _RELA.unpack_from(data, s.offset + j * _RELA.size)
            r_type, r_sym = r_info & 0xFFFFFFFF, r_info >> 32
            if r_type not in ALLOWED_RELOCATIONS:
                _fail(f"section {target.name!r} has a {RELOCATION_NAMES.get(r_type, f'type {r_type}')} "
                      "relocation; only 64-bit ones are loadable anywhere in the address space")
            if r_sym >= len(symbols):
                _fail(f"relocation {j} of {target.name!r} names symbol {r_sym}, which does not exist")
            if r_offset > target.size - 8:
                _fail(f"relocation {j} of {target.name!r} at offset {r_offset} is outside the section")
            relocations.append(Relocation(target.name, r_offset, r_type, symbols[r_sym][0]))
    return ElfObject(data, sections, symbols, relocations)
