//! Plans made while earlier plans' moves are still pending, walked at
//! random: what `defragment_walk.rs` leaves out, where every move is
//! carried out or given up before the next plan. Each round some pending
//! moves are carried out (the old allocation freed at once or after the
//! frame), given up, or dropped with their resource (old allocation and
//! destination both freed, VMA's `MOVE_OPERATION_DESTROY`), and some stay
//! pending; the next plan lists only allocations with no move pending, as
//! the docs ask. Named allocations check that destinations take their
//! sources' names; each allocation's bytes hold its own value, copied to
//! its destination as the engine's copy would.

use ash::vk;
use vk_suballoc::device::fake::FakeLayout;
use vk_suballoc::{
    Allocation, AllocationDesc, Config, DefragmentationLimits, DefragmentationMove, Movable,
    PoolDesc, Request, ResourceKind, Usage,
};

use super::super::seeded_rng::Rng;
use super::super::{allocator_with, finish, free, requirements, FakeAllocator};
use super::MIB;

/// A live allocation of the walk, and its move when one is pending.
struct Live {
    allocation: Allocation,
    requirements: vk::MemoryRequirements,
    kind: ResourceKind,
    name: Option<String>,
    /// The byte its contents are (where the host can write them).
    fill: u8,
    pending: Option<DefragmentationMove>,
}

impl Live {
    /// The allocation, and the destination of its pending move.
    fn places(&self) -> impl Iterator<Item = &Allocation> + '_ {
        std::iter::once(&self.allocation).chain(self.pending.iter().map(|m| &m.destination))
    }
}

/// Writes `fill` over `allocation`'s bytes, where the host can.
fn write(allocator: &FakeAllocator, allocation: &mut Allocation, fill: u8) {
    if let Ok(bytes) = allocator.mapped_slice_mut(allocation) {
        bytes.fill(fill);
    }
}

/// No two places of `live` (allocations and pending destinations) overlap,
/// every allocation still holds its bytes, each place the memory map shows
/// has its allocation's name, and the counts of blocks, empty blocks and
/// blocks being emptied are the map's, none of those being emptied empty.
fn check(allocator: &FakeAllocator, live: &[Live], context: &str) {
    let mut places: Vec<(vk::DeviceMemory, u64, u64)> = live
        .iter()
        .flat_map(Live::places)
        .map(|a| (a.memory(), a.offset(), a.size()))
        .collect();
    places.sort_unstable_by_key(|&(memory, offset, _)| (memory, offset));
    for pair in places.windows(2) {
        let ((m0, o0, s0), (m1, o1, _)) = (pair[0], pair[1]);
        assert!(
            m0 != m1 || o0 + s0 <= o1,
            "{context}: {:?} overlaps {:?}",
            pair[0],
            pair[1]
        );
    }
    for l in live {
        let intact = allocator
            .mapped_slice(&l.allocation)
            .map_or(true, |bytes| bytes.iter().all(|&b| b == l.fill));
        assert!(intact, "{context}: contents overwritten");
    }
    let map = allocator.memory_map();
    let stats = allocator.stats();
    let mut names = std::collections::HashMap::new();
    for (memory_type, map) in map.memory_types.iter().enumerate() {
        let blocks: Vec<_> = map
            .blocks
            .iter()
            .chain(map.custom_pools.iter().flat_map(|pool| &pool.blocks))
            .collect();
        for block in &blocks {
            for range in block.allocations() {
                names.insert((block.memory, range.offset), range.name.clone());
            }
        }
        let counted = stats.memory_types[memory_type];
        let empty = blocks.iter().filter(|b| b.allocations().count() == 0);
        let retiring: Vec<_> = blocks.iter().filter(|b| b.retiring).collect();
        assert_eq!(counted.blocks, blocks.len() as u64, "{context}");
        assert_eq!(counted.empty_blocks, empty.count() as u64, "{context}");
        assert_eq!(counted.retiring_blocks, retiring.len() as u64, "{context}");
        assert!(
            retiring.iter().all(|b| b.allocations().count() > 0),
            "{context}: an empty block is still being emptied"
        );
    }
    for l in live {
        for place in l.places() {
            // Run slots are not in the map: their run is.
            if let Some(name) = names.get(&(place.memory(), place.offset())) {
                assert_eq!(name, &l.name, "{context}: the name of {place:?}");
            }
        }
    }
}

