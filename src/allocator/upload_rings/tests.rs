//! Upload ring handles across the generations of their slot: a test that
//! needs the rings' table itself, to fast-forward a slot through 2^32
//! rings made and destroyed in it, which no test through the public API
//! can reach in reasonable time.

use crate::allocator::lock;
use crate::device::fake::{FakeDevice, FakeLayout};
use crate::{Allocator, Config, Error, UploadRingDesc};

/// An [`UploadRing`](crate::UploadRing) and its
/// [`RingAllocation`](crate::RingAllocation)s are `Copy`: an engine may
/// keep them past the ring's destruction. They stay stale once the ring's
/// slot has been reused 2^32 times, as a pool's handle does after 2^16
/// (`pool_edges::handles`). When the slot's 32-bit generation wrapped, the
/// first ring's handle named the ring made after the wrap: it allocated
/// there, and could destroy it; and a ring allocation of the first ring,
/// of a frame not collected yet, passed `ring_write`'s checks against the
/// new ring's chunk, which it pinned, while it copied into the first
/// ring's chunk, which nothing kept from being freed by a `collect` on
/// another thread meanwhile.
#[test]
fn a_destroyed_ring_s_handles_stay_stale_after_its_slot_s_generations_run_out() {
    let device = FakeDevice::new(FakeLayout::discrete());
    let allocator = Allocator::new(device.clone(), Config::default()).unwrap();
    let desc = UploadRingDesc {
        size: 4096,
        ..UploadRingDesc::default()
    };
    let first = allocator.create_upload_ring(&desc).unwrap();
    let first_allocation = allocator.ring_allocate(first, 64, 16).unwrap();
    allocator.destroy_upload_ring(first).unwrap();
    // As if 2^32 - 3 rings more had been made and destroyed in the slot.
    lock(&allocator.rings)
        .rings
        .set_generation(first.key.index, u32::MAX - 2);
    let mut destroyed = vec![first];
    for round in 0..4 {
        let ring = allocator.create_upload_ring(&desc).unwrap();
        assert_eq!(
            allocator.ring_write(&first_allocation, 0, &[1; 64]),
            Err(Error::StaleAllocation),
            "after {round} rings past the fast-forward: a ring allocation of the first ring \
             (destroyed) is written, checked against the new ring {ring:?}"
        );
        for (made, old) in destroyed.iter().enumerate() {
            let what = format!("after {round} rings past the fast-forward, ring {made} of those destroyed ({old:?}), the new ring {ring:?}");
            assert_eq!(
                allocator.ring_allocate(*old, 64, 16).err(),
                Some(Error::StaleAllocation),
                "{what}: the old handle allocates in the new ring"
            );
            assert_eq!(
                allocator.destroy_upload_ring(*old),
                Err(Error::StaleAllocation),
                "{what}: the old handle destroys the new ring"
            );
            assert_ne!(*old, ring, "{what}: the same handle");
        }
        allocator.ring_allocate(ring, 64, 16).unwrap();
        allocator.destroy_upload_ring(ring).unwrap();
        destroyed.push(ring);
    }
    // SAFETY: the fake device runs no GPU work.
    unsafe { allocator.collect_idle() };
    drop(allocator);
    assert!(device.live_allocations().is_empty());
}
