//! The figures the allocator reports of its memory, beyond the tally of
//! allocations that [`Walk::check`] compares: `stats()`'s blocks, empty
//! and retiring blocks and heaps, `pool_stats()`'s, and the memory map's
//! figures of types, custom pools, blocks and heaps, checked against one
//! another, the fake device's memory objects and the model's pools.

use super::*;
use vk_suballoc::device::fake::FakeAllocationInfo;
use vk_suballoc::report::{BlockMap, MemoryMap, PoolMap, Stats, TypeStats};

/// What identifies a custom pool in the memory map: its description and
/// its figures (as `pool_stats` gives them), which the map must show for
/// the pool the model made (`PoolMap` carries no handle).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(super) struct PoolKey {
    memory_type: u32,
    heap: u32,
    name: Option<String>,
    block_size: Option<u64>,
    preferred_block_size: u64,
    min_blocks: u32,
    max_blocks: Option<u32>,
    export: u32,
    /// Blocks, their bytes, the empty and the retiring ones, dedicated
    /// allocations.
    figures: [u64; 5],
}

/// A pool's (or a type's) blocks, their bytes, the empty ones (no
/// allocation shown) and the retiring ones, in the map.
fn block_figures<'a>(blocks: impl Iterator<Item = &'a BlockMap>) -> [u64; 4] {
    let mut f = [0; 4];
    for b in blocks {
        f[0] += 1;
        f[1] += b.size;
        f[2] += u64::from(b.allocations().next().is_none());
        f[3] += u64::from(b.retiring);
    }
    f
}

fn stats_figures(s: &TypeStats) -> [u64; 5] {
    [
        s.blocks,
        s.block_bytes,
        s.empty_blocks,
        s.retiring_blocks,
        s.dedicated_allocations,
    ]
}

impl Walk {
    /// The preferred block size of memory type `t`'s default pool: its
    /// heap's (as limited) ladder top.
    fn preferred_block_size(&self, t: u32) -> u64 {
        let heap = self.layout.memory_types[t as usize].heap;
        let size = self.layout.memory_heaps[heap as usize].size;
        ladder(size, &self.config, self.layout.max_memory_allocation_size).0
    }

    /// `stats()` beyond the tally of allocations: each type's index and
    /// heap; its blocks and their bytes with its dedicated memory are the
    /// device's memory objects of that type (a dedicated allocation's
    /// memory is its size, as `memory_size` says); empty and retiring
    /// blocks are blocks, a retiring one holds an allocation (it is
    /// released when its last one is freed, but a pool's kept at its
    /// `min_blocks`, no longer retiring), each other block too; each heap
    /// the sum of its types, of its (limited) size, with the budget
    /// `budgets` reports.
    pub(super) fn check_stats_figures(&self, stats: &Stats, live: &[FakeAllocationInfo]) {
        let types = self.layout.memory_types.len();
        assert_eq!(stats.memory_types.len(), types);
        let mut device = vec![(0u64, 0u64); types];
        for m in live {
            let d = &mut device[m.memory_type as usize];
            (d.0, d.1) = (d.0 + 1, d.1 + m.size);
        }
        for (t, s) in stats.memory_types.iter().enumerate() {
            assert_eq!(s.memory_type, t as u32, "{s:?}");
            assert_eq!(s.heap, self.layout.memory_types[t].heap, "{s:?}");
            let objects = (
                s.blocks + s.dedicated_allocations,
                s.block_bytes + s.dedicated_bytes,
            );
            assert_eq!(objects, device[t], "type {t}'s memory objects: {s:?}");
            check_block_counts(s, "type");
        }
        assert_eq!(stats.heaps.len(), self.layout.memory_heaps.len());
        let budgets = self.expected_budgets(&self.own_usage());
        for (h, hs) in stats.heaps.iter().enumerate() {
            let mine = stats.memory_types.iter().filter(|s| s.heap == h as u32);
            let sums = mine.fold((0, 0, 0), |(r, l, a), s| {
                (
                    r + s.reserved_bytes(),
                    l + s.live_bytes(),
                    a + s.allocations(),
                )
            });
            assert_eq!(
                (
                    hs.heap,
                    hs.size,
                    hs.reserved_bytes,
                    hs.live_bytes,
                    hs.allocations
                ),
                (
                    h as u32,
                    self.layout.memory_heaps[h].size,
                    sums.0,
                    sums.1,
                    sums.2
                ),
                "heap {h}: {hs:?}"
            );
            assert_eq!(hs.budget, budgets[h], "heap {h}'s budget in the stats");
        }
    }

