//! Defragmentation walked at random over what `defragment.rs`'s random
//! plans leave out: custom pools (fixed block sizes, `min_blocks`,
//! `max_blocks`, which turns runs off) beside the default pools, debug
//! margins with corruption detection, every resource kind under each
//! layout's `bufferImageGranularity`, requirements that change with the
//! move, sources freed through the frame queue, and moves given up. Each
//! allocation's bytes hold its own value, written again at its destination
//! as the engine's copy would: a move that lands on a live neighbour, its
//! margin or a granularity page it may not share shows as overwritten
//! bytes, a damaged margin or a shared page.

use ash::vk;
use gpu_alloc_types::MemoryPropertyFlags as Props;
use vk_suballoc::device::fake::FakeLayout;
use vk_suballoc::{
    Allocation, AllocationDesc, Config, DefragmentationLimits, Error, Movable, Pool, PoolDesc,
    Request, ResourceKind, Usage,
};

use super::seeded_rng::Rng;
use super::stress::{host_bytes, host_bytes_mut};
use super::{allocator_with, finish, free, requirements, FakeAllocator};

const MIB: u64 = 1 << 20;

/// A live allocation, the resource it was made for and the byte its
/// contents are (0: not host-visible, so not written).
struct Live {
    allocation: Allocation,
    requirements: vk::MemoryRequirements,
    kind: ResourceKind,
    fill: u8,
}

impl Live {
    /// Writes its value over its bytes, where the host can: in every
    /// host-visible memory type, in no other.
    fn write(&mut self, allocator: &FakeAllocator) {
        if let Some(bytes) = host_bytes_mut(allocator, &mut self.allocation) {
            bytes.fill(self.fill);
        }
    }

    /// Whether its bytes still hold its value (in host-visible memory,
    /// where they were written).
    fn intact(&self, allocator: &FakeAllocator) -> bool {
        host_bytes(allocator, &self.allocation)
            .map_or(true, |bytes| bytes.iter().all(|&b| b == self.fill))
    }
}

/// No two live allocations of one block whose kinds may not share a
/// `granularity` page share one.
fn assert_pages_apart(live: &[Live], granularity: u64, context: &str) {
    if granularity <= 1 {
        return;
    }
    for (i, a) in live.iter().enumerate() {
        for b in &live[i + 1..] {
            let (x, y) = (&a.allocation, &b.allocation);
            if x.memory() != y.memory() || a.kind.may_share_page_with(b.kind) {
                continue;
            }
            let (low, high) = if x.offset() < y.offset() {
                (x, y)
            } else {
                (y, x)
            };
            assert!(
                (low.offset() + low.size() - 1) / granularity < high.offset() / granularity,
                "{context}: {:?} and {:?} share a page: {low:?} {high:?}",
                a.kind,
                b.kind
            );
        }
    }
}

/// Each pool's block count is within its `min_blocks` and `max_blocks`,
/// and the allocator's counts of blocks, empty blocks and blocks being
/// emptied are those of its memory map; no block being emptied is empty
/// (it is released, or kept no longer retiring, when it empties).
fn assert_blocks_counted(allocator: &FakeAllocator, pools: &[(Pool, u64, u64)], context: &str) {
    for (pool, min, max) in pools {
        let blocks = allocator.pool_stats(pool).unwrap().blocks;
        assert!(
            (*min..=*max).contains(&blocks),
            "{context}: {blocks} blocks"
        );
    }
    let map = allocator.memory_map();
    let stats = allocator.stats();
    for (memory_type, map) in map.memory_types.iter().enumerate() {
        let blocks: Vec<_> = map
            .blocks
            .iter()
            .chain(map.custom_pools.iter().flat_map(|pool| &pool.blocks))
            .collect();
        let empty = blocks.iter().filter(|b| b.allocations().count() == 0);
        let retiring: Vec<_> = blocks.iter().filter(|b| b.retiring).collect();
        let counted = stats.memory_types[memory_type];
        let context = format!("{context}, memory type {memory_type}");
        assert_eq!(counted.blocks, blocks.len() as u64, "{context}");
        assert_eq!(counted.empty_blocks, empty.count() as u64, "{context}");
        assert_eq!(counted.retiring_blocks, retiring.len() as u64, "{context}");
        assert!(
            retiring.iter().all(|b| b.allocations().count() > 0),
            "{context}: an empty block is still being emptied"
        );
    }
}

