//! Creating an upload ring: GPU-only rings (a usage without host access),
//! the descriptions refused (an empty buffer usage or an extension's, required flags no memory
//! type has, device addresses without buffer device address, a size past
//! every heap or past one memory object), in the documented order and with
//! nothing left behind, the buffer usages a ring takes, and the memory
//! types its required and preferred flags give its chunks.
//!
//! The tests sit in the files below, by theme: the memory types a ring's
//! chunks take (`memory_types.rs`), the buffer usages it takes and refuses
//! and the order of its refusals (`buffer_usage.rs`), its device addresses
//! (`device_addresses.rs`), where its chunks lie in their memory objects
//! (`chunk_alignment.rs`), and the sizes refused as too large
//! (`sizes.rs`). This file holds the helpers they share, which
//! `ring_max_buffer.rs` uses too.

use vk_suballoc::device::fake::FakeDevice;
use vk_suballoc::{Error, UploadRingDesc};

#[path = "ring_creation/buffer_usage.rs"]
mod buffer_usage;
#[path = "ring_creation/chunk_alignment.rs"]
mod chunk_alignment;
#[path = "ring_creation/device_addresses.rs"]
mod device_addresses;
#[path = "ring_creation/memory_types.rs"]
mod memory_types;
#[path = "ring_creation/sizes.rs"]
mod sizes;

/// Whether `refuse` made no Vulkan object (a buffer a validation layer
/// could flag past `maxBufferSize`): the fake device numbers its objects in
/// order, so one made in between shows as a gap.
pub(super) fn makes_nothing(device: &FakeDevice, refuse: impl FnOnce()) -> bool {
    let first = device.create_resource();
    refuse();
    let next = device.create_resource();
    device.destroy_resource(first);
    device.destroy_resource(next);
    next == first + 1
}

/// A ring described by `desc` is refused with `expected` before its
/// buffer is made.
pub(super) fn a_ring_is_refused(
    allocator: &super::super::FakeAllocator,
    device: &FakeDevice,
    desc: &UploadRingDesc<'_>,
    expected: Error,
) {
    assert!(
        makes_nothing(device, || assert_eq!(
            allocator.create_upload_ring(desc).map(|_| ()),
            Err(expected)
        )),
        "{desc:?}: a buffer was made"
    );
}

/// A growing ring asked for `size` bytes refuses them with `expected` (as
/// larger than the heaps it can use, or than `maxBufferSize`), before its
/// new chunk's buffer is made, and changes no figure; the ring is destroyed
/// then (its chunk goes after the frame).
pub(super) fn a_growing_ring_refuses(
    allocator: &super::super::FakeAllocator,
    device: &FakeDevice,
    size: u64,
    expected: Error,
) {
    let desc = UploadRingDesc {
        grow: true,
        ..UploadRingDesc::default()
    };
    let ring = allocator.create_upload_ring(&desc).unwrap();
    let before = allocator.stats();
    assert!(
        makes_nothing(device, || assert_eq!(
            allocator.ring_allocate(ring, size, 1).map(|_| ()),
            Err(expected)
        )),
        "{size}: a growing ring's buffer was made"
    );
    assert_eq!(allocator.stats(), before);
    allocator.destroy_upload_ring(ring).unwrap();
}