#[test]
fn plans_over_pending_moves_keep_places_apart_names_and_counts() {
    let mut rng = Rng::from_env("plans_over_pending_moves_keep_places_apart_names_and_counts");
    for layout in [
        FakeLayout::discrete(),
        FakeLayout::mobile(),
        FakeLayout::amd(),
    ] {
        let margin = [0, 16][rng.below(2) as usize];
        let config = Config {
            large_heap_block_size: 8 * MIB,
            debug_margin: margin,
            detect_corruption: margin > 0,
            small_buffer_limit: [0, 4096][rng.below(2) as usize],
            ..Config::default()
        };
        let name = layout.name;
        let (allocator, device) = allocator_with(layout, config);
        let host = allocator.memory_type_for(!0, Usage::UPLOAD).unwrap();
        let pool = allocator
            .create_pool(
                &PoolDesc::new(host)
                    .block_size(2 * MIB)
                    .min_blocks(1)
                    .max_blocks(4),
            )
            .unwrap();
        let mut live: Vec<Live> = Vec::new();
        let mut fences = Vec::new();
        let mut made = 0u32;
        for round in 0..40 {
            let context = format!("{name} round {round}");
            for _ in 0..rng.below(60) {
                let kind = [
                    ResourceKind::Buffer,
                    ResourceKind::OptimalImage,
                    ResourceKind::LinearImage,
                ][rng.below(3) as usize];
                let size = match rng.below(2) {
                    0 => 16 + rng.below(4000),
                    _ => 4096 + rng.below(300 << 10),
                };
                let requirements = requirements(size, 1 << rng.below(10));
                made += 1;
                let name = (rng.below(2) == 0).then(|| format!("walk {made}"));
                let desc = match rng.below(3) {
                    0 => AllocationDesc::new(Usage::UPLOAD).pool(pool),
                    1 => AllocationDesc::new(Usage::UPLOAD),
                    _ => AllocationDesc::new(Usage::DEVICE_LOCAL),
                };
                let desc = match &name {
                    Some(name) => desc.name(name),
                    None => desc,
                };
                // A full pool refuses; so be it.
                let Ok(mut allocation) =
                    allocator.allocate(&Request::with_desc(requirements, kind, desc))
                else {
                    continue;
                };
                let fill = (made % 255 + 1) as u8;
                write(&allocator, &mut allocation, fill);
                live.push(Live {
                    allocation,
                    requirements,
                    kind,
                    name,
                    fill,
                    pending: None,
                });
            }
            // Pending moves carried out, given up, dropped with their
            // resource, or left pending; some other allocations freed.
            let mut i = 0;
            while i < live.len() {
                let choice = rng.below(8);
                if let Some(mut planned) = live[i].pending.take() {
                    match choice {
                        0..=2 => {
                            write(&allocator, &mut planned.destination, live[i].fill);
                            let old =
                                std::mem::replace(&mut live[i].allocation, planned.destination);
                            if rng.below(2) == 0 {
                                allocator.free_after_frame(old).unwrap();
                            } else {
                                free(&allocator, old);
                            }
                        }
                        3 => allocator.give_up_move(planned).unwrap(),
                        4 => {
                            free(&allocator, live.swap_remove(i).allocation);
                            allocator.free_after_frame(planned.destination).unwrap();
                            continue;
                        }
                        _ => live[i].pending = Some(planned),
                    }
                } else if choice == 0 {
                    let gone = live.swap_remove(i).allocation;
                    if rng.below(2) == 0 {
                        allocator.free_after_frame(gone).unwrap();
                    } else {
                        free(&allocator, gone);
                    }
                    continue;
                }
                i += 1;
            }
            check(&allocator, &live, &context);
            let listed: Vec<usize> = (0..live.len())
                .filter(|&i| live[i].pending.is_none() && rng.below(5) != 0)
                .collect();
            let movables: Vec<Movable<'_>> = listed
                .iter()
                .map(|&i| Movable::new(&live[i].allocation, live[i].requirements, live[i].kind))
                .collect();
            let limits = match rng.below(3) {
                0 => DefragmentationLimits::default().max_moves(rng.below(10) as usize),
                1 => DefragmentationLimits::default().max_bytes(rng.below(2 * MIB)),
                _ => DefragmentationLimits::default(),
            }
            .max_used_percent(rng.below(101) as u8)
            .split_blocks(rng.below(2) == 0)
            .compact_blocks(rng.below(2) == 0);
            let plan = allocator.plan_defragmentation(&movables, &limits).unwrap();
            drop(movables);
            for planned in plan.moves {
                let l = &mut live[listed[planned.movable]];
                assert!(l.pending.is_none(), "{context}: moved twice");
                l.pending = Some(planned);
            }
            check(&allocator, &live, &context);
            fences.push(super::super::frames::end_frame(&allocator, &device));
            if rng.below(2) == 0 {
                for fence in fences.drain(..) {
                    device.signal_fence(fence);
                }
                allocator.collect().unwrap();
            }
            check(&allocator, &live, &context);
            if margin > 0 {
                let report = allocator.check_corruption(!0).unwrap();
                assert!(report.is_clean(), "{context}: {report:?}");
            }
        }
        // Every move still pending carried out: nothing is left being
        // emptied once everything is freed.
        for l in &mut live {
            if let Some(mut planned) = l.pending.take() {
                write(&allocator, &mut planned.destination, l.fill);
                free(
                    &allocator,
                    std::mem::replace(&mut l.allocation, planned.destination),
                );
            }
        }
        for fence in fences {
            device.signal_fence(fence);
        }
        allocator.collect().unwrap();
        check(&allocator, &live, &format!("{name} end"));
        assert_eq!(allocator.stats().allocations(), live.len() as u64, "{name}");
        for l in live {
            free(&allocator, l.allocation);
        }
        let stats = allocator.stats();
        assert!(
            stats.memory_types.iter().all(|t| t.retiring_blocks == 0),
            "{name}"
        );
        allocator.destroy_pool(pool).unwrap();
        finish(allocator, &device);
    }
}

