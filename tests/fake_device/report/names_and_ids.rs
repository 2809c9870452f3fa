//! Names and ids in the reports and for debuggers: each block has its own
//! id in the map and each memory object its own debug name, a freed range
//! forgets its name, and `set_name` renames a live allocation wherever it
//! lives, as the dumps show it, and a dedicated allocation's
//! `VkDeviceMemory` too (a block keeps its own name); `name` reads it back.

use std::collections::BTreeSet;

use vk_suballoc::device::fake::FakeLayout;
use vk_suballoc::{Allocation, DedicatedPolicy, PoolDesc, Usage};

use super::super::{allocator, allocator_with, buffer, finish, free, without_runs};

use super::{KIB, MIB};

/// Every block of a memory type has its own id in the memory map (the key of
/// the block in the VMA dump), and every memory object its own debug name.
#[test]
fn blocks_and_dedicated_memory_have_distinct_ids_and_names() {
    let (allocator, device) = allocator(FakeLayout::discrete());
    // Three 20 MiB buffers fill the first block (64 MiB); the fourth opens a
    // second; two large buffers get dedicated memory.
    let mut live: Vec<Allocation> = (0..4)
        .map(|_| {
            allocator
                .allocate(&buffer(20 * MIB, 256, Usage::DEVICE_LOCAL))
                .unwrap()
        })
        .collect();
    for _ in 0..2 {
        let large = allocator
            .allocate(&buffer(129 * MIB, 256, Usage::DEVICE_LOCAL))
            .unwrap();
        assert!(large.is_dedicated());
        live.push(large);
    }
    let map = allocator.memory_map();
    let ids: Vec<u32> = map.memory_types[1].blocks.iter().map(|b| b.id).collect();
    assert_eq!(ids, [0, 1]);
    let names: BTreeSet<String> = device
        .live_allocations()
        .into_iter()
        .map(|m| m.name.unwrap())
        .collect();
    assert_eq!(names.len(), 4, "{names:?}");
    assert!(names.contains("vk-suballoc block 1/0"), "{names:?}");
    assert!(names.contains("vk-suballoc block 1/1"), "{names:?}");
    for allocation in live {
        free(&allocator, allocation);
    }
    finish(allocator, &device);
}

/// A freed named range takes its name with it: an unnamed allocation that
/// reuses the range is shown unnamed.
#[test]
fn a_freed_range_forgets_its_name() {
    let (allocator, device) = allocator_with(FakeLayout::integrated(), without_runs());
    let named = allocator
        .allocate(&buffer(4 * KIB, 256, Usage::DEVICE_LOCAL).name("named"))
        .unwrap();
    let other = allocator
        .allocate(&buffer(4 * KIB, 256, Usage::DEVICE_LOCAL).name("other"))
        .unwrap();
    let offset = named.offset();
    free(&allocator, named);
    let unnamed = allocator
        .allocate(&buffer(4 * KIB, 256, Usage::DEVICE_LOCAL))
        .unwrap();
    assert_eq!(unnamed.offset(), offset);
    let map = allocator.memory_map();
    let block = &map.memory_types[unnamed.memory_type() as usize].blocks[0];
    let names: Vec<(u64, Option<&str>)> = block
        .allocations()
        .map(|r| (r.offset, r.name.as_deref()))
        .collect();
    assert_eq!(names, [(offset, None), (other.offset(), Some("other"))]);
    free(&allocator, unnamed);
    free(&allocator, other);
    finish(allocator, &device);
}

