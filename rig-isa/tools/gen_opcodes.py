#!/usr/bin/env python3
"""Regenerates rig-isa's opcode tables: src/opcodes.rs (gfx1100) and src/opcodes_gfx12.rs (gfx1201).

The facts come from LLVM's disassembler: for every opcode value of every encoding class the
script assembles one word with plain operands, disassembles the batch with llvm-mc-19 and keeps
the mnemonic LLVM prints; it also probes which bits each opcode requires fixed and which VOP3
modifiers LLVM prints. Each target has its own encodings where the generations differ (GFX12's
SMEM layout, the 96-bit VFLAT/VGLOBAL/VSCRATCH/VBUFFER words); every other class is probed with
the same templates. For gfx1201 it also writes the semantic map: each GFX12 opcode's semantic id,
which is the gfx1100 opcode of the same operation (same name, or a renamed one: RENAMES), or a
new id after the gfx1100 table for an operation GFX11 lacks (NEW_* name lists).
Run from rig-isa/: python3 tools/gen_opcodes.py (needs llvm-mc-19 and llvm-objdump-19; about
40 s), then cargo fmt.
"""
import subprocess, sys, os

MCPU = "gfx1100"

def run(words_per_line):
    """Disassembles each word list with LLVM. Returns per list (text, bytes) or None (rejected).

    The words are assembled as .long data (llvm-mc-19) and disassembled by llvm-objdump-19, whose
    output gives each instruction's address and consumed words. Three s_nop 7 words follow each
    list so that garbage decoded after a rejected word cannot swallow the next list.
    """
    import tempfile
    pad = [0xBF800007] * 3
    starts, total, src = [], 0, [".text"]
    for ws in words_per_line:
        starts.append(total)
        for l in (ws, pad):
            src.append(".long " + ", ".join("0x%08x" % w for w in l))
            total += 4 * len(l)
    with tempfile.TemporaryDirectory() as d:
        open(d + "/p.s", "w").write("\n".join(src) + "\n")
        subprocess.run(["llvm-mc-19", "-arch=amdgcn", "-mcpu=" + MCPU, "-filetype=obj", "-o", d + "/p.o", d + "/p.s"], check=True)
        out = subprocess.run(["llvm-objdump-19", "-d", "--mcpu=" + MCPU, d + "/p.o"], capture_output=True, text=True).stdout
    at = {}
    for line in out.splitlines():
        if "// " not in line:
            continue
        text, tail = line.rsplit("// ", 1)
        if ": " not in tail:
            continue
        addr, words = tail.split(": ", 1)
        try:
            addr = int(addr.strip(), 16)
        except ValueError:
            continue
        n = sum(1 for t in words.split() if len(t) == 8 and all(c in "0123456789ABCDEFabcdef" for c in t))
        text = text.strip()
        at[addr] = None if text.startswith(".long") else (text, 4 * n)
    return [at.get(s) for s in starts]

def printed(text):
    return text.split()[0]

def mnemonic(text):
    if text is None:
        return None
    m = text.split()[0]
    for s in ("_e32", "_e64", "_dpp", "_sdwa"):
        if m.endswith(s):
            m = m[: -len(s)]
    return m

