//! Seeded random plans over random buffers and optimal images, carried out:
//! every destination in its source's memory type, aligned and outside every
//! emptied block, no two live allocations overlapping, and `trim` giving
//! back exactly the bytes the plans said.

use ash::vk;
use gpu_alloc_types::MemoryPropertyFlags as Props;
use vk_suballoc::device::fake::FakeLayout;
use vk_suballoc::{
    Allocation, Config, DefragmentationLimits, Movable, Request, ResourceKind, Usage,
};

use super::super::seeded_rng::Rng;
use super::super::{allocator_with, finish, free, requirements};
use super::super::{FakeAllocator, FakeDevice};

use super::{assert_disjoint, MIB};

/// Random allocations of buffers and optimal images (granularity 1024 on
/// the discrete profile), random frees, then plans over a random subset
/// carried out: every destination is in the source's memory type, aligned,
/// outside every emptied block; no two live allocations overlap; and once
/// the sources are freed, `trim` gives back exactly the bytes the plan said.
#[test]
fn random_plans_keep_allocations_apart_and_release_what_they_say() {
    let mut rng = Rng::from_env("random_plans_keep_allocations_apart_and_release_what_they_say");
    for layout in [
        FakeLayout::discrete(),
        FakeLayout::mobile(),
        FakeLayout::integrated(),
    ] {
        let config = Config {
            large_heap_block_size: 16 * MIB,
            ..Config::default()
        };
        let (allocator, device) = allocator_with(layout, config);
        let (moves, blocks, packing) = random_plans(&allocator, &device, &mut rng);
        println!(
            "{}: {moves} moves ({packing} within a block) emptied {blocks} blocks",
            device.layout().name
        );
        finish(allocator, &device);
    }
}

struct Live {
    allocation: Allocation,
    requirements: vk::MemoryRequirements,
    kind: ResourceKind,
}

