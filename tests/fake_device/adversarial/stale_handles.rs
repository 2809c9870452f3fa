//! A handle that outlived its free (copied out with `ptr::read`, as only
//! unsafe code can: `Allocation` is not `Clone`) after its range went to a
//! new allocation, on every entry point that takes an allocation: each
//! refuses it with `StaleAllocation` (or the documented `Ok` where nothing
//! is looked up), and the new allocation's bytes, name and the
//! allocator's figures stay as they were.

use vk_suballoc::device::fake::FakeLayout;
use vk_suballoc::{Allocation, AllocationDesc, Error, PoolDesc, Request, ResourceKind, Usage};

use super::super::{allocator, buffer, finish, free, requirements};

/// Forged stale handles in coherent (upload) and non-coherent (readback)
/// memory and a custom pool, in a block range, a small-buffer slot and
/// dedicated memory, each place taken again by a new allocation of the
/// same request.
#[test]
fn a_stale_handle_whose_range_was_reused_touches_nothing() {
    let (mut allocator, device) = allocator(FakeLayout::mobile());
    let stale = Some(Error::StaleAllocation);
    let upload_type = allocator.memory_type_for(!0, Usage::UPLOAD).unwrap();
    let pool = allocator.create_pool(&PoolDesc::new(upload_type)).unwrap();
    for (usage, in_pool) in [
        (Usage::UPLOAD, None),
        (Usage::READBACK, None),
        (Usage::UPLOAD, Some(pool)),
    ] {
        for size in [64, 4096, 64 << 20] {
            let mut desc = AllocationDesc::new(usage);
            if let Some(pool) = in_pool {
                desc = desc.pool(pool);
            }
            let request = Request::with_desc(requirements(size, 1), ResourceKind::Buffer, desc);
            let first = allocator.allocate(&request).unwrap();
            // SAFETY: `Allocation` owns nothing on the heap and has no
            // `Drop`; the copy only names the freed range, refused below,
            // and is never freed.
            let mut copy: Allocation = unsafe { std::ptr::read(&first) };
            free(&allocator, first);
            let mut next = allocator.allocate(&request.name("next")).unwrap();
            let context = format!("{usage:?} {size} {in_pool:?}");
            // The new allocation took the freed range (or memory object's
            // handle, which the fake device hands out again).
            assert_eq!(
                (next.memory(), next.offset()),
                (copy.memory(), copy.offset()),
                "{context}"
            );
            let pattern: Vec<u8> = (0..size).map(|i| (i % 251) as u8).collect();
            allocator
                .copy_to_allocation(&mut next, 0, &pattern)
                .unwrap();
            let before = allocator.stats();
            let non_coherent = usage == Usage::READBACK;

            assert_eq!(
                allocator
                    .copy_to_allocation(&mut copy, 0, &[0xAA; 16])
                    .err(),
                stale,
                "{context}"
            );
            let mut out = [0x55; 16];
            assert_eq!(
                allocator.copy_from_allocation(&mut copy, 0, &mut out).err(),
                stale,
                "{context}"
            );
            assert_eq!(out, [0x55; 16], "{context}: out changed");
            // Flushes look the allocation up only where they have work.
            let flushed = if non_coherent { stale } else { None };
            assert_eq!(allocator.flush(&copy, ..).err(), flushed, "{context}");
            assert_eq!(
                allocator.invalidate(&mut copy, ..).err(),
                flushed,
                "{context}"
            );
            assert_eq!(
                allocator.flush_allocations([(&copy, 0..16)]).err(),
                flushed,
                "{context}"
            );
            assert_eq!(
                allocator.set_name(&copy, Some("stale")).err(),
                stale,
                "{context}"
            );
            assert_eq!(allocator.name(&copy).err(), stale, "{context}");
            assert_eq!(allocator.memory_size(&copy).err(), stale, "{context}");
            assert_eq!(
                allocator
                    .check_alias(&copy, 0, &requirements(16, 1), ResourceKind::Buffer)
                    .err(),
                stale,
                "{context}"
            );
            // The consuming calls, each given a copy of the stale handle.
            // SAFETY: as above: the copies name the freed range only.
            let again = || unsafe { std::ptr::read(&copy) };
            // SAFETY: the fake device runs no GPU work.
            assert_eq!(unsafe { allocator.free(again()) }.err(), stale, "{context}");
            assert_eq!(
                // SAFETY: as above.
                unsafe { allocator.free_mut(again()) }.err(),
                stale,
                "{context}"
            );

            assert_eq!(allocator.stats(), before, "{context}");
            assert_eq!(allocator.name(&next).unwrap().as_deref(), Some("next"));
            let mut read = vec![0; size as usize];
            allocator
                .copy_from_allocation(&mut next, 0, &mut read)
                .unwrap();
            assert!(
                read == pattern,
                "{context}: the new allocation's bytes changed"
            );
            // Queued behind a frame: the collect finds it stale and frees
            // nothing else.
            allocator.free_after_frame(again()).unwrap();
            // SAFETY: the fake device runs no GPU work.
            unsafe { allocator.collect_idle() };
            assert_eq!(allocator.stats(), before, "{context}: after the collect");
            assert_eq!(
                allocator.memory_size(&next).map(|_| ()),
                Ok(()),
                "{context}"
            );
            let _ = copy;
            free(&allocator, next);
        }
    }
    allocator.destroy_pool(pool).unwrap();
    let a = allocator.allocate(&buffer(4096, 1, Usage::UPLOAD)).unwrap();
    free(&allocator, a);
    finish(allocator, &device);
}
