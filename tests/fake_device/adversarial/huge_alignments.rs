//! Alignments of 2^63, the largest power of two a `u64` holds, from each
//! place an alignment comes from besides a request's requirements (which
//! `entry_points.rs` tries): an allocation description's and a custom
//! pool's `min_alignment`, and an upload ring's, with debug margins on and
//! off. Offset 0 of a memory object is the only multiple of 2^63 there is:
//! each allocation made lies there, the ones that cannot get a typed
//! error, and no aligned offset wraps past `u64::MAX`.

use vk_suballoc::device::fake::FakeLayout;
use vk_suballoc::{AllocationDesc, Config, Error, PoolDesc, Request, UploadRingDesc, Usage};

use super::super::{allocator_with, finish, free, requirements};

const HUGE: u64 = 1 << 63;
const MIB: u64 = 1 << 20;

/// Configurations without and with debug margins (and their checks).
fn configs() -> [Config; 3] {
    [
        Config::default(),
        Config {
            debug_margin: 256,
            detect_corruption: true,
            ..Config::default()
        },
        Config {
            debug_margin: 16,
            debug_fill: true,
            ..Config::default()
        },
    ]
}

/// A description's `min_alignment` of 2^63, on default blocks: each
/// allocation lies at offset 0 of its memory object, a block's or
/// dedicated memory; the allocator's figures come back after the frees.
#[test]
fn a_description_s_alignment_of_2_pow_63_takes_offset_0() {
    for config in configs() {
        let (allocator, device) = allocator_with(FakeLayout::discrete(), config);
        let before = allocator.stats();
        let mut live = Vec::new();
        for usage in [Usage::DEVICE_LOCAL, Usage::UPLOAD, Usage::READBACK] {
            for size in [1, 256, MIB] {
                let desc = AllocationDesc::new(usage).min_alignment(HUGE);
                let request = Request::with_desc(
                    requirements(size, 1),
                    vk_suballoc::ResourceKind::Buffer,
                    desc,
                );
                let a = allocator
                    .allocate(&request)
                    .unwrap_or_else(|e| panic!("{config:?} {usage:?} {size}: {e:?}"));
                assert_eq!(a.offset(), 0, "{config:?} {usage:?} {size}");
                assert_eq!(a.size(), size);
                live.push(a);
            }
        }
        // Margins and fills at offset 0: none damaged (an error only
        // where no type checks them).
        if let Ok(report) = allocator.check_corruption(!0) {
            assert!(report.is_clean(), "{config:?}");
        }
        assert_eq!(allocator.corruptions_detected(), 0);
        for a in live {
            free(&allocator, a);
        }
        allocator.trim();
        assert_eq!(allocator.stats().allocations(), before.allocations());
        finish(allocator, &device);
    }
}

/// A custom pool whose `min_alignment` is 2^63: each block holds one
/// allocation, at offset 0, and a request past its `max_blocks` gets a
/// typed error, the pool unchanged; it takes allocations again once one
/// is freed.
#[test]
fn a_pool_s_alignment_of_2_pow_63_takes_one_allocation_per_block() {
    for config in configs() {
        let (allocator, device) = allocator_with(FakeLayout::discrete(), config);
        let memory_type = allocator.memory_type_for(!0, Usage::DEVICE_LOCAL).unwrap();
        let pool = allocator
            .create_pool(
                &PoolDesc::new(memory_type)
                    .block_size(16 * MIB)
                    .max_blocks(2)
                    .min_alignment(HUGE),
            )
            .unwrap();
        let in_pool = |size| {
            Request::with_desc(
                requirements(size, 1),
                vk_suballoc::ResourceKind::Buffer,
                AllocationDesc::new(Usage::DEVICE_LOCAL).pool(pool),
            )
        };
        let first = allocator.allocate(&in_pool(MIB)).unwrap();
        let second = allocator.allocate(&in_pool(256)).unwrap();
        for a in [&first, &second] {
            assert_eq!(a.offset(), 0, "{config:?}");
        }
        assert_ne!(first.memory(), second.memory());
        let stats = allocator.pool_stats(&pool).unwrap();
        let refused = allocator.allocate(&in_pool(64)).map(|a| a.offset());
        assert!(
            matches!(refused, Err(Error::PoolFull { .. })),
            "{config:?}: {refused:?}"
        );
        assert_eq!(allocator.pool_stats(&pool).unwrap(), stats);
        free(&allocator, first);
        let third = allocator.allocate(&in_pool(64)).unwrap();
        assert_eq!(third.offset(), 0);
        free(&allocator, second);
        free(&allocator, third);
        allocator.destroy_pool(pool).unwrap();
        finish(allocator, &device);
    }
}

/// An upload ring whose `min_alignment` is 2^63: its chunk lies at offset
/// 0 of its memory object, and its allocations are as any ring's.
#[test]
fn a_ring_s_alignment_of_2_pow_63_starts_its_chunk_at_offset_0() {
    for config in configs() {
        let (allocator, device) = allocator_with(FakeLayout::discrete(), config);
        for grow in [false, true] {
            let desc = UploadRingDesc {
                size: 4096,
                grow,
                min_alignment: HUGE,
                ..UploadRingDesc::default()
            };
            let ring = allocator
                .create_upload_ring(&desc)
                .unwrap_or_else(|e| panic!("{config:?} {grow}: {e:?}"));
            let a = allocator.ring_allocate(ring, 4096, 1).unwrap();
            assert_eq!(a.buffer_offset(), 0);
            allocator.ring_write(&a, 0, &[7; 4096]).unwrap();
            let next = allocator
                .ring_allocate(ring, 16, 1)
                .map(|a| a.buffer_offset());
            if grow {
                assert_eq!(next, Ok(0), "{config:?}");
            } else {
                assert_eq!(
                    next,
                    Err(Error::UploadRingFull { size: 16, free: 0 }),
                    "{config:?}"
                );
            }
            allocator.destroy_upload_ring(ring).unwrap();
        }
        finish(allocator, &device);
    }
}