    /// `pool_stats(p)` beyond the tally of allocations: its type and heap,
    /// at most `max_blocks` blocks, fixed-size blocks all of `block_size`
    /// bytes, the block counts' order (as for a type), and the pools of a
    /// type never more, figure by figure, than the type's `stats()`.
    pub(super) fn check_pool_figures(&self, p: &LivePool, s: &TypeStats, of_type: &mut TypeStats) {
        let heap = self.layout.memory_types[p.memory_type as usize].heap;
        assert_eq!((s.memory_type, s.heap), (p.memory_type, heap), "{s:?}");
        if let Some(max) = p.max_blocks {
            assert!(s.blocks <= u64::from(max), "{s:?} past max_blocks {max}");
        }
        if p.block_size != 0 {
            assert_eq!(
                s.block_bytes,
                s.blocks * p.block_size,
                "fixed blocks: {s:?}"
            );
        }
        check_block_counts(s, "pool");
        let less = |a: u64, b: &mut u64| {
            *b = b.checked_sub(a).expect("a pool's figure past its type's");
        };
        less(s.blocks, &mut of_type.blocks);
        less(s.block_bytes, &mut of_type.block_bytes);
        less(s.empty_blocks, &mut of_type.empty_blocks);
        less(s.retiring_blocks, &mut of_type.retiring_blocks);
        less(s.block_allocations, &mut of_type.block_allocations);
        less(s.dedicated_allocations, &mut of_type.dedicated_allocations);
    }

    /// The key the memory map must show for live pool `p`.
    pub(super) fn pool_key(&self, p: &LivePool) -> PoolKey {
        let s = self.allocator.pool_stats(&p.pool).unwrap();
        let fixed = (p.block_size != 0).then_some(p.block_size);
        PoolKey {
            memory_type: p.memory_type,
            heap: self.layout.memory_types[p.memory_type as usize].heap,
            // Named pools are the ones with a `min_alignment`.
            name: (p.min_alignment != 0).then(|| "fuzz-pool".to_owned()),
            block_size: fixed,
            preferred_block_size: fixed.unwrap_or(self.preferred_block_size(p.memory_type)),
            min_blocks: p.min_blocks,
            max_blocks: p.max_blocks,
            export: p.export.as_raw(),
            figures: stats_figures(&s),
        }
    }

    /// The key the memory map shows for a pool.
    pub(super) fn shown_pool_key(&self, pool: &PoolMap) -> PoolKey {
        let b = block_figures(pool.blocks.iter());
        PoolKey {
            memory_type: pool.memory_type,
            heap: pool.heap,
            name: pool.name.clone(),
            block_size: pool.block_size,
            preferred_block_size: pool.preferred_block_size,
            min_blocks: pool.min_blocks,
            max_blocks: pool.max_blocks,
            export: pool.export_handle_types.as_raw(),
            figures: [b[0], b[1], b[2], b[3], pool.dedicated.len() as u64],
        }
    }