/// `set_name` renames a live allocation wherever it lives (a block range,
/// a run slot, dedicated memory, a custom pool), as dumps show it, and
/// `None` drops the name; another allocator's handle is refused.
#[test]
fn set_name_renames_allocations_everywhere() {
    let (allocator, device) = allocator(FakeLayout::discrete());
    let pool = allocator.create_pool(&PoolDesc::new(1)).unwrap();
    let mut in_pool = buffer(4096, 256, Usage::DEVICE_LOCAL).name("pool-old");
    in_pool.desc = in_pool.desc.pool(pool);
    let allocations = [
        allocator
            .allocate(&buffer(1 << 20, 256, Usage::DEVICE_LOCAL).name("range-old"))
            .unwrap(),
        // In the range's block, so in a run slot: runs are carved from
        // existing blocks only (a first upload buffer took a range).
        allocator
            .allocate(&buffer(256, 4, Usage::DEVICE_LOCAL).name("slot-old"))
            .unwrap(),
        allocator
            .allocate(
                &buffer(4096, 256, Usage::DEVICE_LOCAL)
                    .dedicated(DedicatedPolicy::Always)
                    .name("dedicated-old"),
            )
            .unwrap(),
        allocator.allocate(&in_pool).unwrap(),
    ];
    let json = allocator.stats_json(true);
    for old in ["range-old", "slot-old", "dedicated-old", "pool-old"] {
        assert!(json.contains(old), "{old} missing before the rename");
    }
    for (i, allocation) in allocations.iter().enumerate() {
        allocator
            .set_name(allocation, Some(&format!("renamed-{i}")))
            .unwrap();
    }
    let json = allocator.stats_json(true);
    for i in 0..4 {
        assert!(
            json.contains(&format!("\"renamed-{i}\"")),
            "renamed-{i} missing"
        );
    }
    assert!(!json.contains("-old"), "{json}");
    allocator.set_name(&allocations[1], None).unwrap();
    assert!(!allocator.stats_json(true).contains("renamed-1"));

    let (other, other_device) = super::super::allocator(FakeLayout::discrete());
    assert_eq!(
        other.set_name(&allocations[0], Some("theirs")),
        Err(vk_suballoc::Error::ForeignAllocation)
    );
    finish(other, &other_device);
    for allocation in allocations {
        free(&allocator, allocation);
    }
    allocator.destroy_pool(pool).unwrap();
    finish(allocator, &device);
}

/// `name` reads an allocation's name back wherever it lives (a block range,
/// a run slot, dedicated memory, a custom pool), as VMA's
/// `VmaAllocationInfo::pName` does: the request's, then what `set_name`
/// gave, `None` for an unnamed one or after `set_name(.., None)`; another
/// allocator's handle is refused.
#[test]
fn name_reads_back_the_requests_and_set_names_name() {
    let (allocator, device) = allocator(FakeLayout::discrete());
    let pool = allocator.create_pool(&PoolDesc::new(1)).unwrap();
    let mut in_pool = buffer(4096, 256, Usage::DEVICE_LOCAL).name("pool");
    in_pool.desc = in_pool.desc.pool(pool);
    let allocations = [
        allocator
            .allocate(&buffer(1 << 20, 256, Usage::DEVICE_LOCAL).name("range"))
            .unwrap(),
        // A run slot: runs are carved from the range's block.
        allocator
            .allocate(&buffer(256, 4, Usage::DEVICE_LOCAL).name("slot"))
            .unwrap(),
        allocator
            .allocate(
                &buffer(4096, 256, Usage::DEVICE_LOCAL)
                    .dedicated(DedicatedPolicy::Always)
                    .name("dedicated"),
            )
            .unwrap(),
        allocator.allocate(&in_pool).unwrap(),
    ];
    let unnamed = allocator
        .allocate(&buffer(4096, 256, Usage::DEVICE_LOCAL))
        .unwrap();
    assert_eq!(allocator.name(&unnamed), Ok(None));
    let names = ["range", "slot", "dedicated", "pool"];
    for (allocation, name) in allocations.iter().zip(names) {
        assert_eq!(allocator.name(allocation), Ok(Some(name.to_owned())));
        allocator
            .set_name(allocation, Some(&format!("{name}-renamed")))
            .unwrap();
        assert_eq!(
            allocator.name(allocation),
            Ok(Some(format!("{name}-renamed")))
        );
        allocator.set_name(allocation, None).unwrap();
        assert_eq!(allocator.name(allocation), Ok(None), "{name}");
    }

    let (other, other_device) = super::super::allocator(FakeLayout::discrete());
    assert_eq!(
        other.name(&allocations[0]),
        Err(vk_suballoc::Error::ForeignAllocation)
    );
    finish(other, &other_device);
    for allocation in allocations.into_iter().chain([unnamed]) {
        free(&allocator, allocation);
    }
    allocator.destroy_pool(pool).unwrap();
    finish(allocator, &device);
}

