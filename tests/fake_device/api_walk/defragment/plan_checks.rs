//! The walk's checks of a defragmentation plan: against its list, its
//! limits and the blocks before it, and each destination against its source.

use std::collections::{HashMap, HashSet};

use ash::vk;
use vk_suballoc::{Allocation, DefragmentationLimits, DefragmentationPlan};

use super::super::{is_host_visible, Place, Walk};
use super::{Blocks, Listed};

impl Walk {
    /// Checks `plan` against its list, limits and the blocks before it:
    /// each allocation moved once, out of a type its requirements allow,
    /// never out of dedicated memory; within the limits; the blocks it
    /// empties held nothing but the moved allocations and queued frees,
    /// those it empties in part (`split_blocks`) nothing but listed
    /// allocations and queued frees, and its figures are theirs; a move
    /// within its block (`compact_blocks`) lands wholly below its source,
    /// in a block no plan is emptying. Returns the blocks moves to other
    /// blocks leave, and of those the ones they empty.
    pub(super) fn check_plan(
        &self,
        listed: &[Listed],
        limits: &DefragmentationLimits,
        plan: &DefragmentationPlan,
        blocks: &Blocks,
    ) -> (HashSet<vk::DeviceMemory>, HashSet<vk::DeviceMemory>) {
        let ctx = self.ctx();
        let mut moved = HashSet::new();
        let mut sources = HashSet::new();
        let mut compacted = HashSet::new();
        let mut bytes = 0;
        for pair in plan.moves.windows(2) {
            assert!(
                pair[0].movable < pair[1].movable,
                "{ctx}: moves out of order"
            );
        }
        for planned in &plan.moves {
            let entry = listed.get(planned.movable);
            let entry = entry.unwrap_or_else(|| panic!("{ctx}: movable {}", planned.movable));
            let i = entry
                .live
                .unwrap_or_else(|| panic!("{ctx}: the foreign allocation moves"));
            assert!(moved.insert(i), "{ctx}: live {i} moves twice");
            let source = &self.live[i].allocation;
            let bits = entry.requirements.memory_type_bits;
            assert!(
                bits & (1 << source.memory_type()) != 0,
                "{ctx}: {source:?} moves, yet {bits:#x} excludes its type"
            );
            assert!(!source.is_dedicated(), "{ctx}: {source:?} moves");
            bytes += source.size();
            let d = &planned.destination;
            if d.memory() == source.memory() {
                // Compaction: lower in the same block, clear of the source.
                assert!(
                    limits.compact_blocks,
                    "{ctx}: {source:?} moves within its block"
                );
                assert!(
                    d.offset() + d.size() <= source.offset(),
                    "{ctx}: {d:?} not wholly below {source:?}"
                );
                compacted.insert(source.memory());
            } else {
                sources.insert(source.memory());
            }
        }
        assert_eq!(
            plan.blocks_compacted,
            compacted.len(),
            "{ctx}: the blocks compacted"
        );
        assert!(
            compacted.is_disjoint(&sources),
            "{ctx}: a block both emptied and compacted"
        );
        assert!(
            compacted.is_disjoint(&self.retiring),
            "{ctx}: a block being emptied compacted"
        );
        assert!(plan.moves.len() <= limits.max_moves, "{ctx}: {limits:?}");
        assert!(
            bytes <= limits.max_bytes,
            "{ctx}: {bytes} bytes, {limits:?}"
        );
        assert_eq!(plan.bytes_moved, bytes, "{ctx}: the bytes moved");
        if (limits.max_moves, limits.max_bytes) == (usize::MAX, u64::MAX) {
            assert_eq!(plan.blocks_over_limits, 0, "{ctx}: no limit, yet over it");
        }
        // A block some moves leave is emptied, or (splitting) started: the
        // allocations that stay there are all listed.
        let listed_live: HashSet<usize> = listed.iter().filter_map(|l| l.live).collect();
        let mut started = HashSet::new();
        for (i, live) in self.live.iter().enumerate() {
            let a = &live.allocation;
            if sources.contains(&a.memory()) && !moved.contains(&i) {
                assert!(
                    limits.split_blocks && listed_live.contains(&i),
                    "{ctx}: {a:?} stays in a block the plan empties"
                );
                started.insert(a.memory());
            }
        }
        let emptied: HashSet<vk::DeviceMemory> = sources.difference(&started).copied().collect();
        // Frees queued for their frame need no move (they empty the block
        // when released); anything else in a source block is a live
        // allocation of the walk's, moved or (started) listed.
        let in_sources = self
            .counted()
            .filter(|c| !c.deferred && c.place.is_some_and(|p| sources.contains(&p.memory)))
            .count();
        let in_a_source = |i: &usize| sources.contains(&self.live[*i].allocation.memory());
        let staying = (0..self.live.len())
            .filter(|i| !moved.contains(i) && in_a_source(i))
            .count();
        let leaving = moved.iter().filter(|i| in_a_source(i)).count();
        assert_eq!(
            in_sources,
            leaving + staying,
            "{ctx}: a ring chunk in a block the plan empties"
        );
        // The map shows a run's free slots as free, so its bytes in use are
        // at most the pool's: within the limit whenever the pool's are.
        // Queued frees count as gone, as the plan counts them.
        // Each queued free counts with the bytes it holds in its block (the
        // map's range: margin and padding included), as the plan counts it.
        let map = self.allocator.memory_map();
        let held: HashMap<(vk::DeviceMemory, u64), u64> = self
            .all_blocks(&map)
            .iter()
            .flat_map(|&(b, _)| b.allocations().map(move |r| ((b.memory, r.offset), r.size)))
            .collect();
        // The percent chooses the blocks a plan starts: one a split plan
        // started (retiring) goes on whatever its use.
        let percent = u64::from(limits.max_used_percent.min(100));
        for m in sources.iter().filter(|m| !self.retiring.contains(*m)) {
            let (size, _, used, _) = blocks[m];
            // (A queued ring chunk whose place the model does not know may
            // be there too.)
            let queued: u64 = self
                .counted()
                .filter(|c| c.deferred && c.place.map_or(true, |p| p.memory == *m))
                .map(|c| match c.place {
                    Some(p) => held.get(&(p.memory, p.offset)).copied().unwrap_or(c.size),
                    None => c.size,
                })
                .sum();
            let used = used.saturating_sub(queued);
            assert!(
                used * 100 <= size * percent,
                "{ctx}: a block {used} of {size} bytes in use is emptied, {limits:?}"
            );
        }
        let emptied_bytes: u64 = emptied.iter().map(|m| blocks[m].0).sum();
        assert_eq!(
            (
                plan.blocks_released,
                plan.bytes_released,
                plan.blocks_started
            ),
            (emptied.len(), emptied_bytes, started.len()),
            "{ctx}: the blocks the plan empties, and starts to"
        );
        // A custom pool keeps its min_blocks: a plan starts emptying no more
        // of its blocks than it holds above them, besides those retiring
        // already, which it may go on emptying (and which may be more than
        // that: `trim`, or an emptied block released, may have taken the
        // pool down to min_blocks since; a retiring block then stays when
        // it empties).
        for p in &self.pools {
            let of_pool =
                |m: &&vk::DeviceMemory| blocks.get(*m).is_some_and(|b| b.3 == Some(p.pool));
            let held = blocks.values().filter(|b| b.3 == Some(p.pool)).count();
            let retiring = self.retiring.iter().filter(of_pool).count();
            let emptied = sources
                .iter()
                .filter(of_pool)
                .filter(|m| !self.retiring.contains(*m))
                .count();
            assert!(
                emptied <= held.saturating_sub(retiring + p.min_blocks as usize),
                "{ctx}: a plan empties {emptied} of the {held} blocks of pool {:?} ({retiring} retiring already), min_blocks {}",
                p.pool,
                p.min_blocks
            );
        }
        (sources, emptied)
    }

