//! The walk's defragmentation: plans over a random subset of the live
//! allocations, within random limits at times, carried out as an engine
//! does (the tagged bytes copied, the destination used in the source's
//! place, the source freed now or after the frame, now and then a move
//! given up); and lists holding a bad movable, which are refused whole.

use std::collections::{HashMap, HashSet};

use ash::vk;
use vk_suballoc::{
    Allocation, DefragmentationLimits, DefragmentationPlan, Error, Movable, Pool, ResourceKind,
};

use super::{Counted, Live, Place, Walk, MIB};

#[path = "defragment/plan_checks.rs"]
mod plan_checks;

/// One entry of a list handed to `plan_defragmentation`: a live allocation
/// of the walk, or the foreign one, with the requirements and kind listed.
#[derive(Clone, Copy, Debug)]
struct Listed {
    /// Its index in `Walk::live`; `None` for the foreign allocation.
    live: Option<usize>,
    requirements: vk::MemoryRequirements,
    kind: ResourceKind,
}

impl Listed {
    /// The error this entry earns, in the order `plan_defragmentation`
    /// checks each movable: its owner, its size, its alignment.
    fn refusal(&self) -> Option<Error> {
        let r = &self.requirements;
        if self.live.is_none() {
            Some(Error::ForeignAllocation)
        } else if r.size == 0 {
            Some(Error::ZeroSize)
        } else if !r.alignment.is_power_of_two() {
            Some(Error::AlignmentNotPowerOfTwo(r.alignment))
        } else {
            None
        }
    }
}

/// What the walk's plans did, printed at its end: how much of the
/// defragmentation a seed reached.
#[derive(Debug, Default)]
pub(super) struct Defragmented {
    plans: u64,
    refused: u64,
    moves: u64,
    given_up: u64,
    blocks: u64,
    /// Blocks plans emptied in part (`split_blocks`).
    started: u64,
    /// Blocks plans packed (`compact_blocks`).
    compacted: u64,
}

/// Each block before a plan, by memory object: its size, whether it held an
/// allocation, the bytes it held, and its custom pool, if any.
type Blocks = HashMap<vk::DeviceMemory, (u64, bool, u64, Option<Pool>)>;

impl Walk {
    /// Plans defragmentation over a random list and carries the plan out;
    /// one time in six, the list holds a bad movable and is refused.
    pub(super) fn defragment(&mut self) {
        let listed = self.draw_listing();
        if self.rng.below(6) == 0 {
            self.defragmented.refused += 1;
            return self.plan_refused(listed);
        }
        let limits = match self.rng.below(6) {
            0 => DefragmentationLimits::default().max_moves(self.rng.below(6) as usize),
            1 => DefragmentationLimits::default().max_bytes(self.rng.below(2 * MIB)),
            2 => DefragmentationLimits::default()
                .max_moves(self.rng.below(24) as usize)
                .max_bytes(self.rng.below(8 * MIB)),
            3 => DefragmentationLimits::default().max_used_percent(self.rng.below(110) as u8),
            _ => DefragmentationLimits::default(),
        }
        .split_blocks(self.rng.below(3) == 0)
        .compact_blocks(self.rng.below(4) == 0);
        let map = self.allocator.memory_map();
        let all_blocks = self.all_blocks(&map);
        // The map marks the blocks earlier plans are still emptying.
        let shown: HashSet<vk::DeviceMemory> = all_blocks
            .iter()
            .filter(|(b, _)| b.retiring)
            .map(|(b, _)| b.memory)
            .collect();
        assert_eq!(
            shown,
            self.retiring,
            "{}: the blocks being emptied",
            self.ctx()
        );
        let counted: u64 = self
            .allocator
            .stats()
            .memory_types
            .iter()
            .map(|t| t.retiring_blocks)
            .sum();
        assert_eq!(
            counted,
            self.retiring.len() as u64,
            "{}: retiring_blocks",
            self.ctx()
        );
        let blocks: Blocks = all_blocks
            .iter()
            .map(|&(b, pool)| {
                let used: u64 = b.allocations().map(|r| r.size).sum();
                (b.memory, (b.size, used > 0, used, pool))
            })
            .collect();
        let before = self.allocator.stats();
        let counters = self.device.counters();
        let result = self
            .allocator
            .plan_defragmentation(&self.movables(&listed), &limits);
        let plan = result.unwrap_or_else(|e| panic!("{}: plan refused: {e:?}", self.ctx()));
        self.forget_unreleasable_blocks(&listed, &blocks);
        let (sources, emptied) = self.check_plan(&listed, &limits, &plan, &blocks);
        let tally = &mut self.defragmented;
        tally.plans += 1;
        tally.moves += plan.moves.len() as u64;
        tally.blocks += plan.blocks_released as u64;
        tally.started += plan.blocks_started as u64;
        tally.compacted += plan.blocks_compacted as u64;
        let ctx = self.ctx();
        let after = self.allocator.stats();
        let destinations: u64 = plan.moves.iter().map(|m| m.destination.size()).sum();
        assert_eq!(
            (after.allocations(), after.live_bytes()),
            (
                before.allocations() + plan.moves.len() as u64,
                before.live_bytes() + destinations
            ),
            "{ctx}: the destinations are live allocations"
        );
        assert_eq!(
            (after.memory_objects, after.reserved_bytes()),
            (before.memory_objects, before.reserved_bytes()),
            "{ctx}: a plan makes no memory object"
        );
        let now = self.device.counters();
        assert_eq!(
            (now.allocate_calls, now.frees, now.maps),
            (counters.allocate_calls, counters.frees, counters.maps),
            "{ctx}: a plan calls no device"
        );
        self.carry_out(&listed, plan, &sources, &emptied, &blocks);
    }