def generate(gfx12):
    """Probes LLVM for the current MCPU; `gfx12` picks that generation's encodings."""
    tables = {}

    templates = {}

    def table(name, n, variants):
        names = [None] * n
        samples = [None] * n
        templ = [None] * n
        templates[name] = templ
        for v in variants:
            todo = [op for op in range(n) if names[op] is None]
            if not todo:
                break
            got = run([v(op) for op in todo])
            for op, t in zip(todo, got):
                if t is not None and t[1] == 4 * len(v(op)):
                    text = t[0].split("::")[1].strip() if name == "VOPDY" else t[0]
                    names[op] = printed(text); samples[op] = t[0]; templ[op] = v(op)
        tables[name] = (names, samples)

    SV0 = 256  # v0 as 9-bit source
    # The second form carries a K literal (GFX12's s_fmaak/s_fmamk).
    table("SOP2", 0x60, [lambda op: [0x80000000 | op << 23 | 0 << 16 | 1 << 8 | 2], lambda op: [0x80000000 | op << 23 | 0 << 16 | 1 << 8 | 2, 0x3f800000]])
    table("SOPK", 0x1D, [lambda op: [0xB0000000 | op << 23 | 0x10], lambda op: [0xB0000000 | op << 23 | 0x1], lambda op: [0xB0000000 | op << 23, 0]])
    table("SOP1", 0x100, [lambda op: [0xBE800000 | op << 8 | 2], lambda op: [0xBE800000 | 124 << 16 | op << 8 | 2], lambda op: [0xBE800000 | 124 << 16 | op << 8 | 124]])
    table("SOPC", 0x80, [lambda op: [0xBF000000 | op << 16 | 1 << 8 | 2], lambda op: [0xBF000000 | op << 16 | 1 << 8 | 0x80]])
    table("SOPP", 0x80, [lambda op: [0xBF800000 | op << 16 | 0], lambda op: [0xBF800000 | op << 16 | 3]])
    if gfx12:
        # GFX12 SMEM: op in bits 13-20, sdata 6-12, sbase 0-5; offset 24 bits, soffset 25-31.
        table("SMEM", 0x100, [lambda op: [0xF4000000 | op << 13 | 1 << 6 | 1, 0xF8000010], lambda op: [0xF4000000 | op << 13 | 4 << 6 | 2, 0xF8000010]])
    else:
        table("SMEM", 0x100, [lambda op: [0xF4000000 | op << 18 | 1 << 6 | 2, 0xF8000010], lambda op: [0xF4000000 | op << 18 | 4 << 6 | 2, 0xF8000010]])
    table("VOP1", 0x80, [lambda op: [0x7E000000 | op << 9 | SV0 + 1], lambda op: [0x7E000000 | op << 9 | 1]])
    table("VOP2", 0x3e, [lambda op: [op << 25 | 2 << 9 | SV0 + 1], lambda op: [op << 25 | 2 << 9 | 255, 0x3f800000]])
    table("VOPC", 0x100, [lambda op: [0x7C000000 | op << 17 | 2 << 9 | SV0 + 1]])
    table("VOP3", 0x400, [lambda op: [0xD4000000 | op << 16 | 0, SV0 + 1 | (SV0 + 2) << 9],
                          lambda op: [0xD4000000 | op << 16 | 0, SV0 + 2],
                          lambda op: [0xD4000000 | op << 16 | 0, 2],lambda op: [0xD4000000 | op << 16 | 0, SV0 + 1 | (SV0 + 2) << 9 | (SV0 + 4) << 18],
                          lambda op: [0xD4000000 | op << 16 | 0, 1 | 2 << 9 | 4 << 18],
                          lambda op: [0xD4000000 | op << 16 | 0, SV0 + 2 | (SV0 + 4) << 9 | 124 << 18]])
    table("VOP3P", 0x80, [lambda op: [0xCC000000 | op << 16 | 0x0000, 0x18000000 | SV0 + 1 | (SV0 + 2) << 9],lambda op: [0xCC000000 | op << 16 | 0x4000, 0x18000000 | SV0 + 1 | (SV0 + 2) << 9 | (SV0 + 4) << 18],
                          lambda op: [0xCC000000 | op << 16 | 0x0000, 0x00000000 | SV0 + 8 | (SV0 + 16) << 9 | (SV0 + 24) << 18]])
    table("VOPDX", 0x10, [lambda op: [0xC8000000 | op << 22 | 4 << 17 | 2 << 9 | SV0 + 1, 3 << 24 | 4 << 17 | 5 << 9 | SV0 + 6, 0x3f800000],
                          lambda op: [0xC8000000 | op << 22 | 4 << 17 | 0 << 9 | SV0 + 1, 3 << 24 | 4 << 17 | 5 << 9 | SV0 + 6],lambda op: [0xC8000000 | op << 22 | 4 << 17 | 2 << 9 | SV0 + 1, 3 << 24 | 4 << 17 | 5 << 9 | SV0 + 6]])
    table("VOPDY", 0x20, [lambda op: [0xC8000000 | 3 << 22 | op << 17 | 2 << 9 | SV0 + 1, 2 << 24 | 4 << 17 | 0 << 9 | SV0 + 6],
                          lambda op: [0xC8000000 | 3 << 22 | op << 17 | 2 << 9 | SV0 + 1, 2 << 24 | 4 << 17 | 5 << 9 | SV0 + 6, 0x3f800000],lambda op: [0xC8000000 | 3 << 22 | op << 17 | 2 << 9 | SV0 + 1, 2 << 24 | 4 << 17 | 5 << 9 | SV0 + 6]])
    table("DS", 0x100, [lambda op: [0xD8000000 | op << 18 | 1 << 17, 0x06000001],lambda op: [0xD8000000 | op << 18, 0x00000201], lambda op: [0xD8000000 | op << 18, 0x00030201],
                        lambda op: [0xD8000000 | op << 18, 0x04000001], lambda op: [0xD8000000 | op << 18, 0x04000000], lambda op: [0xD8000000 | op << 18, 0x00000000],lambda op: [0xD8000000 | op << 18, 0x02000301 | 4 << 24],
                        lambda op: [0xD8000000 | op << 18, 0x04040201], lambda op: [0xD8000000 | op << 18, 0x08040201]])
    if gfx12:
        # GFX12 VBUFFER (96 bits): op 14-21, soffset 0-6; vdata 0-7, rsrc 9-15, th/scope 18-22,
        # format 23-29, offen 30, idxen 31; vaddr 0-7, offset 8-31.
        table("MUBUF", 0x100, [lambda op: [0xC4000000 | op << 14 | 3, 0x40800805, 0x00001002], lambda op: [0xC4000000 | op << 14 | 3, 0x00800805, 0x00000000],
                               lambda op: [0xC4000000 | op << 14 | 0x7C, 0x00000000, 0x00000000]])
    else:
      table("MUBUF", 0x100, [lambda op: [0xE0000000 | op << 18, 0x03410102], lambda op: [0xE0000000 | op << 18, 0x00000000],
                           lambda op: [0xE0000000 | op << 18 | 1 << 12, 0x03410402]])
    for seg, nm in ((0, "FLAT"), (1, "SCRATCH"), (2, "GLOBAL")):
        if gfx12:
            # GFX12 VFLAT/VSCRATCH/VGLOBAL (96 bits): seg 24-25, op 14-21, saddr 0-6; vdst 0-7,
            # sve 17, scope 18-19, th 20-22, vdata 23-30; vaddr 0-7, offset 8-31.
            table(nm, 0x100, [lambda op, seg=seg: [0xEC000000 | seg << 24 | op << 14 | 0x7C, 0x01000008, 0x00000002],
                              lambda op, seg=seg: [0xEC000000 | seg << 24 | op << 14 | 0x02, 0x01000008, 0x00000002],
                              lambda op, seg=seg: [0xEC000000 | seg << 24 | op << 14 | 0x02, 0x01020008, 0x00000002],
                              lambda op, seg=seg: [0xEC000000 | seg << 24 | op << 14 | 0x7C, 0x01100008, 0x00000002],
                              lambda op, seg=seg: [0xEC000000 | seg << 24 | op << 14 | 0x7C, 0x00000000, 0x00000002]])
            continue
        table(nm, 0x80, [lambda op, seg=seg: [0xDC000000 | op << 18 | seg << 16, 0x10 << 24 | 0x7C << 16 | 8 << 8 | 2],
                         lambda op, seg=seg: [0xDC000000 | op << 18 | seg << 16, 0x10 << 24 | 0 << 16 | 8 << 8 | 2],
                         lambda op, seg=seg: [0xDC000000 | op << 18 | seg << 16, 0x10 << 24 | 0 << 16 | 8 << 8 | 2 | 1 << 23]])

    # Must-be-zero bits: starting from each opcode's accepted template, flip one non-opcode bit at a
    # time; bits whose flip alone makes LLVM reject the word are recorded (the decoder rejects them).
    PROBE = {  # class: (probe mask of word 0, probe word 1)
        "SOP2": (0x007FFFFF, False), "SOPK": (0x007FFFFF, False), "SOP1": (0x007F00FF, False),
        "SOPC": (0x0000FFFF, False), "SOPP": (0x0000FFFF, False), "SMEM": (0x0003FFFF, True),
        "VOP1": (0x01FE01FF, False), "VOP2": (0x01FFFFFF, False), "VOPC": (0x0001FFFF, False),
        "VOP3": (0x0000FFFF, True), "VOP3P": (0x0000FFFF, True), "DS": (0x0003FFFF, True),
        "FLAT": (0x0000FFFF, True), "SCRATCH": (0x0000FFFF, True), "GLOBAL": (0x0000FFFF, True),
        "MUBUF": (0x0003FFFF, True),
    }
    if gfx12:
        PROBE.update({"SMEM": (0x03E01FFF, True), "FLAT": (0x00003FFF, True), "SCRATCH": (0x00003FFF, True),
                      "GLOBAL": (0x00003FFF, True), "MUBUF": (0x03C03FFF, True)})
    # Register / source fields (bit offset over both words, width). A field whose template value is
    # non-zero holds a real operand: flipping its bits explores other operands, not reserved bits, so
    # it is not probed. A zero field is probed: LLVM rejecting a non-zero value marks it unused.
    FIELDS = {
        "SOP2": [(0, 8), (8, 8), (16, 7)], "SOPK": [(16, 7)], "SOP1": [(0, 8), (16, 7)], "SOPC": [(0, 8), (8, 8)],
        "SOPP": [], "SMEM": [(0, 6), (6, 7), (57, 7)],
        "VOP1": [(0, 9), (17, 8)], "VOP2": [(0, 9), (9, 8), (17, 8)], "VOPC": [(0, 9), (9, 8)],
        "VOP3": [(0, 8), (32, 9), (41, 9), (50, 9)], "VOP3P": [(0, 8), (32, 9), (41, 9), (50, 9)],
        "DS": [(32, 8), (40, 8), (48, 8), (56, 8)],
        "FLAT": [(32, 8), (40, 8), (48, 7), (56, 8)], "SCRATCH": [(32, 8), (40, 8), (48, 7), (56, 8)],
        "GLOBAL": [(32, 8), (40, 8), (48, 7), (56, 8)], "MUBUF": [(32, 8), (40, 8), (48, 5), (56, 8)],
    }
    if gfx12:
        vm = [(0, 7), (32, 8), (55, 8)]
        FIELDS.update({"SMEM": [(0, 6), (6, 7), (57, 7)], "FLAT": vm, "SCRATCH": vm, "GLOBAL": vm,
                       "MUBUF": [(0, 7), (32, 8), (41, 7)]})
    mbz = {}
    def probe_class(cls):
        templ = templates[cls]
        m0, w1 = PROBE[cls]
        lines, keys = [], []
        for op, t in enumerate(templ):
            if t is None:
                continue
            bits = [b for b in range(32) if m0 >> b & 1] + ([32 + b for b in range(32)] if w1 and len(t) > 1 else [])
            full = t[0] | ((t[1] << 32) if len(t) > 1 else 0)
            skip = set()
            for lo, wd in FIELDS[cls]:
                if (full >> lo) & ((1 << wd) - 1):
                    skip.update(range(lo, lo + wd))
            for b in bits:
                if b in skip:
                    continue
                ws = list(t)
                ws[b // 32] ^= 1 << (b % 32)
                lines.append(ws); keys.append((op, b))
        res = run(lines)
        out = [0] * len(templ)
        for (op, b), r in zip(keys, res):
            if r is None:
                out[op] |= 1 << b
        # Value the fixed bits must have: the template's (usually zero, sometimes one).
        val = [0] * len(templ)
        for op, t in enumerate(templ):
            if t is not None:
                full = t[0] | ((t[1] << 32) if len(t) > 1 else 0)
                val[op] = full & out[op]
        mbz[cls] = (out, val)
    for cls in PROBE:
        probe_class(cls)

    # Which VOP3 modifier bits LLVM prints per opcode: probe each op_sel bit (word 0 bits 11-14),
    # abs bit (8-10) and neg bit (word 1 bits 29-31) alone and look for it in the text.
    def vop3_printed():
        templ = templates["VOP3"]
        lines, keys = [], []
        for op, t in enumerate(templ):
            if t is None:
                continue
            for k in range(4):
                lines.append([t[0] | 1 << (11 + k), t[1]]); keys.append((op, "opsel", k))
            for k in range(3):
                lines.append([t[0] | 1 << (8 + k), t[1]]); keys.append((op, "abs", k))
                lines.append([t[0], t[1] | 1 << (29 + k)]); keys.append((op, "neg", k))
        res = run(lines)
        opsel = [0] * len(templ); mods = [0] * len(templ)
        for (op, kind, k), r in zip(keys, res):
            if r is None:
                continue
            text = r[0]
            if kind == "opsel" and "op_sel" in text:
                opsel[op] |= 1 << k
            if kind == "abs" and "|" in text:
                mods[op] |= 1 << k
            if kind == "neg" and ("-" in text.split(" ", 1)[1] or "neg(" in text):
                mods[op] |= 1 << (4 + k)
        return opsel, mods
    VOP3_OPSEL, VOP3_MODS = vop3_printed()

    # VALU ops in the unified VOP3 numbering: VOPC = op, VOP2 = 256+op, VOP1 = 384+op.
    names = [mnemonic(m) for m in tables["VOP3"][0]]; samples = list(tables["VOP3"][1])
    for (cls, base) in (("VOPC", 0), ("VOP2", 256), ("VOP1", 384)):
        for op, m in enumerate(tables[cls][0]):
            if m is None:
                continue
            m = mnemonic(m)
            if names[base + op] is None:
                names[base + op] = m; samples[base + op] = tables[cls][1][op]
            elif names[base + op] != m:
                print("conflict", cls, op, m, names[base + op], file=sys.stderr)
    tables["VALU"] = (names, samples)

    return tables, mbz, VOP3_OPSEL, VOP3_MODS


CLASSES = ("SOP2", "SOPK", "SOP1", "SOPC", "SOPP", "SMEM", "VOP1", "VOP2", "VOPC", "VOP3", "VALU", "VOP3P", "VOPDX", "VOPDY", "DS", "FLAT", "SCRATCH", "GLOBAL", "MUBUF")
# Classes with a semantic map (VOP1/VOP2/VOPC/VOP3 map through the unified VALU numbering).
SEM_CLASSES = ("SOP2", "SOPK", "SOP1", "SOPC", "SOPP", "SMEM", "VALU", "VOP3P", "VOPDX", "VOPDY", "DS", "FLAT", "SCRATCH", "GLOBAL", "MUBUF")

# GFX12 names of operations GFX11 has under another name (facts from the two targets' tables:
# same encoding role, same operation). Everything else maps by equal name or is new.
RENAMES = {
    "s_add_co_u32": "s_add_u32", "s_sub_co_u32": "s_sub_u32", "s_add_co_i32": "s_add_i32",
    "s_sub_co_i32": "s_sub_i32", "s_add_co_ci_u32": "s_addc_u32", "s_sub_co_ci_u32": "s_subb_u32",
    "s_addk_co_i32": "s_addk_i32",
    "v_mad_co_u64_u32": "v_mad_u64_u32", "v_mad_co_i64_i32": "v_mad_i64_i32",
    "v_max_num_f32": "v_max_f32", "v_min_num_f32": "v_min_f32", "v_max_num_f16": "v_max_f16",
    "v_min_num_f16": "v_min_f16", "v_max_num_f64": "v_max_f64", "v_min_num_f64": "v_min_f64",
    "v_max3_num_f32": "v_max3_f32", "v_min3_num_f32": "v_min3_f32", "v_med3_num_f32": "v_med3_f32",
    "v_max3_num_f16": "v_max3_f16", "v_min3_num_f16": "v_min3_f16", "v_med3_num_f16": "v_med3_f16",
    "v_maxmin_num_f32": "v_maxmin_f32", "v_minmax_num_f32": "v_minmax_f32",
    "v_maxmin_num_f16": "v_maxmin_f16", "v_minmax_num_f16": "v_minmax_f16",
    "v_dual_max_num_f32": "v_dual_max_f32", "v_dual_min_num_f32": "v_dual_min_f32",
    "v_pk_max_num_f16": "v_pk_max_f16", "v_pk_min_num_f16": "v_pk_min_f16",
    "global_atomic_sub_clamp_u32": "global_atomic_csub_u32",
    "global_atomic_min_num_f32": "global_atomic_min_f32", "global_atomic_max_num_f32": "global_atomic_max_f32",
    "flat_atomic_min_num_f32": "flat_atomic_min_f32", "flat_atomic_max_num_f32": "flat_atomic_max_f32",
    "buffer_atomic_min_num_f32": "buffer_atomic_min_f32", "buffer_atomic_max_num_f32": "buffer_atomic_max_f32",
    "buffer_atomic_sub_clamp_u32": "buffer_atomic_csub_u32",
    "ds_min_num_f32": "ds_min_f32", "ds_max_num_f32": "ds_max_f32",
    "ds_min_num_rtn_f32": "ds_min_rtn_f32", "ds_max_num_rtn_f32": "ds_max_rtn_f32",
    "ds_min_num_f64": "ds_min_f64", "ds_max_num_f64": "ds_max_f64",
    "ds_min_num_rtn_f64": "ds_min_rtn_f64", "ds_max_num_rtn_f64": "ds_max_rtn_f64",
}

def rust_table(out, cls, names, what):
    out.append("/// %s opcode mnemonics (None: not an instruction on %s)." % (cls, what))
    out.append("pub static %s: [Option<&str>; %d] = [" % (cls, len(names)))
    for op, m in enumerate(names):
        out.append("    %s, // %#x" % ('Some("%s")' % m if m else "None", op))
    out.append("];")
    out.append("")

def const_name(m):
    return m.upper().replace(".", "_")

def emit(mcpu, res, path, header, base=None):
    tables, mbz, opsel, mods = res
    out = list(header)
    for cls in CLASSES:
        names = tables[cls][0]
        rust_table(out, cls, names, mcpu)
        if cls in mbz:
            out.append("/// %s fixed bits per opcode as (mask, value) over word 0 (low) and word 1 (high),"  % cls)
            out.append("/// found by probing LLVM: a word whose masked bits differ is rejected.")
            out.append("pub static FIXED_%s: [(u64, u64); %d] = [" % (cls, len(mbz[cls][0])))
            for op, (m, v) in enumerate(zip(*mbz[cls])):
                out.append("    (%#x, %#x), // %#x" % (m, v, op))
            out.append("];")
            out.append("")
        if cls in ("VOP1", "VOP2", "VOPC", "VOP3") or base is not None:
            continue
        out.append("/// %s opcode numbers by name." % cls)
        out.append("#[allow(dead_code)]")
        out.append("pub mod %s {" % ("op_" + cls.lower()))
        seen = set()
        for op, m in enumerate(names):
            if m and mnemonic(m) not in seen:
                m = mnemonic(m)
                seen.add(m)
                out.append("    pub const %s: u16 = %#x;" % (const_name(m), op))
        out.append("}")
        out.append("")
    out.append("/// VOP3 op_sel bits LLVM prints per opcode (bit 3: destination).")
    out.append("pub static VOP3_OPSEL: [u8; 1024] = [%s];" % ", ".join(str(x) for x in opsel))
    out.append("")
    out.append("/// VOP3 source modifiers LLVM prints per opcode: bits 0-2 abs, bits 4-6 neg, by source.")
    out.append("pub static VOP3_MODS: [u8; 1024] = [%s];" % ", ".join(str(x) for x in mods))
    out.append("")
    if base is not None:
        # Semantic map onto the base target's numbering, and the operations it lacks.
        for cls in SEM_CLASSES:
            names = [mnemonic(m) for m in tables[cls][0]]
            bnames = [mnemonic(m) for m in base[0][cls][0]]
            index = {}
            for op, m in enumerate(bnames):
                if m and m not in index:
                    index[m] = op
            sem, new = [], []
            for op, m in enumerate(names):
                if m is None:
                    sem.append(0xffff)
                    continue
                k = RENAMES.get(m, m)
                if k in index:
                    sem.append(index[k])
                else:
                    # A new operation's id is the base table's length plus its own opcode, so
                    # that (for VALU) the id minus 1024 keeps the VOPC/VOP2/VOP1/VOP3 range.
                    new.append((op, m))
                    sem.append(len(bnames) + op)
            out.append("/// Semantic id of each %s opcode: the gfx1100 opcode of the same operation, or" % cls)
            out.append("/// %d + the GFX12 opcode for an operation gfx1100 lacks (0xffff: not an instruction)." % len(bnames))
            out.append("pub static SEM_%s: [u16; %d] = [%s];" % (cls, len(sem), ", ".join("%#x" % x for x in sem)))
            out.append("")
            newt = [None] * len(names)
            for op, m in new:
                newt[op] = m
            out.append("/// %s operations gfx1100 lacks, by semantic id - %d." % (cls, len(bnames)))
            out.append("pub static NEW_%s: [Option<&str>; %d] = [%s];" % (cls, len(newt), ", ".join('Some("%s")' % m if m else "None" for m in newt)))
            out.append("")
            out.append("/// Semantic ids of the %s operations new in GFX12, by name." % cls)
            out.append("#[allow(dead_code)]")
            out.append("pub mod new_%s {" % cls.lower())
            seen = set()
            for op, m in new:
                if m not in seen:
                    seen.add(m)
                    out.append("    pub const %s: u16 = %#x;" % (const_name(m), len(bnames) + op))
            out.append("}")
            out.append("")
    open(path, "w").write("\n".join(out))

here = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src")
MCPU = "gfx1100"
g11 = generate(False)
emit("gfx1100", g11, os.path.join(here, "opcodes.rs"), [
    "//! gfx1100 opcode tables: opcode number -> LLVM mnemonic, per encoding class.",
    "//!",
    "//! Generated by `tools/gen_opcodes.py` from llvm-mc-19's disassembler (facts only); do not edit.",
    "//! VALU opcodes use the VOP3 numbering (VOPC = op, VOP2 = 256 + op, VOP1 = 384 + op).",
    ""])
MCPU = "gfx1201"
g12 = generate(True)
emit("gfx1201", g12, os.path.join(here, "opcodes_gfx12.rs"), [
    "//! gfx1201 opcode tables: opcode number -> LLVM mnemonic, per encoding class, and each",
    "//! opcode's semantic id (gfx1100's opcode of the same operation, or a new id).",
    "//!",
    "//! Generated by `tools/gen_opcodes.py` from llvm-mc-19's disassembler (facts only); do not edit.",
    "//! VALU opcodes use the VOP3 numbering (VOPC = op, VOP2 = 256 + op, VOP1 = 384 + op).",
    ""], base=g11)
# RIG_ISA_SAMPLES=path writes one LLVM disassembly sample per opcode (for inspection).
if os.environ.get("RIG_ISA_SAMPLES"):
    with open(os.environ["RIG_ISA_SAMPLES"], "w") as f:
        for tag, res in (("gfx1100", g11), ("gfx1201", g12)):
            for cls, (names, samples) in res[0].items():
                for op, s in enumerate(samples):
                    if s:
                        f.write("%s %s %#x %s\n" % (tag, cls, op, s))
print("ok")