    /// Checks a destination of the allocation `entry` lists: in its memory
    /// type, of its requirements' size and alignment, not dedicated, in a
    /// block that held something and that neither this plan nor an earlier
    /// one is emptying, mapped when host-visible, clear of everything
    /// counted (ranges freed after a frame not collected yet included).
    pub(super) fn check_destination(
        &self,
        entry: &Listed,
        destination: &Allocation,
        sources: &HashSet<vk::DeviceMemory>,
        blocks: &Blocks,
    ) {
        let ctx = self.ctx();
        let i = entry.live.unwrap_or_default();
        let source = &self.live[i].allocation;
        let d = destination;
        assert_eq!(d.memory_type(), source.memory_type(), "{ctx}: {d:?}");
        assert_eq!(d.size(), entry.requirements.size, "{ctx}: {d:?}");
        assert!(!d.is_dedicated(), "{ctx}: {d:?}");
        let what = format!("destination of {source:?}");
        let pool = self.live[i].pool;
        let alignment = entry
            .requirements
            .alignment
            .max(self.pool_min_alignment(pool));
        self.check_placement(d, alignment, entry.kind, &what);
        assert!(
            !sources.contains(&d.memory()),
            "{ctx}: {d:?} in a block the plan empties"
        );
        assert!(
            !self.retiring.contains(&d.memory()),
            "{ctx}: {d:?} in a block an earlier plan is emptying"
        );
        assert_eq!(
            blocks.get(&d.memory()).map(|b| b.1),
            Some(true),
            "{ctx}: {d:?} not in a block that held something"
        );
        // A pool's allocation moves within its pool, a default pool's
        // within its default pool.
        let pool = self.live[i].pool;
        assert_eq!(d.is_in_custom_pool(), pool.is_some(), "{ctx}: {d:?}");
        assert_eq!(
            blocks.get(&d.memory()).map(|b| b.3),
            Some(pool),
            "{ctx}: {d:?} for {source:?} not in a block of its pool"
        );
        let props = self.layout.memory_types[d.memory_type() as usize].props;
        // Mapped where the allocation it replaces is (not so in
        // host-visible memory with `Config::strict_host_access`).
        let mapped = self.live[i].allocation.mapped_ptr().is_some();
        assert_eq!(d.mapped_ptr().is_some(), mapped, "{ctx}");
        assert!(!mapped || is_host_visible(props), "{ctx}");
        assert!(self.allocator.owns(d), "{ctx}: {d:?}");
        let place = Place {
            memory: d.memory(),
            offset: d.offset(),
            kind: entry.kind,
        };
        self.assert_disjoint(place, d.size(), "a destination");
        self.check_new_fill(d, self.layout.memory_types[d.memory_type() as usize].props);
    }
}