/// `set_name` on dedicated memory, from the default pools or a custom
/// pool, renames the `VkDeviceMemory` too (`vkSetDebugUtilsObjectNameEXT`):
/// to the new name, or for `None` to the `vk-suballoc dedicated <type>/<n>`
/// an unnamed allocation is made with. A block keeps its own debug name.
#[test]
fn set_name_renames_dedicated_memory_for_debuggers() {
    let (allocator, device) = allocator(FakeLayout::discrete());
    let debug_name = |allocation: &Allocation| -> String {
        device
            .live_allocations()
            .into_iter()
            .find(|m| m.memory == allocation.memory())
            .and_then(|m| m.name)
            .unwrap_or_else(|| panic!("{:?} is not live or unnamed", allocation.memory()))
    };
    let dedicated = |name: Option<&'static str>| {
        let request = buffer(4096, 256, Usage::DEVICE_LOCAL).dedicated(DedicatedPolicy::Always);
        match name {
            Some(name) => request.name(name),
            None => request,
        }
    };
    let pool = allocator
        .create_pool(&PoolDesc::new(1).name("textures"))
        .unwrap();
    let mut in_pool = dedicated(None);
    in_pool.desc = in_pool.desc.pool(pool);
    let named = allocator.allocate(&dedicated(Some("old"))).unwrap();
    let unnamed = allocator.allocate(&dedicated(None)).unwrap();
    let pooled = allocator.allocate(&in_pool).unwrap();
    let in_block = allocator
        .allocate(&buffer(4096, 256, Usage::DEVICE_LOCAL).name("range"))
        .unwrap();
    assert!(named.is_dedicated() && unnamed.is_dedicated() && pooled.is_dedicated());
    assert!(!in_block.is_dedicated());
    assert_eq!(debug_name(&named), "old");
    let unnamed_at_birth = debug_name(&unnamed);
    let pooled_at_birth = debug_name(&pooled);
    let block_name = debug_name(&in_block);
    assert!(
        unnamed_at_birth.starts_with("vk-suballoc dedicated 1/"),
        "{unnamed_at_birth}"
    );
    // A custom pool's dedicated memory is named after the pool, as its
    // blocks are: serials count per pool.
    assert!(
        pooled_at_birth.starts_with("vk-suballoc pool \"textures\" dedicated 1/"),
        "{pooled_at_birth}"
    );
    let renames = device.counters().renames;

    allocator.set_name(&named, Some("new")).unwrap();
    allocator.set_name(&unnamed, Some("given")).unwrap();
    allocator.set_name(&pooled, Some("pooled")).unwrap();
    allocator
        .set_name(&in_block, Some("range renamed"))
        .unwrap();
    assert_eq!(debug_name(&named), "new");
    assert_eq!(debug_name(&unnamed), "given");
    assert_eq!(debug_name(&pooled), "pooled");
    assert_eq!(debug_name(&in_block), block_name, "a block is not renamed");
    assert_eq!(device.counters().renames, renames + 3);

    // Dropping the name gives back what an unnamed allocation gets.
    allocator.set_name(&unnamed, None).unwrap();
    allocator.set_name(&pooled, None).unwrap();
    allocator.set_name(&named, None).unwrap();
    assert_eq!(debug_name(&unnamed), unnamed_at_birth);
    assert_eq!(debug_name(&pooled), pooled_at_birth);
    let dropped = debug_name(&named);
    assert!(
        dropped.starts_with("vk-suballoc dedicated 1/") && dropped != unnamed_at_birth,
        "{dropped}"
    );
    // The reports still take the allocation's own name, none now.
    assert!(!allocator.stats_json(true).contains("vk-suballoc dedicated"));

    for allocation in [named, unnamed, pooled, in_block] {
        free(&allocator, allocation);
    }
    allocator.destroy_pool(pool).unwrap();
    finish(allocator, &device);
}
