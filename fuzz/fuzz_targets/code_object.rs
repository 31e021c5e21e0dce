//! Arbitrary bytes to the code-object parser: an error or a code object, never a panic; a
//! parsed object is then checked, placed and its kernels' arguments laid out.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rig_amd::code_object::CodeObject;
use rig_amd::gpu::GPUS;
use rig_amd::kernarg::{self, Grid};

fuzz_target!(|data: &[u8]| {
    let Ok(co) = CodeObject::parse(data) else {
        return;
    };
    for gpu in GPUS {
        let _ = co.check(gpu);
    }
    for k in co.kernels() {
        let _ = k.runtime_services().count();
        let params = vec![0u8; k.explicit_size() as usize];
        let mut out = vec![0u8; k.plan().bytes()];
        let grid = Grid {
            groups: [2, 2, 2],
            group_size: [32, 2, 1],
            dynamic_lds: 64,
        };
        let _ = kernarg::layout(k.plan(), &params, &[], &grid, &mut out);
    }
    if co.image_size() <= 1 << 24 {
        let _ = co.placed(0x1_0000_0000);
    }
});
