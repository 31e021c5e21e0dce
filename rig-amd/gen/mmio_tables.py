#!/usr/bin/env python3
"""Generates rig-amd/src/mmio/tables.rs from Linux's asic_reg headers.

Usage: rig-amd/gen/mmio_tables.py LINUX_TREE > rig-amd/src/mmio/tables.rs

LINUX_TREE is a kernel source tree (the table in the tree was made from Debian's
linux-source-6.12, 6.12.95). For each table below the script reads the named
`*_offset.h` (each `regNAME`/`mmNAME` offset and its `_BASE_IDX` segment) and the matching
`*_sh_mask.h` (each `NAME__FIELD__SHIFT` and `NAME__FIELD_MASK`). A register or field the
header lacks stops the script: every number in the output is one the header states.

The tables name the register headers amdgpu itself includes for each IP version the
bring-up drives (rig-amd/src/discovery.rs maps versions to tables).
"""
import os
import re
import sys

INCLUDE = "drivers/gpu/drm/amd/include/asic_reg"

HQD = [
    "CP_HQD_ACTIVE", "CP_HQD_VMID", "CP_HQD_PERSISTENT_STATE", "CP_HQD_PIPE_PRIORITY",
    "CP_HQD_QUEUE_PRIORITY", "CP_HQD_QUANTUM", "CP_HQD_PQ_BASE", "CP_HQD_PQ_BASE_HI",
    "CP_HQD_PQ_RPTR", "CP_HQD_PQ_RPTR_REPORT_ADDR", "CP_HQD_PQ_RPTR_REPORT_ADDR_HI",
    "CP_HQD_PQ_WPTR_POLL_ADDR", "CP_HQD_PQ_WPTR_POLL_ADDR_HI", "CP_HQD_PQ_DOORBELL_CONTROL",
    "CP_HQD_PQ_CONTROL", "CP_HQD_PQ_WPTR_LO", "CP_HQD_PQ_WPTR_HI", "CP_HQD_IB_CONTROL",
    "CP_HQD_DEQUEUE_REQUEST", "CP_HQD_EOP_BASE_ADDR", "CP_HQD_EOP_BASE_ADDR_HI",
    "CP_HQD_EOP_CONTROL", "CP_HQD_EOP_RPTR", "CP_HQD_EOP_WPTR", "CP_MQD_BASE_ADDR",
    "CP_MQD_BASE_ADDR_HI", "CP_MQD_CONTROL", "CP_MEC_DOORBELL_RANGE_LOWER",
    "CP_MEC_DOORBELL_RANGE_UPPER", "GRBM_GFX_CNTL", "GRBM_STATUS", "GRBM_SOFT_RESET", "CP_STAT",
]
def gcvm(split_status=False):
    """The VM context-0 and L2 fault registers; GC 12 and MMHUB 4.1 split the fault status
    into _LO32 and _HI32."""
    status = (["VM_L2_PROTECTION_FAULT_STATUS_LO32", "VM_L2_PROTECTION_FAULT_STATUS_HI32"]
              if split_status else ["VM_L2_PROTECTION_FAULT_STATUS"])
    return GCVM + status + GCVM_FAULT


GCVM = [
    "VM_CONTEXT0_CNTL", "VM_CONTEXT0_PAGE_TABLE_BASE_ADDR_LO32",
    "VM_CONTEXT0_PAGE_TABLE_BASE_ADDR_HI32", "VM_CONTEXT0_PAGE_TABLE_START_ADDR_LO32",
    "VM_CONTEXT0_PAGE_TABLE_START_ADDR_HI32", "VM_CONTEXT0_PAGE_TABLE_END_ADDR_LO32",
    "VM_CONTEXT0_PAGE_TABLE_END_ADDR_HI32", "VM_INVALIDATE_ENG17_REQ", "VM_INVALIDATE_ENG17_ACK",
    "VM_L2_CNTL", "VM_L2_PROTECTION_FAULT_CNTL",
] + [
    # Contexts 1 to 15 (one VMID each), written out by name as the headers state each.
    r % n for n in range(1, 16) for r in (
        "VM_CONTEXT%d_CNTL", "VM_CONTEXT%d_PAGE_TABLE_BASE_ADDR_LO32",
        "VM_CONTEXT%d_PAGE_TABLE_BASE_ADDR_HI32", "VM_CONTEXT%d_PAGE_TABLE_START_ADDR_LO32",
        "VM_CONTEXT%d_PAGE_TABLE_START_ADDR_HI32", "VM_CONTEXT%d_PAGE_TABLE_END_ADDR_LO32",
        "VM_CONTEXT%d_PAGE_TABLE_END_ADDR_HI32")
]
GCVM_FAULT = ["VM_L2_PROTECTION_FAULT_ADDR_LO32", "VM_L2_PROTECTION_FAULT_ADDR_HI32"]
MCVM = [
    "MC_VM_FB_LOCATION_BASE", "MC_VM_FB_LOCATION_TOP", "MC_VM_AGP_BASE", "MC_VM_AGP_BOT",
    "MC_VM_AGP_TOP", "MC_VM_SYSTEM_APERTURE_LOW_ADDR", "MC_VM_SYSTEM_APERTURE_HIGH_ADDR",
    "MC_VM_MX_L1_TLB_CNTL",
]
# The C2PMSG mailbox registers amdgpu's psp_v13_0.c and psp_v14_0.c use.
PSP13 = ["C2PMSG_%d" % n for n in (33, 35, 36, 58, 64, 67, 69, 70, 71, 73, 81, 101, 102, 103, 115,
                                   116, 127)]
