#!/usr/bin/env python3
"""Regenerates src/opcodes_gfx9.rs: the gfx942 (GFX9/CDNA3) opcode tables.

Like tools/gen_opcodes.py for gfx1100/gfx1201, the facts come from LLVM's disassembler
(llvm-mc-19, llvm-objdump-19 --mcpu=gfx942): for every opcode value of every GFX9 encoding
class one word with plain operands is disassembled and the mnemonic kept; the bits each opcode
requires fixed are probed by flipping one bit at a time. It also writes the semantic map onto
gfx1100's numbering (read from src/opcodes.rs): the gfx1100 opcode of the same operation (GFX9
names are mapped onto GFX11's by `gfx11_name`), or 1024 + the gfx1100 table's length + the
gfx942 opcode for an operation gfx1100 lacks.
Run from rig-isa/: python3 tools/gen_opcodes_gfx9.py (about 30 s), then cargo fmt.
"""
import subprocess, os, re, tempfile

MCPU = "gfx942"
PAD = [0xBF800007] * 3

def run(lines):
    starts, total, src = [], 0, [".text"]
    for ws in lines:
        starts.append(total)
        for l in (ws, PAD):
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
        at[addr] = None if text.startswith(".long") or "/*" in text else (text, 4 * n)
    return [at.get(s) for s in starts]

def mnemonic(m):
    if m is None:
        return None
    m = m.split()[0]
    for s in ("_e32", "_e64", "_dpp", "_sdwa"):
        if m.endswith(s):
            m = m[: -len(s)]
    return m

tables, templates = {}, {}

def table(name, n, variants):
    names = [None] * n
    templ = [None] * n
    templates[name] = templ
    for v in variants:
        todo = [op for op in range(n) if names[op] is None]
        if not todo:
            break
        got = run([v(op) for op in todo])
        for op, t in zip(todo, got):
            if t is not None and t[1] == 4 * len(v(op)):
                names[op] = t[0].split()[0]
                templ[op] = v(op)
    tables[name] = names

V = 256
table("SOP2", 0x60, [lambda op: [0x80000000 | op << 23 | 0 << 16 | 2 << 8 | 4]])
table("SOPK", 0x1d, [lambda op: [0xB0000000 | op << 23 | 0x10], lambda op: [0xB0000000 | op << 23 | 0x1],
                     lambda op: [0xB0000000 | op << 23 | 0x1, 0]])
table("SOP1", 0x80, [lambda op: [0xBE800000 | op << 8 | 2], lambda op: [0xBE800000 | op << 8 | 4 | 2 << 16],
                     lambda op: [0xBE800000 | op << 8 | 0x80], lambda op: [0xBE800000 | op << 8 | 0x80 | 4 << 16]])
table("SOPC", 0x80, [lambda op: [0xBF000000 | op << 16 | 2 << 8 | 4], lambda op: [0xBF000000 | op << 16 | 0x80 << 8 | 4]])
table("SOPP", 0x80, [lambda op: [0xBF800000 | op << 16 | 0], lambda op: [0xBF800000 | op << 16 | 3]])
table("SMEM", 0x100, [lambda op: [0xC0020000 | op << 18 | 4 << 6 | 2, 0x10], lambda op: [0xC0020000 | op << 18 | 4 << 6 | 4, 0x10],
                      lambda op: [0xC0020000 | op << 18 | 0 << 6 | 2, 0x10], lambda op: [0xC0000000 | op << 18 | 0 << 6 | 0, 0x0]])
table("VOP1", 0x80, [lambda op: [0x7E000000 | op << 9 | V + 2], lambda op: [0x7E000000 | 2 << 17 | op << 9 | V + 2]])
table("VOP2", 0x40, [lambda op: [op << 25 | 2 << 17 | 4 << 9 | V + 2], lambda op: [op << 25 | 2 << 17 | 4 << 9 | 255, 0x3f800000],
                     lambda op: [op << 25 | 2 << 17 | 4 << 9 | V + 2, 0x3f800000]])
table("VOPC", 0x100, [lambda op: [0x7C000000 | op << 17 | 4 << 9 | V + 2]])
table("VOP3", 0x400, [lambda op: [0xD0000000 | op << 16 | 2, V + 2 | (V + 4) << 9],
                      lambda op: [0xD0000000 | op << 16 | 2, V + 2 | (V + 4) << 9 | (V + 6) << 18],
                      lambda op: [0xD0000000 | op << 16 | 2, V + 2],
                      lambda op: [0xD0000000 | op << 16 | 2, 2],
                      lambda op: [0xD0000000 | op << 16 | 2, 2 | 4 << 9 | 6 << 18],
                      lambda op: [0xD0000000 | op << 16 | 2, V + 2 | (V + 4) << 9 | 6 << 18],
                      lambda op: [0xD0000000 | op << 16 | 2, 0x80 | 0x80 << 9 | 0x80 << 18],
                      lambda op: [0xD0000000 | op << 16 | 2, V + 4 | 0x80 << 9],
                      lambda op: [0xD0000000 | op << 16 | 2, 0x80]])