/// A move given up on another thread while a plan runs, between the
/// plan's passes, does not get an allocation the plan moved a second
/// destination. The plan empties block R (which an earlier plan started,
/// the resource of that plan's move out of R since unloaded) and retires
/// it; the earlier move, given up meanwhile by another thread (which a
/// flush in the plan's second pool runs), ends R's retirement. The
/// compaction pass found R's moved allocation in a block that stays, and
/// packed it too: two moves for one allocation, which an engine carries
/// out one after the other (two copies, the second from a resource whose
/// copy is not done).
#[test]
fn a_move_given_up_between_a_plans_passes_leaves_one_move_per_movable() {
    use std::sync::{Arc, Mutex};

    let config = Config {
        debug_fill: true,
        ..Config::default()
    };
    let (allocator, device) = allocator_with(FakeLayout::mobile(), config);
    let allocator = Arc::new(allocator);
    // Mobile's device-local type (no fills there: nothing flushes) and its
    // cached, non-coherent one (fills flush).
    let (device_local, cached) = (0, 2);
    let in_pool = |pool, size| {
        let desc = AllocationDesc::new(Usage::DEVICE_LOCAL).pool(pool);
        Request::with_desc(requirements(size, 256), ResourceKind::Buffer, desc)
    };
    let p = allocator
        .create_pool(&PoolDesc::new(device_local).block_size(4 * MIB))
        .unwrap();
    // Block T: four 1 MiB buffers, the last two freed; block R: Y at 0,
    // Z after it.
    let mut t: Vec<Allocation> = (0..4)
        .map(|_| allocator.allocate(&in_pool(p, MIB)).unwrap())
        .collect();
    let y = allocator.allocate(&in_pool(p, MIB / 2)).unwrap();
    let z = allocator.allocate(&in_pool(p, MIB / 2)).unwrap();
    assert_ne!(y.memory(), t[0].memory());
    assert_eq!(
        (y.memory(), y.offset(), z.offset()),
        (z.memory(), 0, MIB / 2)
    );
    for gone in t.drain(2..) {
        free(&allocator, gone);
    }
    // Pool Q: block Q1 holding q alone, block Q2 with room for it.
    let q_pool = allocator
        .create_pool(&PoolDesc::new(cached).block_size(MIB))
        .unwrap();
    let q1_big = allocator.allocate(&in_pool(q_pool, 768 << 10)).unwrap();
    let q = allocator.allocate(&in_pool(q_pool, 128 << 10)).unwrap();
    let q2_big = allocator.allocate(&in_pool(q_pool, 768 << 10)).unwrap();
    assert_eq!(q.memory(), q1_big.memory());
    assert_ne!(q2_big.memory(), q.memory());
    free(&allocator, q1_big);

    // Plan 1 starts R: Y moves to T, Z stays.
    let limits = DefragmentationLimits::default()
        .max_moves(1)
        .split_blocks(true);
    let r_requirements = requirements(MIB / 2, 256);
    let movables = [
        Movable::new(&y, r_requirements, ResourceKind::Buffer),
        Movable::new(&z, r_requirements, ResourceKind::Buffer),
    ];
    let mut plan = allocator.plan_defragmentation(&movables, &limits).unwrap();
    assert_eq!(
        (plan.moves.len(), plan.blocks_started),
        (1, 1),
        "plan 1: {plan:?}"
    );
    let y_move = plan.moves.pop().unwrap();
    assert_eq!(y_move.movable, 0);
    // Y's resource is unloaded; its move is left to be given up.
    free(&allocator, y);

    // Plan 2 lists Z and q. Q's destination is filled and flushed after
    // P's whole pass retired R again; the flush gives Y's move up.
    let pending = Arc::new(Mutex::new(Some(y_move)));
    let (hook_allocator, hook_pending) = (Arc::clone(&allocator), Arc::clone(&pending));
    device.set_flush_hook(Some(Box::new(move || {
        let Some(y_move) = hook_pending.lock().unwrap().take() else {
            return;
        };
        let other = Arc::clone(&hook_allocator);
        std::thread::spawn(move || other.give_up_move(y_move))
            .join()
            .unwrap()
            .unwrap();
    })));
    // Z listed twice: it moves once all the same.
    let movables = [
        Movable::new(&z, r_requirements, ResourceKind::Buffer),
        Movable::new(&q, requirements(128 << 10, 256), ResourceKind::Buffer),
        Movable::new(&z, r_requirements, ResourceKind::Buffer),
    ];
    let limits = DefragmentationLimits::default().compact_blocks(true);
    let plan = allocator.plan_defragmentation(&movables, &limits).unwrap();
    device.set_flush_hook(None);
    assert!(pending.lock().unwrap().is_none(), "the hook ran");
    let of_z = plan.moves.iter().filter(|m| m.movable != 1).count();
    let of_q = plan.moves.iter().filter(|m| m.movable == 1).count();
    assert_eq!((of_z, of_q), (1, 1), "one move per allocation: {plan:?}");
    // Z's move is the whole pass's, out of R.
    assert_ne!(plan.moves[0].destination.memory(), z.memory());

    let allocator = Arc::into_inner(allocator).unwrap();
    for planned in plan.moves {
        free(&allocator, planned.destination);
    }
    for a in t.into_iter().chain([z, q, q2_big]) {
        free(&allocator, a);
    }
    // SAFETY: the fake device runs no GPU work.
    unsafe { allocator.collect_idle() };
    allocator.destroy_pool(p).unwrap();
    allocator.destroy_pool(q_pool).unwrap();
    finish(allocator, &device);
}