    /// Forgets the blocks the plan stopped emptying: a plan for a custom
    /// pool first stops emptying the blocks it could no longer release,
    /// those retiring past the ones it holds above its `min_blocks`
    /// (`trim`, or an emptied block's release, took the others since they
    /// retired), the latest started first, which the walk does not track.
    /// So it checks how many of each pool's stop: none in a default pool or
    /// a pool with `min_blocks` 0, none in a pool none of whose allocations
    /// the plan took up, else exactly those past the limit (read from
    /// `blocks`, the pools before the plan, and the walk's retiring ones).
    fn forget_unreleasable_blocks(&mut self, listed: &[Listed], blocks: &Blocks) {
        let map = self.allocator.memory_map();
        let retiring: HashSet<vk::DeviceMemory> = (self.all_blocks(&map).iter())
            .filter(|(b, _)| b.retiring)
            .map(|(b, _)| b.memory)
            .collect();
        let stopped = |pool: Option<Pool>| {
            (self.retiring.iter())
                .filter(|m| blocks.get(*m).is_some_and(|b| b.3 == pool))
                .filter(|m| !retiring.contains(*m))
                .count()
        };
        assert_eq!(
            stopped(None),
            0,
            "{}: a default pool's block stopped",
            self.ctx()
        );
        let listed_pools: HashSet<Pool> = (listed.iter())
            .filter_map(|l| self.live[l.live?].pool)
            .collect();
        for p in &self.pools {
            let held = blocks.values().filter(|b| b.3 == Some(p.pool)).count();
            let was_retiring = (self.retiring.iter())
                .filter(|m| blocks.get(*m).is_some_and(|b| b.3 == Some(p.pool)))
                .count();
            let past = if p.min_blocks > 0 && listed_pools.contains(&p.pool) {
                was_retiring.saturating_sub(held.saturating_sub(p.min_blocks as usize))
            } else {
                0
            };
            // None when the plan took none of the pool's listed
            // allocations up (all dedicated, say).
            let stopped = stopped(Some(p.pool));
            assert!(
                stopped == past || stopped == 0,
                "{}: pool {:?} ({held} blocks, min_blocks {}, {was_retiring} retiring) stopped emptying {stopped}, not {past}",
                self.ctx(),
                p.pool,
                p.min_blocks
            );
        }
        self.retiring.retain(|m| retiring.contains(m));
    }

