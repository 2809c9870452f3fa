//! Handles of freed allocations (only a forged handle can be one; the
//! crate's own second handle, `host_view`, stands in for it here) at the
//! host-access methods.

use ash::vk;

use crate::device::fake::{FakeDevice, FakeLayout};
use crate::{Allocator, Config, Error, Request, ResourceKind, Usage};

/// A handle whose allocation was freed (only a forged one can be: the
/// crate's own second handle, `host_view`, stands in for it here) is
/// refused with `StaleAllocation` by the methods whose docs list it
/// and that look the allocation up: `flush`, `invalidate` and their
/// batched twins where there is something to flush (non-coherent
/// memory, a range not empty), `memory_size`, `set_name`, `name`,
/// `check_alias`, `free` and `free_mut`; and `owns` says no. Where nothing is flushed
/// (coherent memory, an empty range) `flush` looks nothing up and is
/// `Ok`, as its docs say. A neighbour keeps the block, so the stale
/// handle's pointer still names mapped memory.
#[test]
fn a_handle_of_a_freed_allocation_is_stale_where_it_is_looked_up() {
    // Mobile: READBACK lands in type 2, cached and non-coherent;
    // UPLOAD in type 1, coherent.
    let device = FakeDevice::new(FakeLayout::mobile());
    let mut allocator = Allocator::new(device.clone(), Config::default()).unwrap();
    let request = |usage| buffer(64 << 10, usage);
    for usage in [Usage::READBACK, Usage::UPLOAD] {
        let neighbour = allocator.allocate(&request(usage)).unwrap();
        let freed = allocator.allocate(&request(usage)).unwrap();
        assert_eq!(neighbour.memory(), freed.memory());
        let non_coherent = allocator.context.is_non_coherent(freed.memory_type());
        assert_eq!(non_coherent, usage == Usage::READBACK);
        let mut stale = freed.host_view();
        // SAFETY: the fake device runs no GPU work.
        unsafe { allocator.free(freed) }.unwrap();
        let flushed = (!non_coherent).then_some(()).ok_or(Error::StaleAllocation);
        assert_eq!(allocator.flush(&stale, 0..16), flushed);
        assert_eq!(allocator.invalidate(&mut stale, 0..16), flushed);
        assert_eq!(allocator.flush_allocations([(&stale, 0..16)]), flushed);
        assert_eq!(
            allocator.invalidate_allocations([(&mut stale, 0..16)]),
            flushed
        );
        assert_eq!(allocator.flush(&stale, 0..0), Ok(()));
        assert_eq!(allocator.memory_size(&stale), Err(Error::StaleAllocation));
        let renamed = allocator.set_name(&stale, Some("stale"));
        assert_eq!(renamed, Err(Error::StaleAllocation));
        assert_eq!(allocator.name(&stale), Err(Error::StaleAllocation));
        let alias = vk::MemoryRequirements {
            size: 64,
            alignment: 256,
            memory_type_bits: !0,
        };
        let aliased = allocator.check_alias(&stale, 0, &alias, ResourceKind::Buffer);
        assert_eq!(aliased, Err(Error::StaleAllocation));
        assert!(!allocator.owns(&stale));
        // SAFETY: refused before anything is freed.
        let again = unsafe { allocator.free(stale.host_view()) };
        assert_eq!(again, Err(Error::StaleAllocation));
        // SAFETY: as above.
        let again = unsafe { allocator.free_mut(stale) };
        assert_eq!(again, Err(Error::StaleAllocation));
        assert_eq!(allocator.stats().allocations(), 1);
        // SAFETY: as above.
        unsafe { allocator.free(neighbour) }.unwrap();
    }
    drop(allocator);
    device.assert_clean();
}

/// A stale handle whose range went to a new allocation: the copies look
/// the allocation up before they touch its bytes, on coherent memory as
/// on non-coherent, so `copy_to_allocation` writes nothing over the new
/// owner's bytes (it wrote them, then its flush found the handle stale)
/// and `copy_from_allocation` reads nothing of them into `out` (on
/// coherent memory it copied them and returned `Ok`). Empty copies touch
/// no byte and look nothing up, as an empty flush.
#[test]
fn copies_through_a_stale_handle_touch_no_bytes_of_the_new_owner() {
    // Mobile: READBACK lands in type 2, cached and non-coherent;
    // UPLOAD in type 1, coherent.
    let device = FakeDevice::new(FakeLayout::mobile());
    let allocator = Allocator::new(device.clone(), Config::default()).unwrap();
    let request = |usage| buffer(4096, usage);
    for usage in [Usage::READBACK, Usage::UPLOAD] {
        let neighbour = allocator.allocate(&request(usage)).unwrap();
        let freed = allocator.allocate(&request(usage)).unwrap();
        let mut stale = freed.host_view();
        // SAFETY: the fake device runs no GPU work.
        unsafe { allocator.free(freed) }.unwrap();
        let mut owner = allocator.allocate(&request(usage)).unwrap();
        assert_eq!(
            (owner.memory(), owner.offset()),
            (stale.memory(), stale.offset()),
            "{usage:?}: the new allocation takes the freed range"
        );
        allocator
            .copy_to_allocation(&mut owner, 0, &[0x11; 4096])
            .unwrap();
        assert_eq!(
            allocator.copy_to_allocation(&mut stale, 0, &[0xAA; 64]),
            Err(Error::StaleAllocation),
            "{usage:?}"
        );
        let bytes = allocator.mapped_slice(&owner).unwrap();
        assert!(
            bytes.iter().all(|&b| b == 0x11),
            "{usage:?}: {:?}",
            &bytes[..64]
        );
        let mut out = [0u8; 64];
        assert_eq!(
            allocator.copy_from_allocation(&mut stale, 0, &mut out),
            Err(Error::StaleAllocation),
            "{usage:?}"
        );
        assert_eq!(out, [0; 64], "{usage:?}: out is left as it was");
        assert_eq!(allocator.copy_to_allocation(&mut stale, 0, &[]), Ok(()));
        assert_eq!(
            allocator.copy_from_allocation(&mut stale, 0, &mut []),
            Ok(())
        );
        // SAFETY: as above.
        unsafe { allocator.free(owner) }.unwrap();
        // SAFETY: as above.
        unsafe { allocator.free(neighbour) }.unwrap();
    }
    drop(allocator);
    device.assert_clean();
}

/// A buffer of `size` bytes aligned to 256, in any memory type.
fn buffer(size: u64, usage: Usage) -> Request<'static> {
    let requirements = vk::MemoryRequirements {
        size,
        alignment: 256,
        memory_type_bits: !0,
    };
    Request::new(requirements, usage, ResourceKind::Buffer)
}
