//! Adversarial arguments to every public entry point: sizes, offsets and
//! alignments at 0, 1, non-powers of two and near `u64::MAX`, reversed and
//! overflowing ranges, layouts at Vulkan's limits. Each gets a typed error
//! (or a correct result) and leaves the allocator consistent: never a
//! panic, never a wrapped figure.

use vk_suballoc::device::fake::FakeLayout;
use vk_suballoc::{DedicatedPolicy, Error, Usage};

use super::{allocator, buffer, finish, free};

/// A request whose size, rounded up to its alignment, would pass `u64::MAX`
/// fits no block: it must not wrap to a tiny placed size (and take a 16-byte
/// run slot while reporting `u64::MAX` bytes, with a mapped slice that long).
/// Only a heap of nearly 2^64 bytes admits such a size; the fake device can
/// report one.
#[test]
fn a_size_that_rounds_past_u64_max_takes_no_block() {
    let layout = FakeLayout::lavapipe().with_heap_sizes(u64::MAX);
    let (allocator, device) = allocator(layout);
    // A block (and a run) exists, so a wrapped size would find room.
    let small = allocator.allocate(&buffer(16, 16, Usage::UPLOAD)).unwrap();
    let before = allocator.stats();
    for (size, align) in [
        (u64::MAX, 2),
        (u64::MAX, 256),
        (u64::MAX - 254, 256),
        (u64::MAX, 1 << 63),
        ((1 << 63) + 1, 1 << 63),
    ] {
        let request = buffer(size, align, Usage::UPLOAD).dedicated(DedicatedPolicy::Never);
        assert_eq!(
            allocator.allocate(&request).map(|a| (a.size(), a.offset())),
            Err(Error::OutOfDeviceMemory),
            "size {size} align {align}"
        );
    }
    assert_eq!(allocator.stats(), before);
    free(&allocator, small);
    finish(allocator, &device);
}