    /// A random subset of the live allocations, each with the requirements
    /// and kind it was allocated with: every one, most, or about half. Now
    /// and then one's requirements exclude its memory type (its resource
    /// could not go back there), and a few are listed twice.
    fn draw_listing(&mut self) -> Vec<Listed> {
        let skip = [0, 8, 2][self.rng.below(3) as usize];
        let mut listed = Vec::new();
        for (i, live) in self.live.iter().enumerate() {
            if skip != 0 && self.rng.below(skip) == 0 {
                continue;
            }
            let mut requirements = live.requirements;
            if self.rng.below(40) == 0 {
                requirements.memory_type_bits &= !(1 << live.allocation.memory_type());
            }
            listed.push(Listed {
                live: Some(i),
                requirements,
                kind: live.kind,
            });
        }
        for _ in 0..self.rng.below(3) {
            if listed.is_empty() {
                break;
            }
            let again = listed[self.rng.below(listed.len() as u64) as usize];
            listed.push(again);
        }
        listed
    }

    /// `listed` as the movables `plan_defragmentation` takes.
    fn movables(&self, listed: &[Listed]) -> Vec<Movable<'_>> {
        listed
            .iter()
            .map(|l| {
                let allocation = match l.live {
                    Some(i) => &self.live[i].allocation,
                    None => &self.foreign.allocation,
                };
                Movable::new(allocation, l.requirements, l.kind)
            })
            .collect()
    }

    /// Carries `plan` out as an engine does: each destination takes its
    /// source's tagged bytes, a new resource and the source's place; the
    /// source and its resource are freed now or after the frame. One move
    /// in sixteen is given up: its destination is freed (now, or with
    /// `give_up_move`, after the frame, ending its block's retirement), its
    /// source stays.
    fn carry_out(
        &mut self,
        listed: &[Listed],
        plan: DefragmentationPlan,
        sources: &HashSet<vk::DeviceMemory>,
        emptied: &HashSet<vk::DeviceMemory>,
        blocks: &Blocks,
    ) {
        let mut all_freed_now = true;
        // Blocks whose retirement a `give_up_move` ended.
        let mut reopened = HashSet::new();
        for planned in plan.moves {
            let entry = &listed[planned.movable];
            self.check_destination(entry, &planned.destination, sources, blocks);
            if self.rng.below(16) == 0 {
                self.defragmented.given_up += 1;
                all_freed_now = false;
                if self.rng.below(2) == 0 {
                    // SAFETY: the fake device runs no GPU work.
                    let result = unsafe { self.allocator.free(planned.destination) };
                    assert_eq!(result, Ok(()), "{}: a move given up", self.ctx());
                } else {
                    // The destination waits for the frame; the source's
                    // block is no longer being emptied.
                    let d = &planned.destination;
                    let counted = Counted {
                        memory_type: d.memory_type(),
                        size: d.size(),
                        dedicated: false,
                        place: Some(Place {
                            memory: d.memory(),
                            offset: d.offset(),
                            kind: entry.kind,
                        }),
                        deferred: false,
                        pool: self.live[entry.live.unwrap_or_default()].pool,
                    };
                    let i = entry.live.unwrap_or_default();
                    reopened.insert(self.live[i].allocation.memory());
                    let result = self.allocator.give_up_move(planned);
                    assert_eq!(result, Ok(()), "{}: give_up_move", self.ctx());
                    self.defer(counted);
                }
                continue;
            }
            let mut destination = planned.destination;
            let i = entry.live.unwrap_or_default();
            self.pooled.moved += u64::from(destination.is_in_custom_pool());
            self.copy_tag(i, &mut destination);
            let live = &mut self.live[i];
            let allocation = std::mem::replace(&mut live.allocation, destination);
            let resource = live.resource.map(|_| self.device.create_resource());
            let resource = std::mem::replace(&mut live.resource, resource);
            let source = Live {
                allocation,
                resource,
                ..*live
            };
            if self.rng.below(2) == 0 {
                self.free_now(source);
            } else {
                self.free_after_frame(source);
                all_freed_now = false;
            }
        }
        // Earlier plans' blocks are checked against later destinations
        // until they empty (`forget_emptied_blocks`).
        // A block an earlier plan was emptying too stops with the give-up.
        self.retiring.extend(sources);
        self.retiring.retain(|m| !reopened.contains(m));
        // A block the plan emptied holds at most frees queued for their
        // frame (from before the plan, or its moves' sources): those the
        // model places there, and perhaps ring chunks whose place the
        // model does not know.
        if all_freed_now {
            let ctx = self.ctx();
            let map = self.allocator.memory_map();
            let unplaced = self
                .counted()
                .filter(|c| c.deferred && c.place.is_none())
                .count();
            for (block, _) in self.all_blocks(&map) {
                if !emptied.contains(&block.memory) {
                    continue;
                }
                let queued = self
                    .counted()
                    .filter(|c| c.deferred && c.place.is_some_and(|p| p.memory == block.memory))
                    .count();
                let held = block.allocations().count();
                assert!(
                    (queued..=queued + unplaced).contains(&held),
                    "{ctx}: block {} did not empty: {held} allocations, {queued} queued frees there, {unplaced} unplaced",
                    block.id,
                );
            }
        }
    }

    /// Copies the bytes the walk tagged at both ends of host-visible live
    /// allocation `i` into `destination`, and flushes them.
    fn copy_tag(&self, i: usize, destination: &mut Allocation) {
        let ctx = self.ctx();
        let Some(tag) = self.live[i].tag else { return };
        let source = self.allocator.mapped_slice(&self.live[i].allocation);
        let source = source.unwrap_or_else(|e| panic!("{ctx}: {e:?}"));
        let ends = (source[0], source[source.len() - 1]);
        assert_eq!(ends, (tag, tag), "{ctx}: source bytes clobbered");
        let bytes = self.allocator.mapped_slice_mut(destination);
        let bytes = bytes.unwrap_or_else(|e| panic!("{ctx}: {e:?}"));
        let last = bytes.len() - 1;
        (bytes[0], bytes[last]) = ends;
        let size = destination.size();
        assert_eq!(self.allocator.flush(destination, 0..size), Ok(()), "{ctx}");
    }

    /// `listed` with one or two bad movables put in: refused with the error
    /// of the first bad one, changing no figure of `stats()`.
    fn plan_refused(&mut self, mut listed: Vec<Listed>) {
        for _ in 0..1 + self.rng.below(2) {
            let bad = self.draw_bad_movable();
            let at = self.rng.below(listed.len() as u64 + 1) as usize;
            listed.insert(at, bad);
        }
        let ctx = self.ctx();
        let expected = listed.iter().find_map(Listed::refusal);
        let before = self.allocator.stats();
        let result = self
            .allocator
            .plan_defragmentation(&self.movables(&listed), &DefragmentationLimits::default());
        match result {
            Err(error) => assert_eq!(Some(error), expected, "{ctx}: {listed:?}"),
            Ok(plan) => panic!("{ctx}: {listed:?} planned {plan:?}"),
        }
        assert_eq!(self.allocator.stats(), before, "{ctx}: a refused plan");
    }

    /// A movable with one flaw or two: the foreign allocation, a zero size,
    /// an alignment not a power of two.
    fn draw_bad_movable(&mut self) -> Listed {
        let mut bad = match self.live.len() as u64 {
            0 => Listed {
                live: None,
                requirements: self.foreign.requirements,
                kind: ResourceKind::Buffer,
            },
            n => {
                let i = self.rng.below(n) as usize;
                Listed {
                    live: Some(i),
                    requirements: self.live[i].requirements,
                    kind: self.live[i].kind,
                }
            }
        };
        for _ in 0..1 + u64::from(self.rng.below(4) == 0) {
            match self.rng.below(3) {
                0 => bad.live = None,
                1 => bad.requirements.size = 0,
                _ => {
                    let alignments = [0, 3, 48, 1000, 3 << 12];
                    bad.requirements.alignment = alignments[self.rng.below(5) as usize];
                }
            }
        }
        bad
    }

    /// Forgets the blocks of earlier plans that no longer hold anything
    /// counted: they emptied, which ends their retirement. A ring chunk
    /// whose place the walk does not know may have taken a retiring block
    /// since (they come last for new requests, but take them): the memory
    /// map, read only then, tells.
    pub(super) fn forget_emptied_blocks(&mut self) {
        if self.retiring.is_empty() {
            return;
        }
        let held: HashSet<vk::DeviceMemory> = self
            .counted()
            .filter_map(|c| c.place.map(|p| p.memory))
            .collect();
        if self.retiring.iter().all(|m| held.contains(m)) {
            return;
        }
        let map = self.allocator.memory_map();
        let in_use: HashSet<vk::DeviceMemory> = self
            .all_blocks(&map)
            .iter()
            .filter(|(b, _)| b.allocations().next().is_some())
            .map(|(b, _)| b.memory)
            .collect();
        self.retiring
            .retain(|m| held.contains(m) || in_use.contains(m));
    }
}
