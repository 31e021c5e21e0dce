//! `amd_queue_t`'s layout (`rig_amd::aql::amd_queue`) against a C compiler's layout of the
//! public field list (ROCR-Runtime `runtime/hsa-runtime/inc/amd_hsa_queue.h`, with HSA's
//! `hsa_queue_t` from `hsa.h` at its start): the field list below is the header's order and
//! types, so the compiler, not rig, computes each offset. And what a descriptor holds.
//!
//! Needs a C compiler (`$CC`, else `cc`).

use std::collections::BTreeMap;
use std::process::Command;

use rig_amd::aql::{self, AmdQueue, amd_queue};
use rig_amd::gpu::Generation;

/// The public definition's fields, in order, as C declarations (types as in the header;
/// `hsa_signal_t` is a struct of one u64 handle, the ring pointer a 64-bit pointer).
const FIELDS: &str = r#"
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
typedef struct { uint64_t handle; } hsa_signal_t;
typedef struct {
  uint32_t type;
  uint32_t features;
  void *base_address;
  hsa_signal_t doorbell_signal;
  uint32_t size;
  uint32_t reserved1;
  uint64_t id;
} hsa_queue_t;
typedef struct __attribute__((aligned(64))) {
  hsa_queue_t hsa_queue;
  uint32_t caps;
  uint32_t reserved1[3];
  volatile uint64_t write_dispatch_id;
  uint32_t group_segment_aperture_base_hi;
  uint32_t private_segment_aperture_base_hi;
  uint32_t max_cu_id;
  uint32_t max_wave_id;
  volatile uint64_t max_legacy_doorbell_dispatch_id_plus_1;
  volatile uint32_t legacy_doorbell_lock;
  uint32_t reserved2[9];
  volatile uint64_t read_dispatch_id;
  uint32_t read_dispatch_id_field_base_byte_offset;
  uint32_t compute_tmpring_size;
  uint32_t scratch_resource_descriptor[4];
  uint64_t scratch_backing_memory_location;
  uint64_t scratch_backing_memory_byte_size;
  uint32_t scratch_wave64_lane_byte_size;
  uint32_t queue_properties;
  uint32_t reserved3[2];
  hsa_signal_t queue_inactive_signal;
  uint32_t reserved4[14];
} amd_queue_t;
#define AT(f) printf(#f " %zu\n", offsetof(amd_queue_t, f))
int main(void) {
  printf("sizeof %zu\n", sizeof(amd_queue_t));
  printf("alignof %zu\n", _Alignof(amd_queue_t));
  AT(hsa_queue.type); AT(hsa_queue.features); AT(hsa_queue.base_address);
  AT(hsa_queue.doorbell_signal); AT(hsa_queue.size); AT(hsa_queue.id);
  AT(caps); AT(write_dispatch_id); AT(group_segment_aperture_base_hi);
  AT(private_segment_aperture_base_hi); AT(max_cu_id); AT(max_wave_id);
  AT(max_legacy_doorbell_dispatch_id_plus_1); AT(legacy_doorbell_lock);
  AT(read_dispatch_id); AT(read_dispatch_id_field_base_byte_offset);
  AT(compute_tmpring_size); AT(scratch_resource_descriptor);
  AT(scratch_backing_memory_location); AT(scratch_backing_memory_byte_size);
  AT(scratch_wave64_lane_byte_size); AT(queue_properties); AT(queue_inactive_signal);
  return 0;
}
"#;