table("VOP3P", 0x80, [lambda op: [0xD3800000 | op << 16 | 0x4000 | 2, 0x18000000 | V + 2 | (V + 4) << 9],
                      lambda op: [0xD3800000 | op << 16 | 0x4000 | 2, 0x18000000 | V + 2 | (V + 4) << 9 | (V + 6) << 18],
                      lambda op: [0xD3800000 | op << 16 | 0, V + 0 | (V + 8) << 9 | (V + 16) << 18],
                      lambda op: [0xD3800000 | op << 16 | 0, V + 0 | (V + 0) << 9 | (V + 0) << 18],
                      lambda op: [0xD3800000 | op << 16 | 0, V + 0 | (V + 4) << 9 | (V + 8) << 18],
                      lambda op: [0xD3800000 | op << 16 | 0, V + 0 | (V + 0) << 9 | 0x80 << 18],
                      # One source, op_sel_hi set (v_accvgpr_read_b32, v_accvgpr_write_b32).
                      lambda op: [0xD3800000 | op << 16 | 0x4000 | 2, 0x18000000 | V + 2]])
table("DS", 0x100, [lambda op: [0xD8000000 | op << 17, 0x02000301], lambda op: [0xD8000000 | op << 17, 0x00000201],
                    lambda op: [0xD8000000 | op << 17, 0x00030201], lambda op: [0xD8000000 | op << 17, 0x04000001],
                    lambda op: [0xD8000000 | op << 17, 0x04000000], lambda op: [0xD8000000 | op << 17, 0x00000000],
                    lambda op: [0xD8000000 | op << 17, 0x04040201], lambda op: [0xD8000000 | op << 17, 0x08040201],
                    lambda op: [0xD8000000 | op << 17 | 1 << 16, 0x00000000], lambda op: [0xD8000000 | op << 17, 0x04000002]])
for seg, nm in ((0, "FLAT"), (1, "SCRATCH"), (2, "GLOBAL")):
    table(nm, 0x80, [lambda op, seg=seg: [0xDC000000 | op << 18 | seg << 14, 0x10 << 24 | 0x7F << 16 | 8 << 8 | 2],
                     lambda op, seg=seg: [0xDC000000 | op << 18 | seg << 14, 0x10 << 24 | 0 << 16 | 8 << 8 | 2],
                     lambda op, seg=seg: [0xDC000000 | op << 18 | seg << 14 | 1 << 16, 0x10 << 24 | 0x7F << 16 | 8 << 8 | 2],
                     lambda op, seg=seg: [0xDC000000 | op << 18 | seg << 14 | 1 << 16, 0x10 << 24 | 0 << 16 | 8 << 8 | 2],
                     lambda op, seg=seg: [0xDC000000 | op << 18 | seg << 14 | 1 << 13, 0x10 << 24 | 0x7F << 16 | 8 << 8 | 2],
                     lambda op, seg=seg: [0xDC000000 | op << 18 | seg << 14 | 1 << 13, 0x10 << 24 | 0 << 16 | 8 << 8 | 2]])
table("MUBUF", 0x80, [lambda op: [0xE0000000 | op << 18 | 1 << 12, 0x80010402], lambda op: [0xE0000000 | op << 18, 0x80010400],
                      lambda op: [0xE0000000 | op << 18 | 1 << 14 | 1 << 12, 0x80010402], lambda op: [0xE0000000 | op << 18 | 1 << 16, 0x80010000],
                      lambda op: [0xE0000000 | op << 18, 0x00000000]])

# Reserved bits, probed as in gen_opcodes.py.
PROBE = {"SOP2": (0x007FFFFF, False), "SOPK": (0x007FFFFF, False), "SOP1": (0x007F00FF, False),
         "SOPC": (0x0000FFFF, False), "SOPP": (0x0000FFFF, False), "SMEM": (0x0003FFFF, True),
         "VOP1": (0x01FE01FF, False), "VOP2": (0x01FFFFFF, False), "VOPC": (0x0001FFFF, False),
         "VOP3": (0x0000FFFF, True), "VOP3P": (0x0000FFFF, True), "DS": (0x0201FFFF, True),
         "FLAT": (0x0203FFFF, True), "SCRATCH": (0x0203FFFF, True), "GLOBAL": (0x0203FFFF, True),
         "MUBUF": (0x0203FFFF, True)}
