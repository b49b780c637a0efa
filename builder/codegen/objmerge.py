"""Combine relocatable ELF objects into one (what ``ld -r`` does, for the objects our code
generator emits), so that the kernels can be compiled as several LLVM modules on several threads
and still be shipped and loaded as the one object :class:`runtime.native.NativeLibrary` checks.

Accepted input: what :func:`runtime.elf.read_object` accepts (ELF64 little-endian x86-64
``ET_REL``; each input is checked by it first), without section groups. The output:

* one section per distinct (name, type, flags, entsize) of the inputs, in order of first
  appearance, holding the inputs' sections one after the other, each at its own alignment (the
  merged section has the largest); ``SHF_MERGE`` constant pools are concatenated, which keeps
  them valid (merging is an optimization the loader may skip);
* a symbol table with a section symbol per output section, then every local symbol of every
  input (in input order; their values moved by their section's offset), then the global symbols:
  one per name. A name defined by two inputs is an error; a name one input defines and another
  needs resolves to the definition;
* one RELA section per relocated output section: every relocation with its offset moved by its
  section's offset and its symbol renumbered; a relocation against an input's section symbol
  gets that section's offset added to its addend;
* a fresh ``.strtab`` (symbol names) and ``.shstrtab`` (section names).

The result depends only on the inputs and their order (no timestamps, no hashing of addresses),
so the same inputs always give the same bytes. The merged object is checked again by
:func:`runtime.elf.read_object` before it is returned; the loader checks it once more.
"""
from __future__ import annotations

import struct
from typing import Sequence

from runtime.elf import read_object

__all__ = ["merge_objects"]

_EHDR = struct.Struct("<16sHHIQQQIHHHHHH")
_SHDR = struct.Struct("<IIQQQQIIQQ")
_SYM = struct.Struct("<IBBHQQ")
_RELA = struct.Struct("<QQq")

_SHT_NULL, _SHT_SYMTAB, _SHT_STRTAB, _SHT_RELA, _SHT_NOBITS, _SHT_GROUP = 0, 2, 3, 4, 8, 17
_SHN_UNDEF, _SHN_LORESERVE, _SHN_ABS = 0, 0xFF00, 0xFFF1
_STT_SECTION = 3
_STB_LOCAL = 0
_SHF_INFO_LINK = 0x40
#: Section types that are not carried over as data: the tables this module rebuilds, and
#: LLVM's address-significance table (its symbol indices would be stale; it is only a hint).
_REBUILT = {_SHT_NULL, _SHT_SYMTAB, _SHT_STRTAB, _SHT_RELA, 0x6FFF4C03}


class _Strings:
    """An ELF string table being built: ``add(name)`` returns the offset (names shared)."""

    def __init__(self) -> None:
        self.data = bytearray(b"\0")
        self.offsets: dict[str, int] = {"": 0}

    def add(self, name: str) -> int:
        off = self.offsets.get(name)
        if off is None:
            off = self.offsets[name] = len(self.data)
            self.data += name.encode() + b"\0"
        return off


def _align(n: int, a: int) -> int:
    return (n + a - 1) // a * a if a > 1 else n