/// Returns the moves, emptied blocks and compaction's moves of all its
/// plans.
fn random_plans(
    allocator: &FakeAllocator,
    device: &FakeDevice,
    rng: &mut Rng,
) -> (usize, usize, usize) {
    let name = device.layout().name;
    let mut live: Vec<Live> = Vec::new();
    let (mut total_moves, mut total_blocks, mut total_packing) = (0, 0, 0);
    for round in 0..20 {
        let context = format!("{name} round {round}");
        for _ in 0..rng.below(300) {
            let kind = match rng.below(4) {
                0 => ResourceKind::OptimalImage,
                1 => ResourceKind::LinearImage,
                _ => ResourceKind::Buffer,
            };
            let size = match rng.below(3) {
                0 => 16 + rng.below(4096),
                1 => 4096 + rng.below(256 << 10),
                _ => (64 << 10) + rng.below(2 * MIB),
            };
            let requirements = requirements(size, 1 << rng.below(13));
            let usage =
                [Usage::DEVICE_LOCAL, Usage::UPLOAD, Usage::READBACK][rng.below(3) as usize];
            let allocation = allocator
                .allocate(&Request::new(requirements, usage, kind))
                .unwrap();
            live.push(Live {
                allocation,
                requirements,
                kind,
            });
        }
        for _ in 0..rng.below(live.len() as u64 + 1) {
            let gone = live.swap_remove(rng.below(live.len() as u64) as usize);
            free(allocator, gone.allocation);
        }
        allocator.trim();
        let reserved = allocator.stats().reserved_bytes();
        let movable: Vec<usize> = (0..live.len()).filter(|_| rng.below(8) != 0).collect();
        let listed: Vec<Movable<'_>> = movable
            .iter()
            .map(|&i| Movable::new(&live[i].allocation, live[i].requirements, live[i].kind))
            .collect();
        let limits = match rng.below(4) {
            0 => DefragmentationLimits::default().max_moves(rng.below(40) as usize),
            1 => DefragmentationLimits::default().max_bytes(rng.below(16 * MIB)),
            2 => DefragmentationLimits::default().max_used_percent(rng.below(101) as u8),
            _ => DefragmentationLimits::default(),
        }
        .split_blocks(rng.below(2) == 0)
        .compact_blocks(rng.below(3) == 0);
        let plan = allocator.plan_defragmentation(&listed, &limits).unwrap();
        if !limits.compact_blocks {
            assert_eq!(plan.blocks_compacted, 0, "{context}");
        }
        assert!(plan.moves.len() <= limits.max_moves, "{context}");
        let moved_bytes: u64 = plan
            .moves
            .iter()
            .map(|m| listed[m.movable].allocation.size())
            .sum();
        assert!(moved_bytes <= limits.max_bytes, "{context}");
        assert_eq!(plan.bytes_moved, moved_bytes, "{context}");
        if (limits.max_moves, limits.max_bytes) == (usize::MAX, u64::MAX) {
            assert_eq!(plan.blocks_over_limits, 0, "{context}");
        }
        drop(listed);
        // Moves to another block, and compaction's within one.
        let (within, across): (Vec<_>, Vec<_>) = plan
            .moves
            .iter()
            .partition(|m| m.destination.memory() == live[movable[m.movable]].allocation.memory());
        let sources: Vec<vk::DeviceMemory> = across
            .iter()
            .map(|m| live[movable[m.movable]].allocation.memory())
            .collect();
        let mut compacted: Vec<vk::DeviceMemory> =
            within.iter().map(|m| m.destination.memory()).collect();
        compacted.sort_unstable();
        compacted.dedup();
        assert_eq!(compacted.len(), plan.blocks_compacted, "{context}");
        total_packing += within.len();
        assert!(
            compacted.iter().all(|memory| !sources.contains(memory)),
            "{context}: a block both emptied and compacted"
        );
        let (blocks_emptied, bytes_emptied) = (plan.blocks_released, plan.bytes_released);
        let blocks_started = plan.blocks_started;
        if !limits.split_blocks {
            assert_eq!(blocks_started, 0, "{context}");
        }
        total_moves += plan.moves.len();
        total_blocks += plan.blocks_released;
        for planned in plan.moves.into_iter().rev() {
            let slot = &mut live[movable[planned.movable]];
            let destination = &planned.destination;
            assert_eq!(
                destination.memory_type(),
                slot.allocation.memory_type(),
                "{context}"
            );
            assert_eq!(destination.size(), slot.requirements.size, "{context}");
            assert_eq!(
                destination.offset() % slot.requirements.alignment,
                0,
                "{context}"
            );
            assert!(!destination.is_dedicated(), "{context}");
            let props = device.layout().memory_types[destination.memory_type() as usize].props;
            if props.contains(Props::HOST_VISIBLE) && !props.contains(Props::HOST_COHERENT) {
                let atom = device.layout().non_coherent_atom_size;
                assert_eq!(destination.offset() % atom, 0, "{context}: off the atom");
            }
            assert!(
                !sources.contains(&destination.memory()),
                "{context}: into an emptied block"
            );
            if destination.memory() == slot.allocation.memory() {
                assert!(
                    destination.offset() + destination.size() <= slot.allocation.offset(),
                    "{context}: a compaction's move not wholly below its source"
                );
            }
            let old = std::mem::replace(&mut slot.allocation, planned.destination);
            free(allocator, old);
        }
        assert_disjoint(live.iter().map(|l| &l.allocation), &context);
        // A source block is emptied, or (splitting) started: some of its
        // allocations stay for a later plan.
        let mut all_sources = sources.clone();
        all_sources.sort_unstable();
        all_sources.dedup();
        let (emptied, started): (Vec<vk::DeviceMemory>, Vec<vk::DeviceMemory>) = all_sources
            .into_iter()
            .partition(|&memory| live.iter().all(|l| l.allocation.memory() != memory));
        assert_eq!(emptied.len(), blocks_emptied, "{context}");
        assert_eq!(started.len(), blocks_started, "{context}");
        assert_eq!(
            allocator.stats().reserved_bytes(),
            reserved - bytes_emptied,
            "{context}"
        );
        assert_eq!(
            allocator.stats().allocations(),
            live.len() as u64,
            "{context}"
        );
    }
    for l in live {
        free(allocator, l.allocation);
    }
    (total_moves, total_blocks, total_packing)
}