PSP14 = ["C2PMSG_%d" % n for n in (35, 36, 64, 67, 69, 70, 71, 73, 81, 101, 102, 103, 115, 116)]
# The message, argument and response registers of the SMU mailbox (smu_v13_0_0_ppt.c and
# smu_v14_0_2_ppt.c: 66 message, 82 argument, 90 response; 53/54/75 their debug mailbox).
SMU = ["C2PMSG_%d" % n for n in (53, 54, 66, 75, 82, 90)]
IH = [
    "IH_RB_CNTL", "IH_RB_BASE", "IH_RB_BASE_HI", "IH_RB_RPTR", "IH_RB_WPTR", "IH_RB_WPTR_ADDR_LO",
    "IH_RB_WPTR_ADDR_HI", "IH_DOORBELL_RPTR", "IH_CHICKEN",
] + ["IH_VMID_%d_LUT" % n for n in range(16)] + ["IH_VMID_%d_LUT_MM" % n for n in range(16)]
# (IH_VMID_n_LUT maps the GC hub's VMID n to its PASID, _MM the MM hub's: the IH puts that
# PASID in each entry, as gmc_v9_0 / gmc_v11_0's emit_pasid_mapping programs it.)
# HDP 4.0's header has a read-cache invalidate register (hdp_v4_0.c) and no memory power
# control (hdp_v4_0.c defines that one itself); HDP 6 and 7 the other way round.
HDP = ["HDP_HOST_PATH_CNTL", "HDP_MISC_CNTL", "HDP_NONSURFACE_BASE", "HDP_NONSURFACE_BASE_HI"]
# The SQ's performance counters on GC 12 (rig-amd/src/perfcounter.rs): eight selects and
# eight 32-bit counters (GC 12's SQ counters have no _HI half), the SQ's shader-type and VMID
# filters, the CP's and RLC's perfmon state, and GRBM_GFX_INDEX, which picks the shader engine
# a register access reaches (or broadcasts).
SQ_PERF = (["SQ_PERFCOUNTER%d_SELECT" % n for n in range(8)]
           + ["SQ_PERFCOUNTER%d_LO" % n for n in range(8)]
           + ["SQ_PERFCOUNTER_CTRL", "SQ_PERFCOUNTER_CTRL2", "CP_CP_PERFMON_CNTL",
              "RLC_PERFMON_CNTL", "GRBM_GFX_INDEX"])
NBIO = ["BIF_BX0_REMAP_HDP_MEM_FLUSH_CNTL", "BIF_BX0_REMAP_HDP_REG_FLUSH_CNTL",
        "BIF_BX_PF0_GPU_HDP_FLUSH_REQ", "BIF_BX_PF0_GPU_HDP_FLUSH_DONE",
        "RCC_DEV0_EPF0_RCC_CONFIG_MEMSIZE"]