def merge_objects(objects: Sequence[bytes]) -> bytes:
    """One relocatable object holding every section, symbol and relocation of ``objects`` (see the
    module docstring). A single object is returned as it is.

    Raises ValueError for an input :func:`runtime.elf.read_object` refuses, an input with section
    groups, or a global symbol that two inputs define.
    """
    if len(objects) == 1:
        return bytes(objects[0])
    out_secs: list[dict] = []          # name, type, flags, entsize, align, data (bytearray), size
    by_kind: dict[tuple, int] = {}
    inputs = []
    for data in objects:
        data = bytes(data)
        read_object(data)   # every structure checked; the parsing below may then trust the tables
        shoff, shnum, shstrndx = (_EHDR.unpack_from(data, 0)[k] for k in (6, 12, 13))
        raw = [_SHDR.unpack_from(data, shoff + k * _SHDR.size) for k in range(shnum)]
        shstr = raw[shstrndx]
        names = data[shstr[4]:shstr[4] + shstr[5]]
        place: dict[int, tuple[int, int]] = {}      # input section -> (output section, offset)
        for k, (name_off, typ, flags, _addr, off, size, _link, _info, align, entsize) in enumerate(raw):
            if typ == _SHT_GROUP:
                raise ValueError("invalid object code: section groups are not supported by the merge")
            if typ in _REBUILT:
                continue
            name = names[name_off:names.index(b"\0", name_off)].decode()
            kind = (name, typ, flags, entsize)
            j = by_kind.get(kind)
            if j is None:
                j = by_kind[kind] = len(out_secs)
                out_secs.append({"name": name, "type": typ, "flags": flags, "entsize": entsize,
                                 "align": 1, "data": bytearray(), "size": 0})
            sec = out_secs[j]
            a = max(align, 1)
            start = _align(sec["size"], a)
            sec["align"] = max(sec["align"], a)
            if typ != _SHT_NOBITS:
                sec["data"] += b"\0" * (start - len(sec["data"])) + data[off:off + size]
            sec["size"] = start + size
            place[k] = (j, start)
        inputs.append((data, raw, place))

    # symbols: null, one section symbol per output section, the locals, then the globals
    strtab = _Strings()
    syms: list[tuple] = [(0, 0, 0, 0, 0, 0)]
    section_sym = {}
    for j in range(len(out_secs)):
        section_sym[j] = len(syms)
        syms.append((0, _STT_SECTION, 0, j + 1, 0, 0))   # output section j has header index j + 1
    maps: list[dict[int, tuple[int, int]]] = []       # per input: symbol -> (new index, addend shift)
    pending_globals: list[tuple[int, int, tuple]] = []  # (input, symbol index, entry)
    for i, (data, raw, place) in enumerate(inputs):
        symtab = next(r for r in raw if r[1] == _SHT_SYMTAB)
        strs = data[raw[symtab[6]][4]:raw[symtab[6]][4] + raw[symtab[6]][5]]
        m: dict[int, tuple[int, int]] = {0: (0, 0)}
        for k in range(1, symtab[5] // _SYM.size):
            st_name, info, other, shndx, value, size = _SYM.unpack_from(data, symtab[4] + k * _SYM.size)
            name = strs[st_name:strs.index(b"\0", st_name)].decode() if st_name else ""
            if _SHN_UNDEF < shndx < _SHN_LORESERVE and shndx not in place:
                raise ValueError(f"invalid object code: symbol {name!r} is in a section the merge drops")
            if info & 0xF == _STT_SECTION:
                j, start = place[shndx]
                m[k] = (section_sym[j], start)
                continue
            if _SHN_UNDEF < shndx < _SHN_LORESERVE:
                j, start = place[shndx]
                entry = (name, info, other, j + 1, value + start, size)
            else:
                entry = (name, info, other, shndx, value, size)
            if info >> 4 == _STB_LOCAL:
                m[k] = (len(syms), 0)
                syms.append((strtab.add(name), *entry[1:]))
            else:
                pending_globals.append((i, k, entry))
        maps.append(m)
    first_global = len(syms)
    global_index: dict[str, int] = {}
    for _i, _k, (name, info, other, shndx, value, size) in pending_globals:
        if shndx == _SHN_UNDEF:
            continue
        if name in global_index:
            raise ValueError(f"invalid object code: symbol {name!r} is defined by two of the merged objects")
        global_index[name] = len(syms)
        syms.append((strtab.add(name), info, other, shndx, value, size))
    for _i, _k, (name, info, other, shndx, value, size) in pending_globals:
        if shndx == _SHN_UNDEF and name not in global_index:
            global_index[name] = len(syms)
            syms.append((strtab.add(name), info, other, shndx, value, size))
    for i, k, (name, *_rest) in pending_globals:
        maps[i][k] = (global_index[name], 0)

    # relocations, grouped by the output section they patch
    relas: dict[int, bytearray] = {}
    for i, (data, raw, place) in enumerate(inputs):
        for r in raw:
            if r[1] != _SHT_RELA:
                continue
            j, start = place[r[7]]
            buf = relas.setdefault(j, bytearray())
            for k in range(r[5] // _RELA.size):
                off, info, addend = _RELA.unpack_from(data, r[4] + k * _RELA.size)
                new_sym, shift = maps[i][info >> 32]
                buf += _RELA.pack(off + start, (new_sym << 32) | (info & 0xFFFFFFFF), addend + shift)

    # layout: header, section data, tables, section headers
    shstrtab = _Strings()
    body = bytearray(_EHDR.size)
    headers: list[tuple] = [(0, 0, 0, 0, 0, 0, 0, 0, 0, 0)]
    for sec in out_secs:
        pos = _align(len(body), sec["align"])
        body += b"\0" * (pos - len(body))
        if sec["type"] != _SHT_NOBITS:
            body += sec["data"] + b"\0" * (sec["size"] - len(sec["data"]))
        headers.append((shstrtab.add(sec["name"]), sec["type"], sec["flags"], 0, pos, sec["size"], 0, 0,
                        sec["align"], sec["entsize"]))
    symtab_index = len(headers)
    strtab_index = symtab_index + 1
    for j in sorted(relas):
        pos = _align(len(body), 8)
        body += b"\0" * (pos - len(body)) + relas[j]
        headers.append((shstrtab.add(".rela" + out_secs[j]["name"]), _SHT_RELA, _SHF_INFO_LINK, 0, pos,
                        len(relas[j]), symtab_index, j + 1, 8, _RELA.size))
    # the symbol table and string tables go after the relocation sections, whose link names them:
    # renumber so that the symbol table comes right after the data sections
    rela_headers = headers[symtab_index:]
    headers = headers[:symtab_index]
    pos = _align(len(body), 8)
    body += b"\0" * (pos - len(body))
    for s in syms:
        body += _SYM.pack(*s)
    headers.append((shstrtab.add(".symtab"), _SHT_SYMTAB, 0, 0, pos, len(syms) * _SYM.size, strtab_index,
                    first_global, 8, _SYM.size))
    headers.append((shstrtab.add(".strtab"), _SHT_STRTAB, 0, 0, len(body), len(strtab.data), 0, 0, 1, 0))
    body += strtab.data
    headers.extend(rela_headers)
    shstrtab_name = shstrtab.add(".shstrtab")
    headers.append((shstrtab_name, _SHT_STRTAB, 0, 0, len(body), len(shstrtab.data), 0, 0, 1, 0))
    body += shstrtab.data
    shoff = _align(len(body), 8)
    body += b"\0" * (shoff - len(body))
    for h in headers:
        body += _SHDR.pack(*h)
    ident = bytes(inputs[0][0][:16])
    body[:_EHDR.size] = _EHDR.pack(ident, 1, 62, 1, 0, 0, shoff, 0, _EHDR.size, 0, 0, _SHDR.size,
                                   len(headers), len(headers) - 1)
    merged = bytes(body)
    read_object(merged)
    return merged