fn compiled_layout() -> BTreeMap<String, usize> {
    let dir = std::env::temp_dir().join(format!("rig-amd-queue-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (src, bin) = (dir.join("amd_queue.c"), dir.join("amd_queue"));
    std::fs::write(&src, FIELDS).unwrap();
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let out = Command::new(&cc)
        .args(["-std=c11", "-Wall", "-Werror", "-o"])
        .arg(&bin)
        .arg(&src)
        .output()
        .unwrap_or_else(|e| panic!("running the C compiler {cc:?}: {e}"));
    assert!(
        out.status.success(),
        "compiling the amd_queue_t layout failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = Command::new(&bin).output().unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    assert!(out.status.success());
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| {
            let (k, v) = l.rsplit_once(' ').unwrap();
            (k.to_string(), v.parse().unwrap())
        })
        .collect()
}

#[test]
fn offsets_match_the_public_definition() {
    let c = compiled_layout();
    let want: [(&str, usize); 23] = [
        ("sizeof", amd_queue::BYTES),
        ("alignof", amd_queue::ALIGN as usize),
        ("hsa_queue.type", amd_queue::TYPE),
        ("hsa_queue.features", amd_queue::FEATURES),
        ("hsa_queue.base_address", amd_queue::BASE_ADDRESS),
        ("hsa_queue.doorbell_signal", amd_queue::DOORBELL_SIGNAL),
        ("hsa_queue.size", amd_queue::SIZE),
        ("hsa_queue.id", amd_queue::ID),
        ("caps", amd_queue::CAPS),
        ("write_dispatch_id", amd_queue::WRITE_DISPATCH_ID),
        (
            "group_segment_aperture_base_hi",
            amd_queue::GROUP_SEGMENT_APERTURE_BASE_HI,
        ),
        (
            "private_segment_aperture_base_hi",
            amd_queue::PRIVATE_SEGMENT_APERTURE_BASE_HI,
        ),
        ("max_cu_id", amd_queue::MAX_CU_ID),
        ("max_wave_id", amd_queue::MAX_WAVE_ID),
        (
            "max_legacy_doorbell_dispatch_id_plus_1",
            amd_queue::MAX_LEGACY_DOORBELL_DISPATCH_ID_PLUS_1,
        ),
        ("legacy_doorbell_lock", amd_queue::LEGACY_DOORBELL_LOCK),
        ("read_dispatch_id", amd_queue::READ_DISPATCH_ID),
        (
            "read_dispatch_id_field_base_byte_offset",
            amd_queue::READ_DISPATCH_ID_FIELD_BASE_BYTE_OFFSET,
        ),
        ("compute_tmpring_size", amd_queue::COMPUTE_TMPRING_SIZE),
        (
            "scratch_resource_descriptor",
            amd_queue::SCRATCH_RESOURCE_DESCRIPTOR,
        ),
        (
            "scratch_backing_memory_location",
            amd_queue::SCRATCH_BACKING_MEMORY_LOCATION,
        ),
        (
            "scratch_backing_memory_byte_size",
            amd_queue::SCRATCH_BACKING_MEMORY_BYTE_SIZE,
        ),
        (
            "scratch_wave64_lane_byte_size",
            amd_queue::SCRATCH_WAVE64_LANE_BYTE_SIZE,
        ),
    ];
    let mut errors = Vec::new();
    for (name, rust) in want {
        if c.get(name) != Some(&rust) {
            errors.push(format!("{name}: rig {rust}, C {:?}", c.get(name)));
        }
    }
    for (name, rust) in [
        ("queue_properties", amd_queue::QUEUE_PROPERTIES),
        ("queue_inactive_signal", amd_queue::QUEUE_INACTIVE_SIGNAL),
    ] {
        if c.get(name) != Some(&rust) {
            errors.push(format!("{name}: rig {rust}, C {:?}", c.get(name)));
        }
    }
    assert!(errors.is_empty(), "{}", errors.join("\n"));
}

#[test]
fn a_descriptor_keeps_its_fields_at_their_offsets() {
    let mut q = AmdQueue::new(0x7_0000_0000, 4096);
    q.id = 3;
    q.write_dispatch_id = 9;
    q.read_dispatch_id = 7;
    q.max_cu_id = 95;
    q.max_wave_id = 31;
    q.set_scratch(
        Generation::Gfx11.hal(),
        0x9_0000_0000,
        96 * 32 * 1024,
        96 * 32,
    );
    let b = q.to_bytes();
    let u32_at = |at: usize| u32::from_le_bytes(b[at..at + 4].try_into().unwrap());
    let u64_at = |at: usize| u64::from_le_bytes(b[at..at + 8].try_into().unwrap());
    assert_eq!(u32_at(amd_queue::TYPE), aql::QUEUE_TYPE_SINGLE);
    assert_eq!(u64_at(amd_queue::BASE_ADDRESS), 0x7_0000_0000);
    assert_eq!(u32_at(amd_queue::SIZE), 64, "packets of the ring");
    assert_eq!(u64_at(amd_queue::WRITE_DISPATCH_ID), 9);
    assert_eq!(u64_at(amd_queue::READ_DISPATCH_ID), 7);
    assert_eq!(
        u32_at(amd_queue::READ_DISPATCH_ID_FIELD_BASE_BYTE_OFFSET),
        128
    );
    assert_eq!(
        u64_at(amd_queue::SCRATCH_BACKING_MEMORY_LOCATION),
        0x9_0000_0000
    );
    assert_eq!(
        u64_at(amd_queue::SCRATCH_BACKING_MEMORY_BYTE_SIZE),
        96 * 32 * 1024
    );
    // 1 KiB a wave: WAVESIZE counts 256-byte granules on GFX11, WAVES the slots.
    assert_eq!(
        u32_at(amd_queue::COMPUTE_TMPRING_SIZE),
        (96 * 32) | (4 << 12)
    );
    assert_eq!(u32_at(amd_queue::SCRATCH_WAVE64_LANE_BYTE_SIZE), 16);
    assert_eq!(
        u32_at(amd_queue::SCRATCH_RESOURCE_DESCRIPTOR),
        0,
        "the resource's base, low half"
    );
    assert_eq!(u32_at(amd_queue::SCRATCH_RESOURCE_DESCRIPTOR + 4), 9);
    assert_eq!(
        u32_at(amd_queue::QUEUE_PROPERTIES),
        aql::QUEUE_PROPERTIES_IS_PTR64
    );
    assert_eq!(AmdQueue::from_bytes(&b), q);
    assert_eq!(
        AmdQueue::at_read_pointer(0x1000 + 128),
        Some(0x1000),
        "the CP finds it at the read pointer less read_dispatch_id's offset"
    );
    assert_eq!(AmdQueue::at_read_pointer(64), None);
    // No scratch clears every scratch field.
    q.set_scratch(Generation::Gfx11.hal(), 0x9_0000_0000, 0, 96 * 32);
    assert_eq!(q, {
        let mut n = AmdQueue::from_bytes(&b);
        n.set_scratch(Generation::Gfx11.hal(), 0, 0, 0);
        n
    });
    assert_eq!(q.scratch_backing_memory_byte_size, 0);
}