#[test]
fn random_plans_over_pools_margins_and_queued_frees_keep_contents_and_counts() {
    let mut rng =
        Rng::from_env("random_plans_over_pools_margins_and_queued_frees_keep_contents_and_counts");
    for layout in [
        FakeLayout::discrete(),
        FakeLayout::mobile(),
        FakeLayout::intel_arc(),
        FakeLayout::amd(),
        FakeLayout::apple(),
        FakeLayout::mali(),
    ] {
        let margin = [0, 16, 64, 256][rng.below(4) as usize];
        let config = Config {
            large_heap_block_size: 16 * MIB,
            debug_margin: margin,
            detect_corruption: margin > 0,
            small_buffer_limit: [0, 4096][rng.below(2) as usize],
            max_padded_granularity: [0, 1024, 4096][rng.below(3) as usize],
            ..Config::default()
        };
        let name = layout.name;
        let granularity = layout.buffer_image_granularity;
        let atom = layout.non_coherent_atom_size;
        let props: Vec<Props> = layout.memory_types.iter().map(|t| t.props).collect();
        let (allocator, device) = allocator_with(layout, config);
        let host = allocator.memory_type_for(!0, Usage::UPLOAD).unwrap();
        let fixed = PoolDesc::new(host)
            .block_size(4 * MIB)
            .min_blocks(2)
            .max_blocks(5);
        let capped = rng.below(2) == 0;
        let growing = PoolDesc::new(host).min_blocks(1);
        let growing = if capped {
            growing.max_blocks(3)
        } else {
            growing
        };
        let pools = [
            (allocator.create_pool(&fixed).unwrap(), 2, 5),
            (
                allocator.create_pool(&growing).unwrap(),
                1,
                if capped { 3 } else { u64::MAX },
            ),
        ];
        let mut live: Vec<Live> = Vec::new();
        let mut fences = Vec::new();
        let mut fill = 0u8;
        for round in 0..20 {
            let context = format!("{name} round {round}");
            for _ in 0..rng.below(100) {
                let kind = [
                    ResourceKind::Buffer,
                    ResourceKind::Buffer,
                    ResourceKind::LinearImage,
                    ResourceKind::OptimalImage,
                    ResourceKind::Unknown,
                ][rng.below(5) as usize];
                let size = match rng.below(3) {
                    0 => 16 + rng.below(4096),
                    1 => 4096 + rng.below(256 << 10),
                    _ => (64 << 10) + rng.below(MIB),
                };
                let requirements = requirements(size, 1 << rng.below(12));
                let usage = [Usage::UPLOAD, Usage::DEVICE_LOCAL, Usage::READBACK];
                let pool = rng.below(3).checked_sub(1).map(|i| &pools[i as usize]);
                let desc = match pool {
                    None => AllocationDesc::new(usage[rng.below(3) as usize]),
                    Some(&(pool, _, _)) => AllocationDesc::new(Usage::UPLOAD).pool(pool),
                };
                // A full pool refuses, holding its `max_blocks` blocks; so
                // be it. Nothing else may: the heaps are large.
                let allocation =
                    match allocator.allocate(&Request::with_desc(requirements, kind, desc)) {
                        Ok(allocation) => allocation,
                        Err(Error::PoolFull { max_blocks }) if pool.is_some() => {
                            let &(pool, _, max) = pool.unwrap();
                            let blocks = allocator.pool_stats(&pool).unwrap().blocks;
                            assert_eq!(
                                (max_blocks, blocks),
                                (max, max),
                                "{context}: a full pool of {size} bytes"
                            );
                            continue;
                        }
                        Err(error) => panic!("{context}: {size} bytes, {desc:?}: {error:?}"),
                    };
                fill = fill % 255 + 1;
                let mut new = Live {
                    allocation,
                    requirements,
                    kind,
                    fill,
                };
                new.write(&allocator);
                live.push(new);
            }
            for _ in 0..rng.below(live.len() as u64 + 1) {
                let gone = live.swap_remove(rng.below(live.len() as u64) as usize);
                if rng.below(3) == 0 {
                    allocator.free_after_frame(gone.allocation).unwrap();
                } else {
                    free(&allocator, gone.allocation);
                }
            }
            // Listed with the requirements of the resource made again: now
            // and then a larger one, aligned otherwise.
            let mut listed: Vec<(usize, vk::MemoryRequirements)> = Vec::new();
            for (i, l) in live.iter().enumerate() {
                if rng.below(6) == 0 {
                    continue;
                }
                let mut requirements = l.requirements;
                if rng.below(4) == 0 {
                    requirements.size += rng.below(requirements.size / 2 + 1);
                    requirements.alignment = 1 << rng.below(12);
                }
                listed.push((i, requirements));
            }
            let movables: Vec<Movable<'_>> = listed
                .iter()
                .map(|&(i, requirements)| {
                    Movable::new(&live[i].allocation, requirements, live[i].kind)
                })
                .collect();
            let limits = match rng.below(4) {
                0 => DefragmentationLimits::default().max_moves(rng.below(40) as usize),
                1 => DefragmentationLimits::default().max_bytes(rng.below(8 * MIB)),
                2 => DefragmentationLimits::default().max_used_percent(rng.below(101) as u8),
                _ => DefragmentationLimits::default(),
            }
            .split_blocks(rng.below(2) == 0)
            .compact_blocks(rng.below(2) == 0);
            let plan = allocator.plan_defragmentation(&movables, &limits).unwrap();
            drop(movables);
            for planned in plan.moves.into_iter().rev() {
                let (i, requirements) = listed[planned.movable];
                let destination = &planned.destination;
                let old = &live[i].allocation;
                assert_eq!(destination.size(), requirements.size, "{context}");
                assert_eq!(
                    destination.offset() % requirements.alignment,
                    0,
                    "{context}"
                );
                assert_eq!(destination.memory_type(), old.memory_type(), "{context}");
                assert_eq!(
                    destination.is_in_custom_pool(),
                    old.is_in_custom_pool(),
                    "{context}"
                );
                let flags = props[destination.memory_type() as usize];
                if flags.contains(Props::HOST_VISIBLE) && !flags.contains(Props::HOST_COHERENT) {
                    assert_eq!(destination.offset() % atom, 0, "{context}: off the atom");
                }
                if rng.below(10) == 0 {
                    allocator.give_up_move(planned).unwrap();
                    continue;
                }
                let mut moved = Live {
                    allocation: planned.destination,
                    requirements,
                    kind: live[i].kind,
                    fill: live[i].fill,
                };
                moved.write(&allocator);
                let old = std::mem::replace(&mut live[i], moved);
                if rng.below(2) == 0 {
                    allocator.free_after_frame(old.allocation).unwrap();
                } else {
                    free(&allocator, old.allocation);
                }
            }
            fences.push(super::frames::end_frame(&allocator, &device));
            if rng.below(2) == 0 {
                for fence in fences.drain(..) {
                    device.signal_fence(fence);
                }
                allocator.collect().unwrap();
            }
            assert!(
                live.iter().all(|l| l.intact(&allocator)),
                "{context}: contents overwritten"
            );
            assert_pages_apart(&live, granularity, &context);
            if margin > 0 {
                let report = allocator.check_corruption(!0).unwrap();
                assert!(report.is_clean(), "{context}: {report:?}");
            }
            assert_blocks_counted(&allocator, &pools, &context);
        }
        for fence in fences {
            device.signal_fence(fence);
        }
        allocator.collect().unwrap();
        assert_eq!(allocator.stats().allocations(), live.len() as u64, "{name}");
        for l in live {
            free(&allocator, l.allocation);
        }
        for (pool, _, _) in pools {
            allocator.destroy_pool(pool).unwrap();
        }
        finish(allocator, &device);
    }
}