FIELDS = {"SOP2": [(0, 8), (8, 8), (16, 7)], "SOPK": [(16, 7)], "SOP1": [(0, 8), (16, 7)], "SOPC": [(0, 8), (8, 8)],
          "SOPP": [], "SMEM": [(0, 6), (6, 7), (57, 7)],
          "VOP1": [(0, 9), (17, 8)], "VOP2": [(0, 9), (9, 8), (17, 8)], "VOPC": [(0, 9), (9, 8)],
          "VOP3": [(0, 8), (32, 9), (41, 9), (50, 9)], "VOP3P": [(0, 8), (32, 9), (41, 9), (50, 9)],
          "DS": [(32, 8), (40, 8), (48, 8), (56, 8)],
          "FLAT": [(32, 8), (40, 8), (48, 7), (56, 8)], "SCRATCH": [(32, 8), (40, 8), (48, 7), (56, 8)],
          "GLOBAL": [(32, 8), (40, 8), (48, 7), (56, 8)], "MUBUF": [(32, 8), (40, 8), (48, 5), (56, 8)]}
mbz = {}
for cls in PROBE:
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
    val = [0] * len(templ)
    for op, t in enumerate(templ):
        if t is not None:
            full = t[0] | ((t[1] << 32) if len(t) > 1 else 0)
            val[op] = full & out[op]
    mbz[cls] = (out, val)

# Unified VALU numbering of GFX9's VOP3: VOPC = op, VOP2 = 0x100 + op, VOP1 = 0x140 + op.
# Opcodes 0x380 and up are the VOP3P class (its own table).
tables["VOP3"] = [m if op < 0x380 else None for op, m in enumerate(tables["VOP3"])]
valu = [mnemonic(m) for m in tables["VOP3"]]
for cls, base in (("VOPC", 0), ("VOP2", 0x100), ("VOP1", 0x140)):
    for op, m in enumerate(tables[cls]):
        m = mnemonic(m)
        if m is not None and valu[base + op] is None:
            valu[base + op] = m
tables["VALU"] = valu

def read_base():
    src = open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src", "opcodes.rs")).read()
    out = {}
    for m in re.finditer(r"pub static (\w+): \[Option<&str>; (\d+)\] = \[(.*?)\];", src, re.S):
        names = re.findall(r'(None|Some\("([^"]*)"\))', m.group(3))
        out[m.group(1)] = [mnemonic(s) if s else None for _, s in names]
    return out

BASE = read_base()

SUBST = [("_dwordx16", "_b512"), ("_dwordx8", "_b256"), ("_dwordx4", "_b128"), ("_dwordx3", "_b96"),
         ("_dwordx2", "_b64"), ("_dword", "_b32"), ("_ubyte_d16_hi", "_d16_hi_u8"), ("_sbyte_d16_hi", "_d16_hi_i8"),
         ("_ubyte_d16", "_d16_u8"), ("_sbyte_d16", "_d16_i8"), ("_short_d16_hi", "_d16_hi_b16"), ("_short_d16", "_d16_b16"),
         ("_byte_d16_hi", "_d16_hi_b8"), ("_ubyte", "_u8"), ("_sbyte", "_i8"), ("_ushort", "_u16"), ("_sshort", "_i16"),
         ("_byte", "_b8"), ("_short", "_b16")]
