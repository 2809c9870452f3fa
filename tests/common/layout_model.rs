//! Which memory types of a fake layout the allocator may use, as the
//! fake-device API walk (`tests/fake_device/api_walk`) and the
//! whole-allocator fuzz target (`fuzz/fuzz_targets/allocator_ops`) model
//! it: one copy, included by both with `#[path]`.

use gpu_alloc_types::MemoryPropertyFlags;
use vk_suballoc::device::fake::FakeLayout;

/// The layout's protected memory types, one bit per type index.
pub fn protected_types(layout: &FakeLayout) -> u32 {
    layout
        .memory_types
        .iter()
        .enumerate()
        .filter(|(_, ty)| ty.props.contains(MemoryPropertyFlags::PROTECTED))
        .fold(0, |mask, (index, _)| mask | 1 << index)
}

/// The memory types the allocator may use at all: every one, less AMD's
/// device-coherent types unless their feature is on, and less protected
/// types unless `protectedMemory` is.
pub fn usable_types(layout: &FakeLayout) -> u32 {
    let existing = ((1u64 << layout.memory_types.len()) - 1) as u32;
    let mut usable = if layout.amd_device_coherent_memory {
        existing
    } else {
        existing & !layout.amd_device_coherent_types
    };
    if !layout.protected_memory {
        usable &= !protected_types(layout);
    }
    usable
}
