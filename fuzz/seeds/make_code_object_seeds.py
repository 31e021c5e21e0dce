#!/usr/bin/env python3
"""Writes fuzz/seeds/code_object/*.co: the hostile shapes of issue 21 at seed size, made
from the committed gfx1100 objects: metadata bombs (values rig skips, 15,000 kernels,
nesting past MAX_DEPTH), and relocation bombs (thousands naming a long undefined symbol,
sections overlapping in the file). rigd/tests/daemon/hostile_images.rs makes the full-size ones.
Usage: python3 fuzz/seeds/make_code_object_seeds.py (from anywhere)."""
import os
import struct

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
OUT = os.path.join(ROOT, "fuzz", "seeds", "code_object")


def read(name):
    with open(os.path.join(ROOT, "kernels", "out", "gfx1100", name), "rb") as f:
        return bytearray(f.read())


def u16(f, o):
    return struct.unpack_from("<H", f, o)[0]


def u32(f, o):
    return struct.unpack_from("<I", f, o)[0]


def u64(f, o):
    return struct.unpack_from("<Q", f, o)[0]


def phdrs(f, ty):
    off, size, n = u64(f, 0x20), u16(f, 0x36), u16(f, 0x38)
    return [off + i * size for i in range(n) if u32(f, off + i * size) == ty]


def shdrs(f, ty=None):
    off, size, n = u64(f, 0x28), u16(f, 0x3A), u16(f, 0x3C)
    return [off + i * size for i in range(n) if ty is None or u32(f, off + i * size + 4) == ty]


def align(f, n):
    f.extend(b"\0" * (-len(f) % n))


def metadata(co):
    p = phdrs(co, 4)[0]
    at, end = u64(co, p + 8), u64(co, p + 8) + u64(co, p + 32)
    while at < end:
        namesz, descsz, ty = struct.unpack_from("<III", co, at)
        desc = at + 12 + (namesz + 3) // 4 * 4
        if ty == 32 and co[at + 12 : at + 12 + namesz] == b"AMDGPU\0":
            return bytes(co[desc : desc + descsz])
        at = desc + (descsz + 3) // 4 * 4
    raise SystemExit("no metadata note")


def with_metadata(co, desc):
    f = bytearray(co)
    align(f, 8)
    at = len(f)
    f += struct.pack("<III", 7, len(desc), 32) + b"AMDGPU\0\0" + desc
    align(f, 4)
    p = phdrs(f, 4)[0]
    struct.pack_into("<Q", f, p + 8, at)
    struct.pack_into("<QQ", f, p + 32, len(f) - at, len(f) - at)
    return f


def mp_str(s):
    b = s.encode()
    return (bytes([0xA0 | len(b)]) if len(b) < 32 else bytes([0xD9, len(b)])) + b


def with_entry(note, key, value):
    assert 0x80 <= note[0] < 0x8F
    return bytes([note[0] + 1]) + note[1:] + mp_str(key) + value


def array_of(n, item):
    return b"\xdd" + struct.pack(">I", n) + item * n


def root(kernels):
    """A root map of gfx1100's version and target, and `kernels` (msgpack bytes)."""
    return (
        b"\x83" + mp_str("amdhsa.version") + b"\x92\x01\x02"
        + mp_str("amdhsa.target") + mp_str("amdgcn-amd-amdhsa--gfx1100")
        + mp_str("amdhsa.kernels") + kernels
    )


def long_undefined(co, name, copies, overlapping=0):
    """`co`'s undefined symbol renamed `name` (a new string table appended), its relocation
    repeated `copies` times, and `overlapping` more sections over the same entries."""
    f = bytearray(co)
    dynsym = shdrs(f, 11)[0]
    strtab = shdrs(f)[u32(f, dynsym + 40)]
    old = bytes(f[u64(f, strtab + 24) : u64(f, strtab + 24) + u64(f, strtab + 32)])
    align(f, 8)
    at = len(f)
    f += old + name.encode() + b"\0"
    struct.pack_into("<QQ", f, strtab + 24, at, len(old) + len(name) + 1)
    off, size = u64(f, dynsym + 24), u64(f, dynsym + 32)
    for sym in range(off, off + size, 24):
        if u16(f, sym + 6) == 0 and u32(f, sym) != 0:
            struct.pack_into("<I", f, sym, len(old))
    rela = shdrs(f, 4)[0]
    entry = bytes(f[u64(f, rela + 24) : u64(f, rela + 24) + 24])
    align(f, 8)
    at = len(f)
    f += entry * copies
    struct.pack_into("<QQ", f, rela + 24, at, 24 * copies)
    if overlapping:
        shoff, shentsize, shnum = u64(f, 0x28), u16(f, 0x3A), u16(f, 0x3C)
        table = bytes(f[shoff : shoff + shentsize * shnum])
        one = bytes(f[rela : rela + shentsize])
        align(f, 8)
        new = len(f)
        f += table + one * overlapping
        struct.pack_into("<Q", f, 0x28, new)
        struct.pack_into("<H", f, 0x3C, shnum + overlapping)
    return f


def main():
    os.makedirs(OUT, exist_ok=True)
    add, printf = read("add.co"), read("printf.co")
    note = metadata(add)
    deep = b"\x91" * 64 + b"\xc0"
    seeds = {
        "metadata-skipped-values.co": with_metadata(add, with_entry(note, "amdhsa.bomb", array_of(256 << 10, b"\xc0"))),
        "metadata-15000-kernels.co": with_metadata(add, root(array_of(15000, b"\x80"))),
        "metadata-deep.co": with_metadata(add, with_entry(note, "amdhsa.deep", deep)),
        "metadata-count-lies.co": with_metadata(add, with_entry(note, "amdhsa.lie", b"\xdf\xff\xff\xff\xff")),
        "relocations-long-undefined.co": long_undefined(printf, "u" * 4000, 4000),
        "relocations-overlapping.co": long_undefined(printf, "u" * 16, 2000, overlapping=64),
    }
    for name, data in seeds.items():
        with open(os.path.join(OUT, name), "wb") as f:
            f.write(data)
        print(f"{name}: {len(data)} bytes")


main()
