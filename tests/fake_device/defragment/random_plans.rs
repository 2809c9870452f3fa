//! Seeded random plans over random buffers and optimal images, carried out:
//! every destination in its source's memory type, aligned and outside every
//! emptied block, no two live allocations overlapping, `trim` giving
//! back exactly the bytes the plans said, and every figure of `stats()`
//! equal to a recount while moves are pending, resolved and collected.

use ash::vk;
use gpu_alloc_types::MemoryPropertyFlags as Props;
use vk_suballoc::device::fake::FakeLayout;
use vk_suballoc::{Allocation, DefragmentationLimits, Movable, Request, ResourceKind, Usage};

use super::super::seeded_rng::Rng;
use super::super::{finish, free, requirements};
use super::super::{FakeAllocator, FakeDevice};

use super::{allocator_with_16_mib_blocks, assert_disjoint, MIB};

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
        let (allocator, device) = allocator_with_16_mib_blocks(layout);
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

/// A round of random requests: up to `most` allocations (optimal and
/// linear images and buffers, 16 B to 2 MiB, alignments up to 4 KiB, in
/// every usage) added to `live`, then a random number of `live`'s freed.
fn churn(allocator: &FakeAllocator, rng: &mut Rng, live: &mut Vec<Live>, most: u64) {
    for _ in 0..rng.below(most) {
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
        let usage = [Usage::DEVICE_LOCAL, Usage::UPLOAD, Usage::READBACK][rng.below(3) as usize];
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
        churn(allocator, rng, &mut live, 300);
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

/// VMA #241: after defragmentation, the budget's allocation bytes grew run
/// after run (a move's bytes counted twice, or a source never taken out).
/// Through seeded random plans (compaction and split blocks among them)
/// whose moves are carried out at once, carried out with the source freed
/// after the frame, or given up, every figure of `stats()` equals a
/// recount while the moves are pending, once each is resolved, and once
/// the frame's frees are collected: allocations and their bytes per memory
/// type, blocks and their bytes against the device's memory objects, empty
/// and retiring blocks against the memory map, each heap's memory against
/// the device's.
#[test]
fn figures_equal_a_recount_through_defragmentation() {
    use std::collections::HashSet;

    fn recount(
        allocator: &FakeAllocator,
        device: &FakeDevice,
        counted: &[(u32, u64, bool)],
        context: &str,
    ) {
        let stats = allocator.stats();
        let on_device = device.live_allocations();
        assert_eq!(stats.memory_objects as usize, on_device.len(), "{context}");
        let map = allocator.memory_map();
        assert_eq!(map.allocation_count(), counted.len(), "{context}");
        let dedicated_memory: HashSet<vk::DeviceMemory> = on_device
            .iter()
            .filter(|m| m.dedicated.is_some())
            .map(|m| m.memory)
            .collect();
        for t in &stats.memory_types {
            let mine: Vec<_> = counted.iter().filter(|c| c.0 == t.memory_type).collect();
            let want = (
                mine.len() as u64,
                mine.iter().map(|c| c.1).sum::<u64>(),
                mine.iter().filter(|c| c.2).count() as u64,
            );
            assert_eq!(
                (t.allocations(), t.live_bytes(), t.dedicated_allocations),
                want,
                "{context}: memory type {}: {t:?}",
                t.memory_type
            );
            let dedicated_objects = on_device
                .iter()
                .filter(|m| m.memory_type == t.memory_type && dedicated_memory.contains(&m.memory))
                .count() as u64;
            let blocks: Vec<u64> = on_device
                .iter()
                .filter(|m| m.memory_type == t.memory_type)
                .map(|m| m.size)
                .collect();
            assert_eq!(
                t.blocks + t.dedicated_allocations,
                blocks.len() as u64,
                "{context}: memory type {}: {t:?} ({dedicated_objects} dedicated objects)",
                t.memory_type
            );
            assert_eq!(
                t.block_bytes + t.dedicated_bytes,
                blocks.iter().sum::<u64>(),
                "{context}: memory type {}: {t:?}",
                t.memory_type
            );
            let type_map = &map.memory_types[t.memory_type as usize];
            let mapped: Vec<_> = type_map
                .blocks
                .iter()
                .chain(type_map.custom_pools.iter().flat_map(|p| p.blocks.iter()))
                .collect();
            let empty = mapped
                .iter()
                .filter(|b| b.allocations().next().is_none())
                .count();
            let retiring = mapped.iter().filter(|b| b.retiring).count();
            assert_eq!(
                (t.empty_blocks, t.retiring_blocks),
                (empty as u64, retiring as u64),
                "{context}: memory type {}: {t:?}",
                t.memory_type
            );
        }
        let usage = device.heap_usage();
        for h in &stats.heaps {
            assert_eq!(h.reserved_bytes, usage[h.heap as usize], "{context}: {h:?}");
        }
    }

    let mut rng = Rng::from_env("figures_equal_a_recount_through_defragmentation");
    for layout in [FakeLayout::discrete(), FakeLayout::mobile()] {
        let (allocator, device) = allocator_with_16_mib_blocks(layout);
        let name = device.layout().name;
        let mut live: Vec<Live> = Vec::new();
        // Freed after the frame, counted until collected.
        let mut deferred: Vec<(u32, u64, bool)> = Vec::new();
        // Moves carried out at once, after the frame, given up.
        let mut outcomes = [0usize; 3];
        let counted = |live: &[Live], deferred: &[(u32, u64, bool)], extra: &[&Allocation]| {
            live.iter()
                .map(|l| &l.allocation)
                .chain(extra.iter().copied())
                .map(|a| (a.memory_type(), a.size(), a.is_dedicated()))
                .chain(deferred.iter().copied())
                .collect::<Vec<_>>()
        };
        for round in 0..10 {
            let context = format!("{name} round {round}");
            churn(&allocator, &mut rng, &mut live, 200);
            recount(
                &allocator,
                &device,
                &counted(&live, &deferred, &[]),
                &context,
            );
            let movable: Vec<usize> = (0..live.len()).filter(|_| rng.below(6) != 0).collect();
            let listed: Vec<Movable<'_>> = movable
                .iter()
                .map(|&i| Movable::new(&live[i].allocation, live[i].requirements, live[i].kind))
                .collect();
            let limits = DefragmentationLimits::default()
                .split_blocks(rng.below(2) == 0)
                .compact_blocks(rng.below(2) == 0);
            let plan = allocator.plan_defragmentation(&listed, &limits).unwrap();
            drop(listed);
            let destinations: Vec<&Allocation> =
                plan.moves.iter().map(|m| &m.destination).collect();
            recount(
                &allocator,
                &device,
                &counted(&live, &deferred, &destinations),
                &format!("{context}: {} moves pending", plan.moves.len()),
            );
            for planned in plan.moves.into_iter().rev() {
                let index = movable[planned.movable];
                let outcome = rng.below(3) as usize;
                outcomes[outcome] += 1;
                match outcome {
                    0 => {
                        let old =
                            std::mem::replace(&mut live[index].allocation, planned.destination);
                        free(&allocator, old);
                    }
                    1 => {
                        let old =
                            std::mem::replace(&mut live[index].allocation, planned.destination);
                        deferred.push((old.memory_type(), old.size(), old.is_dedicated()));
                        allocator.free_after_frame(old).unwrap();
                    }
                    _ => {
                        let destination = &planned.destination;
                        deferred.push((
                            destination.memory_type(),
                            destination.size(),
                            destination.is_dedicated(),
                        ));
                        allocator.give_up_move(planned).unwrap();
                    }
                }
            }
            recount(
                &allocator,
                &device,
                &counted(&live, &deferred, &[]),
                &format!("{context}: moves resolved"),
            );
            let fence = device.create_fence();
            // SAFETY: a fake fence, signalled at once: "the GPU" is done.
            unsafe { allocator.end_frame(fence) }.unwrap();
            device.signal_fence(fence);
            allocator.collect().unwrap();
            deferred.clear();
            recount(
                &allocator,
                &device,
                &counted(&live, &deferred, &[]),
                &format!("{context}: collected"),
            );
        }
        println!("{name}: moves carried out, freed after the frame, given up: {outcomes:?}");
        assert!(outcomes.iter().all(|&n| n > 0), "{name}: {outcomes:?}");
        for l in live {
            free(&allocator, l.allocation);
        }
        finish(allocator, &device);
    }
}