RENAMES = {
    "s_andn2_b32": "s_and_not1_b32", "s_andn2_b64": "s_and_not1_b64", "s_orn2_b32": "s_or_not1_b32",
    "s_orn2_b64": "s_or_not1_b64", "s_andn2_saveexec_b64": "s_and_not1_saveexec_b64",
    "s_orn2_saveexec_b64": "s_or_not1_saveexec_b64", "s_andn1_saveexec_b64": "s_and_not0_saveexec_b64",
    "s_orn1_saveexec_b64": "s_or_not0_saveexec_b64", "s_andn1_wrexec_b64": "s_and_not0_wrexec_b64",
    "s_andn2_wrexec_b64": "s_and_not1_wrexec_b64",
    "s_ff1_i32_b32": "s_ctz_i32_b32", "s_ff1_i32_b64": "s_ctz_i32_b64", "s_flbit_i32_b32": "s_clz_i32_u32",
    "s_flbit_i32_b64": "s_clz_i32_u64", "s_flbit_i32": "s_cls_i32", "s_flbit_i32_i64": "s_cls_i32_i64",
    "s_ff0_i32_b32": "s_ctz_i32_b32_not", "s_bcnt1_i32_b32": "s_bcnt1_i32_b32",
    "v_add_u32": "v_add_nc_u32", "v_sub_u32": "v_sub_nc_u32", "v_subrev_u32": "v_subrev_nc_u32",
    "v_addc_co_u32": "v_add_co_ci_u32", "v_subb_co_u32": "v_sub_co_ci_u32", "v_subbrev_co_u32": "v_subrev_co_ci_u32",
    "v_add_u16": "v_add_nc_u16", "v_sub_u16": "v_sub_nc_u16", "v_add_i32": "v_add_nc_i32", "v_sub_i32": "v_sub_nc_i32",
    "v_add_i16": "v_add_nc_i16", "v_sub_i16": "v_sub_nc_i16",
    "v_ffbh_u32": "v_clz_i32_u32", "v_ffbl_b32": "v_ctz_i32_b32", "v_ffbh_i32": "v_cls_i32",
    "v_cvt_pkrtz_f16_f32": "v_cvt_pk_rtz_f16_f32", "v_cvt_pknorm_i16_f32": "v_cvt_pk_norm_i16_f32",
    "v_cvt_pknorm_u16_f32": "v_cvt_pk_norm_u16_f32", "v_cvt_pk_u16_u32": "v_cvt_pk_u16_u32",
    "v_lshlrev_b16": "v_lshlrev_b16", "v_mad_u32_u16": "v_mad_u32_u16",
    "v_mul_lo_u16": "v_mul_lo_u16", "v_rcp_iflag_f32": "v_rcp_iflag_f32",
    "v_cvt_f32_ubyte0": "v_cvt_f32_ubyte0", "v_mad_legacy_f16": None, "v_mad_legacy_u16": None,
    "v_mad_legacy_i16": None, "v_fma_legacy_f16": None, "v_div_fixup_legacy_f16": None,
    "v_mad_u16": "v_mad_u16", "v_mad_i16": "v_mad_i16", "v_fma_f16": "v_fma_f16",
    "v_xad_u32": "v_xad_u32", "v_add_lshl_u32": "v_add_lshl_u32", "v_lshl_add_u64": "v_lshl_add_u64",
    "v_pk_fmac_f16": "v_pk_fmac_f16", "v_fmac_f32": "v_fmac_f32", "v_fmac_f64": "v_fmac_f64",
    "s_call_b64": "s_call_b64", "s_trap": "s_trap", "s_cbranch_cdbgsys": "s_cbranch_cdbgsys",
    "s_dcache_inv": "s_dcache_inv", "s_memtime": "s_memtime", "s_memrealtime": "s_memrealtime",
    "s_getpc_b64": "s_getpc_b64", "s_setpc_b64": "s_setpc_b64", "s_swappc_b64": "s_swappc_b64",
    "s_rfe_b64": "s_rfe_b64", "s_movreld_b32": "s_movreld_b32", "s_movrels_b32": "s_movrels_b32",
}

def gfx11_name(m):
    if m in RENAMES:
        return RENAMES[m]
    n = m
    for a, b in (("ds_read2st64_", "ds_load_2addr_stride64_"), ("ds_read2_", "ds_load_2addr_"),
                 ("ds_write2st64_", "ds_store_2addr_stride64_"), ("ds_write2_", "ds_store_2addr_"),
                 ("ds_wrxchg2st64_rtn_", "ds_storexchg_2addr_stride64_rtn_"), ("ds_wrxchg2_rtn_", "ds_storexchg_2addr_rtn_"),
                 ("ds_wrxchg_rtn_", "ds_storexchg_rtn_")):
        if n.startswith(a):
            return b + n[len(a):]
    if n.startswith("ds_read"):
        n = "ds_load" + n[len("ds_read"):]
    elif n.startswith("ds_write"):
        n = "ds_store" + n[len("ds_write"):]
    if re.match(r"^(global|flat|scratch|buffer)_atomic_", n):
        n = re.sub(r"_x2$", "_64", n)
        base = n.rsplit("_", 1)
        # gfx11 names: *_atomic_add_u32, *_add_u64, *_smin_i32 -> min_i32, umin -> min_u32, ...
        n2 = n.replace("_64", "")
        wide = n.endswith("_64")
        op = re.sub(r"^(global|flat|scratch|buffer)_atomic_", "", n2)
        pre = n2[: len(n2) - len(op)]
        tbl = {"swap": "swap_b", "cmpswap": "cmpswap_b", "add": "add_u", "sub": "sub_u", "smin": "min_i", "umin": "min_u",
               "smax": "max_i", "umax": "max_u", "and": "and_b", "or": "or_b", "xor": "xor_b", "inc": "inc_u", "dec": "dec_u"}
        if op in tbl:
            return pre + tbl[op] + ("64" if wide else "32")
        return n
    if n.startswith("ds_"):
        tbl = {"ds_add_u32": "ds_add_u32"}
    for a, b in SUBST:
        if a in n and (n.startswith(("s_", "global_", "flat_", "scratch_", "buffer_", "ds_"))):
            n = n.replace(a, b, 1)
            break
    return n

