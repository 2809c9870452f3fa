//! `AllocationDesc::strategy` on a real driver: in a custom pool of one
//! block holding free ranges of 1000 and 1100 KiB, buffers of 970 and then
//! 1090 KiB both fit with `Strategy::MinMemory` (the first takes the
//! tighter range) and with `Strategy::MinOffset` (the first takes the
//! lower range, here the same), and the second is refused with the default
//! `Strategy::MinTime` (the first took the larger range); and with free
//! ranges of 1100 KiB at 0 and 520 KiB above, `Strategy::MinOffset` alone
//! puts 500 KiB at 0, and `Strategy::MaxOffset` at the end of the 520 KiB
//! range. The buffers are bound where the allocator placed them, under the
//! validation layer.

use vk_suballoc::device::AshMemoryDevice;
use vk_suballoc::{AllocationDesc, Allocator, Error, Pool, PoolDesc, Strategy, Usage};

use super::super::allocator_setup::{allocator_for, buffer_info};
use crate::support::{test_each_profile, Profile, VulkanContext};

const KIB: u64 = 1 << 10;

/// In a custom pool of one block of `memory_type`, free ranges of
/// `gaps[0]` KiB at 0 and `gaps[1]` KiB after 64 KiB held (and 64 KiB held
/// after that), placed with the default strategy; then buffers of
/// `requests` KiB, in order, placed with `strategy`: where each landed, or
/// its error. The buffers are destroyed after; the pool is returned, for
/// the caller to destroy once no other pool is to be made: a pool made
/// right after another is destroyed takes the memory just freed, which
/// NVIDIA's advice reports.
fn place_into_two_gaps(
    allocator: &Allocator<AshMemoryDevice>,
    profile: Profile,
    memory_type: u32,
    gaps: [u64; 2],
    strategy: Strategy,
    requests: &[u64],
) -> (Vec<Result<u64, Error>>, Pool) {
    let pool = allocator
        .create_pool(&PoolDesc {
            block_size: (gaps[0] + gaps[1] + 128) * KIB,
            max_blocks: Some(1),
            ..PoolDesc::new(memory_type)
        })
        .unwrap();
    // The layout with the default strategy, the requests with `strategy`.
    let setup = AllocationDesc::new(Usage::DEVICE_LOCAL).pool(pool);
    let desc = setup.strategy(strategy);
    // SAFETY: valid create infos; the buffers are never used by the GPU.
    let create = |kib: u64, desc: &AllocationDesc<'_>| unsafe {
        allocator.create_buffer(&buffer_info(kib * KIB), desc)
    };
    let mut held = Vec::new();
    for kib in [gaps[0], 64, gaps[1], 64] {
        held.push(create(kib, &setup).unwrap());
    }
    let offsets: Vec<u64> = held.iter().map(|(_, a)| a.offset()).collect();
    let second = gaps[0] + 64;
    let expected = [0, gaps[0], second, second + gaps[1]].map(|kib| kib * KIB);
    assert_eq!(offsets, expected, "{profile}");
    // SAFETY: never used by the GPU.
    unsafe {
        let (buffer, allocation) = held.remove(2);
        allocator.destroy_buffer(buffer, allocation).unwrap();
        let (buffer, allocation) = held.remove(0);
        allocator.destroy_buffer(buffer, allocation).unwrap();
    }
    let mut placed = Vec::new();
    for &kib in requests {
        let result = create(kib, &desc);
        placed.push(result.as_ref().map(|(_, a)| a.offset()).map_err(|e| *e));
        held.extend(result);
    }
    // SAFETY: never used by the GPU.
    unsafe {
        for (buffer, allocation) in held {
            allocator.destroy_buffer(buffer, allocation).unwrap();
        }
    }
    (placed, pool)
}

/// The memory type the tests' device-local buffers take.
fn device_local_type(allocator: &Allocator<AshMemoryDevice>) -> u32 {
    let base = AllocationDesc::new(Usage::DEVICE_LOCAL);
    // SAFETY: a valid create info.
    unsafe { allocator.memory_type_for_buffer(&buffer_info(KIB), base) }.unwrap()
}

test_each_profile!(
    /// See the module's docs.
    fn min_memory_keeps_room_in_a_fixed_pool(profile) {
        let context = VulkanContext::new(profile);
        let allocator = allocator_for(&context);
        let memory_type = device_local_type(&allocator);
        let mut pools = Vec::new();
        let full = Err(Error::PoolFull { max_blocks: 1 });
        for (strategy, expected) in [
            (Strategy::MinTime, [Ok(1064 * KIB), full]),
            (Strategy::MinMemory, [Ok(0), Ok(1064 * KIB)]),
            (Strategy::MinOffset, [Ok(0), Ok(1064 * KIB)]),
        ] {
            let (placed, pool) =
                place_into_two_gaps(&allocator, profile, memory_type, [1000, 1100], strategy, &[970, 1090]);
            assert_eq!(placed, expected, "{profile} {strategy:?}");
            pools.push(pool);
        }
        for pool in pools {
            allocator.destroy_pool(pool).unwrap();
        }
        context.assert_no_validation_messages();
    }
);

test_each_profile!(
    /// `Strategy::MinOffset` where it differs from the others: in a pool
    /// block with free ranges of 1100 KiB at 0 and 520 KiB at 1164 KiB, a
    /// 500 KiB buffer goes to the lower, larger range, where `MinTime` and
    /// `MinMemory` take the tighter one, and `MaxOffset` the end of the
    /// higher one; bound there under the validation layer.
    fn min_offset_takes_the_lowest_free_range(profile) {
        let context = VulkanContext::new(profile);
        let allocator = allocator_for(&context);
        let memory_type = device_local_type(&allocator);
        let mut pools = Vec::new();
        for (strategy, expected) in [
            (Strategy::MinTime, 1164 * KIB),
            (Strategy::MinMemory, 1164 * KIB),
            (Strategy::MinOffset, 0),
            // Ending where the 520 KiB range ends.
            (Strategy::MaxOffset, 1184 * KIB),
        ] {
            let (placed, pool) =
                place_into_two_gaps(&allocator, profile, memory_type, [1100, 520], strategy, &[500]);
            assert_eq!(placed, [Ok(expected)], "{profile} {strategy:?}");
            pools.push(pool);
        }
        for pool in pools {
            allocator.destroy_pool(pool).unwrap();
        }
        context.assert_no_validation_messages();
    }
);