# (table name, header stem under asic_reg, the block it is a table of, registers).
TABLES = [
    ("gc_9_4_3", "gc/gc_9_4_3", "GC", HQD + ["CP_MEC_CNTL"] + gcvm() + MCVM),
    ("gc_11_0_0", "gc/gc_11_0_0", "GC", HQD + ["CP_MEC_RS64_CNTL"]
     + ["GC" + r for r in gcvm() + MCVM]),
    ("gc_12_0_0", "gc/gc_12_0_0", "GC", HQD + ["CP_MEC_RS64_CNTL"]
     + ["GC" + r for r in gcvm(True) + MCVM] + SQ_PERF),
    ("mp_13_0_2", "mp/mp_13_0_2", "MP0", ["MP0_SMN_" + r for r in PSP13]),
    ("mp_14_0_2", "mp/mp_14_0_2", "MP0", ["MPASP_SMN_" + r for r in PSP14]),
    ("mp_13_0_0", "mp/mp_13_0_0", "MP1", ["MP1_SMN_" + r for r in SMU]),
    ("mp_13_0_6", "mp/mp_13_0_6", "MP1", ["MP1_SMN_" + r for r in SMU]),
    ("mp_14_0_2_smu", "mp/mp_14_0_2", "MP1", ["MP1_SMN_" + r for r in SMU]),
    ("osssys_4_2_0", "oss/osssys_4_2_0", "OSSSYS", IH),
    ("osssys_6_0_0", "oss/osssys_6_0_0", "OSSSYS", IH),
    ("osssys_7_0_0", "oss/osssys_7_0_0", "OSSSYS", IH),
    ("mmhub_1_8_0", "mmhub/mmhub_1_8_0", "MMHUB", gcvm() + MCVM),
    ("mmhub_3_0_0", "mmhub/mmhub_3_0_0", "MMHUB", ["MM" + r for r in gcvm() + MCVM]),
    ("mmhub_4_1_0", "mmhub/mmhub_4_1_0", "MMHUB", ["MM" + r for r in gcvm(True) + MCVM]),
    ("hdp_4_0", "hdp/hdp_4_0", "HDP", HDP + ["HDP_READ_CACHE_INVALIDATE"]),
    ("hdp_6_0_0", "hdp/hdp_6_0_0", "HDP", HDP + ["HDP_MEM_POWER_CTRL"]),
    ("hdp_7_0_0", "hdp/hdp_7_0_0", "HDP", HDP + ["HDP_MEM_POWER_CTRL"]),
    ("nbio_4_3_0", "nbio/nbio_4_3_0", "NBIO", NBIO),
    ("nbio_7_9_0", "nbio/nbio_7_9_0", "NBIO", NBIO),
    ("nbif_6_3_1", "nbif/nbif_6_3_1", "NBIO", NBIO),
]

# (static name, header under drivers/gpu/drm/amd/include, enum, prefix, the names rig uses):
# enumerations whose values a register field takes.
ENUMS = [
    # The SQ's counter selects (PERF_SEL of SQ_PERFCOUNTERn_SELECT) on GC 12, by the names
    # rig offers (rig-amd/src/perfcounter.rs), less the enum's SQ_PERF_SEL_ prefix.
    ("SQ_PERF_SEL_SOC24", "soc24_enum.h", "SQ_PERF_SEL", "SQ_PERF_SEL_",
     ["WAVES", "INSTS_VALU", "INSTS_SALU", "INSTS_SMEM", "INSTS_FLAT", "INSTS_TEX",
      "INSTS_LDS", "INSTS_BRANCH", "WAVE_CYCLES", "BUSY_CYCLES"]),
    # PERFMON_STATE of CP_CP_PERFMON_CNTL.
    ("CP_PERFMON_STATE_SOC24", "soc24_enum.h", "CP_PERFMON_STATE", "CP_PERFMON_STATE_",
     ["DISABLE_AND_RESET", "START_COUNTING", "STOP_COUNTING"]),
]
# (static name, header): the blocks of a header that have a `<BLOCK>_PERF_SEL` enum, the
# blocks whose counters the header names.
PERF_BLOCKS = [("PERF_BLOCKS_SOC24", "soc24_enum.h")]
PERF_ENUM = re.compile(r"^typedef enum (\w+)_PERF_SEL \{")
ENUM_ENTRY = re.compile(r"^\s*(\w+)\s*=\s*(0x[0-9a-fA-F]+|\d+)\s*,?")

DEFINE = re.compile(r"^#define\s+(\w+)\s+(0x[0-9a-fA-F]+|\d+)L?\b")


def defines(path):
    out = {}
    with open(path, encoding="latin-1") as f:
        for line in f:
            m = DEFINE.match(line)
            if m:
                out.setdefault(m.group(1), int(m.group(2), 0))
    return out