def rust_table(out, cls, names):
    out.append("/// %s opcode mnemonics (None: not an instruction on gfx942)." % cls)
    out.append("pub static %s: [Option<&str>; %d] = [" % (cls, len(names)))
    for op, m in enumerate(names):
        out.append("    %s, // %#x" % ('Some("%s")' % m if m else "None", op))
    out.append("];")
    out.append("")

CLASSES = ("SOP2", "SOPK", "SOP1", "SOPC", "SOPP", "SMEM", "VOP1", "VOP2", "VOPC", "VOP3", "VALU", "VOP3P", "DS", "FLAT", "SCRATCH", "GLOBAL", "MUBUF")
SEM = ("SOP2", "SOPK", "SOP1", "SOPC", "SOPP", "SMEM", "VALU", "VOP3P", "DS", "FLAT", "SCRATCH", "GLOBAL", "MUBUF")
out = ["//! gfx942 (GFX9/CDNA3) opcode tables: opcode number -> LLVM mnemonic, per encoding class,",
       "//! and each opcode's semantic id (gfx1100's opcode of the same operation, or a new id).",
       "//!",
       "//! Generated by `tools/gen_opcodes_gfx9.py` from llvm-mc-19's disassembler (facts only); do not",
       "//! edit. VALU opcodes use GFX9's VOP3 numbering (VOPC = op, VOP2 = 0x100 + op, VOP1 = 0x140 + op).",
       ""]
for cls in CLASSES:
    rust_table(out, cls, tables[cls])
    if cls in mbz:
        out.append("/// %s fixed bits per opcode as (mask, value) over word 0 (low) and word 1 (high)." % cls)
        out.append("pub static FIXED_%s: [(u64, u64); %d] = [" % (cls, len(mbz[cls][0])))
        for op, (m, v) in enumerate(zip(*mbz[cls])):
            out.append("    (%#x, %#x), // %#x" % (m, v, op))
        out.append("];")
        out.append("")
for cls in SEM:
    names = [mnemonic(m) for m in tables[cls]]
    bnames = BASE[cls]
    index = {}
    for op, m in enumerate(bnames):
        if m and m not in index:
            index[m] = op
    sem, new = [], []
    for op, m in enumerate(names):
        if m is None:
            sem.append(0xffff)
            continue
        k = gfx11_name(m)
        if k in index:
            sem.append(index[k])
        else:
            new.append((op, m))
            sem.append(len(bnames) + 1024 + op)
    out.append("/// Semantic id of each %s opcode: the gfx1100 opcode of the same operation, or" % cls)
    out.append("/// %d + the gfx942 opcode for an operation gfx1100 lacks (0xffff: not an instruction)." % (len(bnames) + 1024))
    out.append("pub static SEM_%s: [u16; %d] = [%s];" % (cls, len(sem), ", ".join("%#x" % x for x in sem)))
    out.append("")
    newt = [None] * len(names)
    for op, m in new:
        newt[op] = m
    out.append("/// %s operations gfx1100 lacks, by semantic id - %d." % (cls, len(bnames) + 1024))
    out.append("pub static NEW_%s: [Option<&str>; %d] = [%s];" % (cls, len(newt), ", ".join('Some("%s")' % m if m else "None" for m in newt)))
    out.append("")
    out.append("/// Semantic ids of the %s operations gfx942 has and gfx1100 lacks, by name." % cls)
    out.append("#[allow(dead_code)]")
    out.append("pub mod new_%s {" % cls.lower())
    seen = set()
    for op, m in new:
        if m not in seen:
            seen.add(m)
            out.append("    pub const %s: u16 = %#x;" % (m.upper().replace(".", "_"), len(bnames) + 1024 + op))
    out.append("}")
    out.append("")
here = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src")
open(os.path.join(here, "opcodes_gfx9.rs"), "w").write("\n".join(out))
if os.environ.get("RIG_ISA_NEW"):
    for cls in SEM:
        names = [mnemonic(m) for m in tables[cls]]
        print(cls, "new:", " ".join(m for m in names if m and gfx11_name(m) not in set(BASE[cls])))
print("ok")