    /// The memory map's figures: the device's limits; each type's index,
    /// heap, flags and preferred block size, its blocks (custom pools'
    /// included) with their bytes, empty and retiring ones, and its
    /// dedicated allocations, as `stats` counts them; each block and
    /// dedicated memory mapped exactly when its type is host-visible (and
    /// so on the device); each pool's blocks numbered oldest first; a
    /// retiring block holds an allocation; its custom pools exactly the
    /// model's, each with its description and `pool_stats`' figures
    /// (`keys`: each map pool's key, in the map's order); each heap's
    /// index, size, device-local flag and the stats' budget.
    pub(super) fn check_map_figures(&self, map: &MemoryMap, stats: &Stats, keys: &[PoolKey]) {
        let device = self.device.layout();
        assert_eq!(
            (
                map.buffer_image_granularity,
                map.non_coherent_atom_size,
                map.max_memory_allocation_count
            ),
            (
                device.buffer_image_granularity,
                device.non_coherent_atom_size,
                device.max_memory_allocation_count
            ),
            "the map's limits"
        );
        let mapped: HashMap<vk::DeviceMemory, bool> = (self.device.live_allocations().iter())
            .map(|m| (m.memory, m.mapped))
            .collect();
        assert_eq!(map.memory_types.len(), self.layout.memory_types.len());
        for (t, tm) in map.memory_types.iter().enumerate() {
            let ty = self.layout.memory_types[t];
            let amd = self.layout.amd_device_coherent_types & (1 << t) != 0;
            assert_eq!(
                (tm.memory_type, tm.heap, tm.props, tm.amd_device_coherent),
                (t as u32, ty.heap, ty.props, amd),
                "type {t} in the map"
            );
            assert_eq!(
                tm.preferred_block_size,
                self.preferred_block_size(t as u32),
                "type {t}'s preferred block size"
            );
            let host_visible = ty.props.contains(Props::HOST_VISIBLE);
            let pools = tm.custom_pools.iter();
            let blocks = tm
                .blocks
                .iter()
                .chain(pools.clone().flat_map(|p| &p.blocks));
            for b in blocks.clone() {
                assert_eq!(b.mapped, host_visible, "type {t}'s block {}", b.id);
                assert_eq!(mapped.get(&b.memory), Some(&b.mapped), "{:?}", b.memory);
                let holds = b.allocations().next().is_some();
                assert!(holds || !b.retiring, "an empty retiring block: {b:?}");
            }
            let dedicated = tm
                .dedicated
                .iter()
                .chain(pools.clone().flat_map(|p| &p.dedicated));
            for d in dedicated.clone() {
                assert_eq!(d.mapped, host_visible, "type {t}'s dedicated {d:?}");
                assert_eq!(mapped.get(&d.memory), Some(&d.mapped), "{:?}", d.memory);
            }
            let ids = |blocks: &[BlockMap]| {
                let ids: Vec<u32> = blocks.iter().map(|b| b.id).collect();
                assert!(ids.windows(2).all(|w| w[0] < w[1]), "block ids {ids:?}");
            };
            ids(&tm.blocks);
            pools.clone().for_each(|p| ids(&p.blocks));
            let b = block_figures(blocks);
            let shown = [b[0], b[1], b[2], b[3], dedicated.count() as u64];
            let s = &stats.memory_types[t];
            assert_eq!(shown, stats_figures(s), "type {t} in the map: {s:?}");
        }
        let mut want: Vec<PoolKey> = self.pools.iter().map(|p| self.pool_key(p)).collect();
        let mut shown = keys.to_vec();
        want.sort_unstable();
        shown.sort_unstable();
        assert_eq!(shown, want, "the map's custom pools");
        assert_eq!(map.heaps.len(), self.layout.memory_heaps.len());
        for (h, hm) in map.heaps.iter().enumerate() {
            let device_local = (self.layout.memory_types.iter())
                .any(|ty| ty.heap as usize == h && ty.props.contains(Props::DEVICE_LOCAL));
            let want = (h as u32, self.layout.memory_heaps[h].size, device_local);
            assert_eq!((hm.heap, hm.size, hm.device_local), want, "heap {h}");
            assert_eq!(
                hm.budget, stats.heaps[h].budget,
                "heap {h}'s budget in the map"
            );
        }
    }
}

/// A type's or a pool's block counts: the empty and the retiring blocks
/// are blocks (a retiring one is never empty), and every other block holds
/// at least one allocation, a retiring one too.
fn check_block_counts(s: &TypeStats, what: &str) {
    assert!(
        s.empty_blocks + s.retiring_blocks <= s.blocks,
        "{what} {s:?}"
    );
    assert!(
        s.blocks - s.empty_blocks <= s.block_allocations,
        "{what} {s:?}: a block in use holds no allocation"
    );
}