def fields(masks, reg):
    found = []
    prefix = reg + "__"
    for name, shift in masks.items():
        if name.startswith(prefix) and name.endswith("__SHIFT"):
            field = name[len(prefix):-len("__SHIFT")]
            if "__" in field:
                continue
            mask = masks.get(prefix + field + "_MASK")
            if mask is None:
                sys.exit("%s: %s has a shift and no mask" % (reg, field))
            bits = bin(mask).count("1")
            if mask != ((1 << bits) - 1) << shift:
                sys.exit("%s.%s: mask %#x is not contiguous from bit %d" % (reg, field, mask, shift))
            found.append((shift, field, bits))
    return sorted(found)


def enum_values(path, enum):
    """The entries of `typedef enum ENUM { ... } ENUM;` in the header at `path`."""
    out, inside = {}, False
    with open(path, encoding="latin-1") as f:
        for line in f:
            if line.startswith("typedef enum %s {" % enum):
                inside = True
            elif inside and line.startswith("}"):
                return out
            elif inside:
                m = ENUM_ENTRY.match(line)
                if m:
                    out.setdefault(m.group(1), int(m.group(2), 0))
    sys.exit("no enum %s in %s" % (enum, path))


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    root = os.path.join(sys.argv[1], INCLUDE)
    out = sys.stdout
    out.write("// @generated by rig-amd/gen/mmio_tables.py from Linux 6.12's\n")
    out.write("// drivers/gpu/drm/amd/include/asic_reg headers. Do not edit: run the script.\n")
    out.write("// One register a line: name, dword offset in its segment, segment (_BASE_IDX), and its\n")
    out.write("// fields as (name, shift, bits) from the matching _sh_mask.h.\n\n")
    out.write("use super::{Block, Reg, Table, named as n};\n\n")
    names = []
    for name, stem, block, regs in TABLES:
        offsets = defines(os.path.join(root, stem + "_offset.h"))
        masks = defines(os.path.join(root, stem + "_sh_mask.h"))
        const = name.upper()
        names.append(const)
        out.write("/// `%s_offset.h` and `%s_sh_mask.h`.\n" % (stem.split("/")[1], stem.split("/")[1]))
        out.write("pub static %s: Table = Table {\n" % const)
        out.write("    name: \"%s\",\n" % name)
        out.write("    block: Block::%s,\n" % block.capitalize())
        out.write("    source: \"%s/%s_offset.h\",\n" % (INCLUDE, stem))
        out.write("    regs: &[\n")
        for reg in regs:
            off = offsets.get("reg" + reg, offsets.get("mm" + reg))
            idx = offsets.get("reg" + reg + "_BASE_IDX", offsets.get("mm" + reg + "_BASE_IDX"))
            if off is None or idx is None:
                sys.exit("%s: no %s (or its _BASE_IDX) in %s_offset.h" % (name, reg, stem))
            fs = ", ".join('n("%s", %d, %d)' % (f, shift, bits) for shift, f, bits in fields(masks, reg))
            out.write('        Reg { name: "%s", offset: %#06x, base_index: %d, fields: &[%s] },\n'
                      % (reg, off, idx, fs))
        out.write("    ],\n};\n\n")
    for static, header, enum, prefix, wanted in ENUMS:
        values = enum_values(os.path.join(sys.argv[1], os.path.dirname(INCLUDE), header), enum)
        out.write("/// `%s` of `%s`: (name less `%s`, value), the entries rig uses.\n"
                  % (enum, header, prefix))
        out.write("pub static %s: &[(&str, u32)] = &[\n" % static)
        for name in wanted:
            if prefix + name not in values:
                sys.exit("no %s%s in %s's %s" % (prefix, name, header, enum))
            out.write('    ("%s", %#x),\n' % (name, values[prefix + name]))
        out.write("];\n\n")
    for static, header in PERF_BLOCKS:
        blocks = []
        with open(os.path.join(sys.argv[1], os.path.dirname(INCLUDE), header),
                  encoding="latin-1") as f:
            for line in f:
                m = PERF_ENUM.match(line)
                if m and m.group(1) not in blocks:
                    blocks.append(m.group(1))
        out.write("/// The blocks of `%s` with a `<BLOCK>_PERF_SEL` enum, in its order.\n" % header)
        out.write("pub static %s: &[&str] = &[%s];\n\n"
                  % (static, ", ".join('"%s"' % b for b in blocks)))
    out.write("/// Every table, in the order the script lists them.\n")
    out.write("pub static ALL: &[&Table] = &[%s];\n" % ", ".join("&" + n for n in names))


main()
