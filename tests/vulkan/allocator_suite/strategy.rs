//! `AllocationDesc::strategy` on a real driver: in a custom pool of one
//! block holding free ranges of 1000 and 1100 KiB, buffers of 970 and then
//! 1090 KiB both fit with `Strategy::MinMemory` (the first takes the
//! tighter range) and with `Strategy::MinOffset` (the first takes the
//! lower range, here the same), and the second is refused with the default
//! `Strategy::MinTime` (the first took the larger range); and with free
//! ranges of 1100 KiB at 0 and 520 KiB above, `Strategy::MinOffset` alone
//! puts 500 KiB at 0. The buffers are bound where the allocator placed
//! them, under the validation layer.

use vk_suballoc::{AllocationDesc, Error, PoolDesc, Strategy, Usage};

use super::super::allocator_setup::{allocator_for, buffer_info};
use crate::support::{test_each_profile, VulkanContext};

const KIB: u64 = 1 << 10;

test_each_profile!(
    /// See the module's docs.
    fn min_memory_keeps_room_in_a_fixed_pool(profile) {
        let context = VulkanContext::new(profile);
        let allocator = allocator_for(&context);
        let base = AllocationDesc::new(Usage::DEVICE_LOCAL);
        // SAFETY: a valid create info.
        let memory_type = unsafe { allocator.memory_type_for_buffer(&buffer_info(KIB), base) }.unwrap();
        for (strategy, second) in [
            (Strategy::MinTime, Err(Error::PoolFull { max_blocks: 1 })),
            (Strategy::MinMemory, Ok(1064 * KIB)),
            (Strategy::MinOffset, Ok(1064 * KIB)),
        ] {
            // One block: 1000 + 64 + 1100 + 64 KiB.
            let pool = allocator
                .create_pool(&PoolDesc {
                    block_size: 2228 * KIB,
                    max_blocks: Some(1),
                    ..PoolDesc::new(memory_type)
                })
                .unwrap();
            let desc = base.pool(pool).strategy(strategy);
            // SAFETY: valid create infos; the buffers are never used by the GPU.
            let create = |kib: u64| unsafe { allocator.create_buffer(&buffer_info(kib * KIB), &desc) };
            let mut held = Vec::new();
            let mut offsets = Vec::new();
            for kib in [1000, 64, 1100, 64] {
                let (buffer, allocation) = create(kib).unwrap();
                offsets.push(allocation.offset());
                held.push((buffer, allocation));
            }
            assert_eq!(offsets, [0, 1000 * KIB, 1064 * KIB, 2164 * KIB], "{profile}");
            // SAFETY: never used by the GPU.
            unsafe {
                let (buffer, allocation) = held.remove(2);
                allocator.destroy_buffer(buffer, allocation).unwrap();
                let (buffer, allocation) = held.remove(0);
                allocator.destroy_buffer(buffer, allocation).unwrap();
            }
            let first = create(970).unwrap();
            let expected_first = if strategy == Strategy::MinTime { 1064 * KIB } else { 0 };
            assert_eq!(first.1.offset(), expected_first, "{profile} {strategy:?}");
            held.push(first);
            let result = create(1090);
            assert_eq!(
                result.as_ref().map(|(_, allocation)| allocation.offset()).map_err(|e| *e),
                second,
                "{profile} {strategy:?}"
            );
            held.extend(result);
            // SAFETY: never used by the GPU.
            unsafe {
                for (buffer, allocation) in held {
                    allocator.destroy_buffer(buffer, allocation).unwrap();
                }
            }
            allocator.destroy_pool(pool).unwrap();
        }
    }
);

test_each_profile!(
    /// `Strategy::MinOffset` where it differs from the others: in a pool
    /// block with free ranges of 1100 KiB at 0 and 520 KiB at 1164 KiB, a
    /// 500 KiB buffer goes to the lower, larger range, where `MinTime` and
    /// `MinMemory` take the tighter one; bound there under the validation
    /// layer.
    fn min_offset_takes_the_lowest_free_range(profile) {
        let context = VulkanContext::new(profile);
        let allocator = allocator_for(&context);
        let base = AllocationDesc::new(Usage::DEVICE_LOCAL);
        // SAFETY: a valid create info.
        let memory_type = unsafe { allocator.memory_type_for_buffer(&buffer_info(KIB), base) }.unwrap();
        for (strategy, expected) in [
            (Strategy::MinTime, 1164 * KIB),
            (Strategy::MinMemory, 1164 * KIB),
            (Strategy::MinOffset, 0),
        ] {
            // One block: 1100 + 64 + 520 + 64 KiB.
            let pool = allocator
                .create_pool(&PoolDesc {
                    block_size: 1748 * KIB,
                    max_blocks: Some(1),
                    ..PoolDesc::new(memory_type)
                })
                .unwrap();
            let desc = base.pool(pool).strategy(strategy);
            // SAFETY: valid create infos; the buffers are never used by the GPU.
            let create = |kib: u64| unsafe { allocator.create_buffer(&buffer_info(kib * KIB), &desc) };
            let mut held = Vec::new();
            for kib in [1100, 64, 520, 64] {
                held.push(create(kib).unwrap());
            }
            let offsets: Vec<u64> = held.iter().map(|(_, a)| a.offset()).collect();
            assert_eq!(offsets, [0, 1100 * KIB, 1164 * KIB, 1684 * KIB], "{profile}");
            // SAFETY: never used by the GPU.
            unsafe {
                let (buffer, allocation) = held.remove(2);
                allocator.destroy_buffer(buffer, allocation).unwrap();
                let (buffer, allocation) = held.remove(0);
                allocator.destroy_buffer(buffer, allocation).unwrap();
            }
            let placed = create(500).unwrap();
            assert_eq!(placed.1.offset(), expected, "{profile} {strategy:?}");
            held.push(placed);
            // SAFETY: never used by the GPU.
            unsafe {
                for (buffer, allocation) in held {
                    allocator.destroy_buffer(buffer, allocation).unwrap();
                }
            }
            allocator.destroy_pool(pool).unwrap();
        }
    }
);
