//! The walk's custom pools: made with random descriptions on random memory
//! types (some invalid), named by some requests, destroyed while they hold
//! allocations (or frees waiting for their frame) and once they hold none;
//! stale and foreign handles; the checks of each pool's figures against
//! the model. What a request naming a pool may get is `pool_requests`.

use ash::vk;
use gpu_alloc_types::MemoryPropertyFlags;
use vk_suballoc::report::{BlockMap, MemoryMap, PoolMap, Stats, TypeStats};
use vk_suballoc::{Error, Pool, PoolDesc};

use super::allocations::unchanged_but_released_empty_blocks;
use super::{Fired, Walk};

/// Pools alive at once, at most.
const MAX_POOLS: usize = 4;

/// A live custom pool of the walk and the description it was made with.
pub(super) struct WalkPool {
    pub(super) pool: Pool,
    /// Its fixed block size; `None`: blocks grow as the default pools' do.
    pub(super) block_size: Option<u64>,
    pub(super) min_blocks: u32,
    pub(super) max_blocks: Option<u32>,
    pub(super) name: Option<String>,
    /// Its `min_alignment`: every allocation's offset is a multiple, its
    /// defragmentation destinations' too.
    pub(super) min_alignment: u64,
}

impl WalkPool {
    pub(super) fn memory_type(&self) -> u32 {
        self.pool.memory_type()
    }
}

/// What the walk's pools went through, printed at its end: how much of the
/// pools' paths a seed reached.
#[derive(Debug, Default)]
pub(super) struct Pooled {
    made: u64,
    invalid: u64,
    not_made: u64,
    destroyed: u64,
    not_empty: u64,
    pub(super) allocations: u64,
    pub(super) moved: u64,
    pub(super) refused: u64,
    pub(super) full: u64,
    pub(super) too_large: u64,
}

/// A description drawn for `create_pool`, its name owned.
struct Drawn {
    memory_type: u32,
    block_size: u64,
    min_blocks: u32,
    max_blocks: Option<u32>,
    name: Option<String>,
    priority: Option<f32>,
}

impl Walk {
    /// The live pool `pool` names, if it is one.
    pub(super) fn live_pool(&self, pool: Pool) -> Option<&WalkPool> {
        self.pools.iter().find(|p| p.pool == pool)
    }

    /// A pool operation: make one, destroy one, or try a stale or foreign
    /// handle.
    pub(super) fn pool_op(&mut self) {
        match self.rng.below(10) {
            0..=3 => self.create_pool(),
            4..=7 => self.destroy_pool(),
            _ => self.refuse_pool_handle(),
        }
    }

    /// A description: a random memory type (one out of range or unusable
    /// at times), growing or fixed blocks (larger than the heap or
    /// `maxMemoryAllocationSize` at times), `min_blocks` at times,
    /// `max_blocks` (0 or below `min_blocks` at times), a name and a memory
    /// priority (out of range or NaN at times, which are clamped) at times.
    fn draw_pool_desc(&mut self) -> Drawn {
        let types = self.layout.memory_types.len() as u32;
        let memory_type = match self.rng.below(24) {
            0 => types,
            1 => [32, u32::MAX][self.rng.below(2) as usize],
            _ => self.rng.below(u64::from(types)) as u32,
        };
        let heap = self
            .layout
            .memory_types
            .get(memory_type as usize)
            .map_or(u64::MAX, |ty| {
                self.layout.memory_heaps[ty.heap as usize].size
            });
        let block_size = match self.rng.below(12) {
            0..=3 => 0,
            4 => heap
                .min(self.layout.max_memory_allocation_size)
                .saturating_add(1),
            // Half of them a little short of a multiple of 256 KiB: no
            // alignment or page divides them, so requests that fill a block
            // pass its end once rounded.
            5 => {
                let size = (1 + self.rng.below(16)) * (256 << 10);
                size - self.rng.below(2) * (1 + self.rng.below(4095))
            }
            _ => 1 << (16 + self.rng.below(9)),
        };
        let min_blocks = if self.rng.below(3) == 0 {
            1 + self.rng.below(3) as u32
        } else {
            0
        };
        let max_blocks = match self.rng.below(12) {
            0..=3 => None,
            4 => Some(0),
            5 => Some(min_blocks.saturating_sub(1)),
            _ => Some(min_blocks.max(1) + self.rng.below(4) as u32),
        };
        self.pools_made += 1;
        let name = (self.rng.below(3) != 0).then(|| format!("walk-pool-{}", self.pools_made));
        let priority = (self.rng.below(4) == 0)
            .then(|| [f32::NAN, -1.0, 0.25, 2.0][self.rng.below(4) as usize]);
        Drawn {
            memory_type,
            block_size,
            min_blocks,
            max_blocks,
            name,
            priority,
        }
    }

    /// Whether `drawn` is invalid: the text of the `InvalidConfig`
    /// `create_pool` must refuse it with, the first rule it breaks in
    /// `create_pool`'s order (the text names the rule, so another rule's
    /// refusal is a wrong answer).
    fn invalid(&self, drawn: &Drawn) -> Option<&'static str> {
        let t = drawn.memory_type;
        let types = self.layout.memory_types.len() as u32;
        if t >= types.min(32) || self.usable_types() & (1 << t) == 0 {
            return Some("PoolDesc::memory_type is not a memory type this allocator uses");
        }
        let ty = &self.layout.memory_types[t as usize];
        let heap = self.layout.memory_heaps[ty.heap as usize].size;
        // A lazily allocated type's requests all take dedicated memory.
        let lazy = ty.props.contains(MemoryPropertyFlags::LAZILY_ALLOCATED);
        let max_blocks = drawn.max_blocks.map_or(u64::MAX, u64::from);
        if drawn.block_size > heap.min(self.layout.max_memory_allocation_size) {
            Some("PoolDesc::block_size exceeds the heap or maxMemoryAllocationSize")
        } else if lazy && (drawn.min_blocks > 0 || drawn.block_size != 0) {
            Some("PoolDesc::min_blocks and block_size must be 0 for a lazily allocated memory type")
        } else if max_blocks == 0 || max_blocks < u64::from(drawn.min_blocks) {
            Some("PoolDesc::max_blocks must be at least 1 and at least min_blocks")
        } else {
            None
        }
    }

    /// The `min_alignment` of the walk's pool `pool` (0 for none, or for a
    /// default pool's allocation).
    pub(super) fn pool_min_alignment(&self, pool: Option<Pool>) -> u64 {
        self.pools
            .iter()
            .find(|p| Some(p.pool) == pool)
            .map_or(0, |p| p.min_alignment)
    }

    /// `create_pool` with a random description: an invalid one is refused
    /// with `InvalidConfig` and calls no device; a valid one makes its
    /// `min_blocks` blocks at once, or fails for want of memory or memory
    /// objects (never while its heap has room for them) and leaves nothing.
    fn create_pool(&mut self) {
        if self.pools.len() >= MAX_POOLS {
            return self.destroy_pool();
        }
        let drawn = self.draw_pool_desc();
        let desc = PoolDesc {
            memory_type: drawn.memory_type,
            block_size: drawn.block_size,
            min_blocks: drawn.min_blocks,
            max_blocks: drawn.max_blocks,
            name: drawn.name.as_deref(),
            priority: drawn.priority,
            // Pools with a priority export too: exporting changes only what
            // their memory objects are allocated with (no draw, so the
            // walks' seeds replay as before).
            export_handle_types: match drawn.priority {
                Some(_) => vk::ExternalMemoryHandleTypeFlags::OPAQUE_FD,
                None => vk::ExternalMemoryHandleTypeFlags::empty(),
            },
            // Named pools align every allocation to 1 KiB (no draw either).
            min_alignment: if drawn.name.is_some() { 1 << 10 } else { 0 },
        };
        let before = self.allocator.stats();
        let counters = self.device.counters();
        let result = self.allocator.create_pool(&desc);
        let fired = self.faults_fired(&counters);
        let ctx = self.ctx();
        let invalid = self.invalid(&drawn);
        let pool = match result {
            Err(Error::InvalidConfig(text)) if invalid.is_some() => {
                assert_eq!(Some(text), invalid, "{ctx}: {desc:?}");
                self.pooled.invalid += 1;
                let now = self.device.counters();
                assert_eq!(now.allocate_calls, counters.allocate_calls, "{ctx}");
                None
            }
            _ if invalid.is_some() => panic!("{ctx}: {desc:?} gave {result:?}"),
            Ok(pool) => Some(pool),
            Err(error) => {
                self.explain_min_blocks(error, &drawn, before.memory_objects, fired);
                self.pooled.not_made += 1;
                None
            }
        };
        let Some(pool) = pool else {
            // Short of memory for its blocks, it may have released the
            // default pools' kept empty blocks first.
            let after = self.allocator.stats();
            assert_eq!(
                after,
                unchanged_but_released_empty_blocks(&before, &after),
                "{ctx}: {desc:?} refused"
            );
            assert_eq!(
                self.device.live_allocations().len(),
                after.memory_objects as usize,
                "{ctx}"
            );
            return;
        };
        let t = drawn.memory_type;
        assert_eq!(pool.memory_type(), t, "{ctx}");
        let stats = self.allocator.pool_stats(&pool);
        let stats = stats.unwrap_or_else(|e| panic!("{ctx}: pool_stats: {e:?}"));
        let min = u64::from(drawn.min_blocks);
        let size = match drawn.block_size {
            0 => self.preferred[t as usize],
            fixed => fixed,
        };
        assert_eq!(
            (
                stats.blocks,
                stats.block_bytes,
                stats.empty_blocks,
                stats.allocations()
            ),
            (min, min * size, min, 0),
            "{ctx}: a new pool {desc:?}"
        );
        // Its blocks are new empty blocks; kept empty blocks of the default
        // pools may have made way for them (`Config::empty_block_reserve`).
        let now = self.allocator.stats();
        let empty = |stats: &Stats| {
            stats
                .memory_types
                .iter()
                .map(|t| t.empty_blocks)
                .sum::<u64>()
        };
        let released = (before.memory_objects + min as u32)
            .checked_sub(now.memory_objects)
            .unwrap_or_else(|| panic!("{ctx}: more memory objects than the pool's"));
        assert_eq!(
            u64::from(released),
            empty(&before) + min - empty(&now),
            "{ctx}: only kept empty blocks may go for a new pool"
        );
        let slot = match self.pool_slots.iter().position(Option::is_none) {
            Some(slot) => slot,
            None => {
                self.pool_slots.push(None);
                self.pool_slots.len() - 1
            }
        };
        self.pool_slots[slot] = Some(pool);
        self.pooled.made += 1;
        self.pools.push(WalkPool {
            pool,
            block_size: (drawn.block_size != 0).then_some(drawn.block_size),
            min_blocks: drawn.min_blocks,
            max_blocks: drawn.max_blocks,
            min_alignment: desc.min_alignment,
            name: drawn.name,
        });
    }

    /// Panics unless `error`, from making the `min_blocks` blocks of a
    /// valid description, is explained: an injected failure, a lost device,
    /// the object limit, or no room in the heap for them all.
    fn explain_min_blocks(&self, error: Error, drawn: &Drawn, objects: u32, fired: Fired) {
        let ctx = self.ctx();
        let t = drawn.memory_type;
        let limit = self.layout.max_memory_allocation_count;
        let min = drawn.min_blocks;
        let explained = match error {
            Error::DeviceLost => self.lost,
            Error::OutOfHostMemory => fired.host_memory,
            Error::MapFailed => fired.map,
            Error::TooManyObjects(n) => n == limit && (fired.objects || objects + min > limit),
            Error::OutOfDeviceMemory => true,
            _ => false,
        };
        assert!(
            explained,
            "{ctx}: {error:?} making the min_blocks of pool type {t}"
        );
        let size = match drawn.block_size {
            0 => self.preferred[t as usize],
            fixed => fixed,
        };
        let room = !self.lost
            && objects + min <= limit
            && self.heap_has_room(t, size.saturating_mul(u64::from(min)), false);
        assert!(
            fired.any() || !room || error != Error::OutOfDeviceMemory,
            "{ctx}: {error:?} making {min} blocks of {size} bytes of type {t}, yet its heap has room (heap usage {:?}, caps {:?})",
            self.device.heap_usage(),
            self.caps
        );
    }

    /// Allocations and frees waiting for their frame that the model counts
    /// in `pool`.
    fn held_in(&self, pool: Pool) -> (u64, u64) {
        self.counted()
            .filter(|c| c.pool == Some(pool))
            .fold((0, 0), |(n, bytes), c| (n + 1, bytes + c.size))
    }

    /// `destroy_pool` on a random live pool, whose live allocations are
    /// freed first half the time (now, or after the frame): refused with
    /// the exact count while it holds allocations or frees waiting for
    /// their frame, changing nothing; else its blocks go.
    pub(super) fn destroy_pool(&mut self) {
        if self.pools.is_empty() {
            return self.create_pool();
        }
        let index = self.rng.below(self.pools.len() as u64) as usize;
        let pool = self.pools[index].pool;
        if self.rng.below(2) == 0 {
            let later = self.rng.below(3) == 0;
            let (mine, rest): (Vec<_>, Vec<_>) = std::mem::take(&mut self.live)
                .into_iter()
                .partition(|live| live.pool == Some(pool));
            self.live = rest;
            for live in mine {
                if later {
                    self.free_after_frame(live);
                } else {
                    self.free_now(live);
                }
            }
        }
        self.destroy_pool_at(index);
    }

    /// `destroy_pool` on live pool `index`, checked against the model.
    fn destroy_pool_at(&mut self, index: usize) {
        let pool = self.pools[index].pool;
        let ctx = self.ctx();
        let (held, _) = self.held_in(pool);
        let before = self.allocator.stats();
        let pool_before = self.allocator.pool_stats(&pool);
        let pool_before = pool_before.unwrap_or_else(|e| panic!("{ctx}: pool_stats: {e:?}"));
        let counters = self.device.counters();
        let result = self.allocator.destroy_pool(pool);
        if held > 0 {
            assert_eq!(
                result,
                Err(Error::PoolNotEmpty { allocations: held }),
                "{ctx}: {pool_before:?}"
            );
            assert_eq!(self.allocator.stats(), before, "{ctx}");
            assert_eq!(self.allocator.pool_stats(&pool), Ok(pool_before), "{ctx}");
            self.pooled.not_empty += 1;
            return;
        }
        self.pooled.destroyed += 1;
        assert_eq!(result, Ok(()), "{ctx}: {pool_before:?}");
        let after = self.allocator.stats();
        assert_eq!(
            (
                u64::from(after.memory_objects),
                after.reserved_bytes(),
                after.allocations()
            ),
            (
                u64::from(before.memory_objects) - pool_before.blocks,
                before.reserved_bytes() - pool_before.block_bytes,
                before.allocations()
            ),
            "{ctx}: destroying {pool_before:?}"
        );
        let now = self.device.counters();
        assert_eq!(now.frees - counters.frees, pool_before.blocks, "{ctx}");
        self.pools.swap_remove(index);
        for slot in &mut self.pool_slots {
            if *slot == Some(pool) {
                *slot = None;
            }
        }
        self.dead_pools.push(pool);
        if self.dead_pools.len() > 8 {
            self.dead_pools.remove(0);
        }
        assert_eq!(
            self.allocator.pool_stats(&pool),
            Err(Error::StalePool),
            "{ctx}"
        );
    }

    /// A destroyed pool's handle or another allocator's, given to
    /// `destroy_pool` or `pool_stats`: refused, nothing changes.
    fn refuse_pool_handle(&mut self) {
        let (pool, expected) = match self.dead_pools.len() as u64 {
            n if n > 0 && self.rng.below(2) == 0 => (
                self.dead_pools[self.rng.below(n) as usize],
                Error::StalePool,
            ),
            _ => (self.foreign.pool, Error::ForeignPool),
        };
        let before = self.allocator.stats();
        let counters = self.device.counters();
        let ctx = self.ctx();
        if self.rng.below(2) == 0 {
            assert_eq!(self.allocator.destroy_pool(pool), Err(expected), "{ctx}");
        } else {
            assert_eq!(self.allocator.pool_stats(&pool), Err(expected), "{ctx}");
        }
        assert_eq!(self.allocator.stats(), before, "{ctx}");
        let now = self.device.counters();
        assert_eq!(
            (now.allocate_calls, now.frees, now.maps),
            (counters.allocate_calls, counters.frees, counters.maps),
            "{ctx}: a refused handle calls no device"
        );
    }

    /// The live pools in the order the memory map lists them: by memory
    /// type, then by slot in the allocator's table.
    pub(super) fn pools_by_slot(&self, memory_type: u32) -> Vec<&WalkPool> {
        self.pool_slots
            .iter()
            .flatten()
            .filter(|pool| pool.memory_type() == memory_type)
            .filter_map(|&pool| self.live_pool(pool))
            .collect()
    }

    /// Each live pool with its part of `map`.
    pub(super) fn pool_maps<'m>(&self, map: &'m MemoryMap) -> Vec<(Pool, &'m PoolMap)> {
        let ctx = self.ctx();
        let mut all = Vec::new();
        for t in &map.memory_types {
            let model = self.pools_by_slot(t.memory_type);
            assert_eq!(
                model.len(),
                t.custom_pools.len(),
                "{ctx}: the map's pools of type {}",
                t.memory_type
            );
            for (p, shown) in model.into_iter().zip(&t.custom_pools) {
                let got = (
                    shown.name.as_deref(),
                    shown.block_size,
                    shown.min_blocks,
                    shown.max_blocks,
                );
                let want = (p.name.as_deref(), p.block_size, p.min_blocks, p.max_blocks);
                assert_eq!(got, want, "{ctx}: the map's pool in slot order");
                all.push((p.pool, shown));
            }
        }
        all
    }

    /// Every block of `map`, with the custom pool it belongs to, if any.
    pub(super) fn all_blocks<'m>(&self, map: &'m MemoryMap) -> Vec<(&'m BlockMap, Option<Pool>)> {
        let default = map.memory_types.iter().flat_map(|t| &t.blocks);
        let pools = self.pool_maps(map);
        let in_pools = pools
            .into_iter()
            .flat_map(|(pool, shown)| shown.blocks.iter().map(move |b| (b, Some(pool))));
        default.map(|b| (b, None)).chain(in_pools).collect()
    }

    /// Each live pool's figures against the model: its allocations and
    /// bytes (frees waiting for their frame included), dedicated ones among
    /// them; between `min_blocks` and `max_blocks` blocks, each of the
    /// fixed size; no more empty blocks than it may keep.
    pub(super) fn check_pools(&self) {
        let ctx = self.ctx();
        for p in &self.pools {
            let s = self.allocator.pool_stats(&p.pool);
            let s = s.unwrap_or_else(|e| panic!("{ctx}: pool_stats: {e:?}"));
            let mine = self.counted().filter(|c| c.pool == Some(p.pool));
            let want = mine.fold((0, 0, 0, 0), |w, c| {
                let d = u64::from(c.dedicated);
                (w.0 + 1, w.1 + c.size, w.2 + d, w.3 + d * c.size)
            });
            let got = (
                s.allocations(),
                s.live_bytes(),
                s.dedicated_allocations,
                s.dedicated_bytes,
            );
            assert_eq!(got, want, "{ctx}: pool {:?}: {s:?}", p.pool);
            assert_eq!(s.memory_type, p.memory_type(), "{ctx}");
            let max = p.max_blocks.map_or(u64::MAX, u64::from);
            let min = u64::from(p.min_blocks);
            assert!(
                (min..=max).contains(&s.blocks),
                "{ctx}: pool {:?} holds {} blocks, not {min}..={max}",
                p.pool,
                s.blocks
            );
            if let Some(size) = p.block_size {
                assert_eq!(s.block_bytes, s.blocks * size, "{ctx}: {s:?}");
            }
            assert!(
                s.empty_blocks <= min.max(1),
                "{ctx}: pool {:?} keeps {} empty blocks, min_blocks {min}",
                p.pool,
                s.empty_blocks
            );
        }
    }

    /// Each live pool's figures, for `trim` to compare.
    pub(super) fn pool_figures(&self) -> Vec<TypeStats> {
        let ctx = self.ctx();
        self.pools
            .iter()
            .map(|p| {
                let s = self.allocator.pool_stats(&p.pool);
                s.unwrap_or_else(|e| panic!("{ctx}: pool_stats: {e:?}"))
            })
            .collect()
    }

    /// Destroys every pool at the end of the walk, or, on some seeds and on
    /// a lost device, leaves those that still hold frees waiting for their
    /// frame (refused with the count) or that the walk keeps to the
    /// allocator's drop.
    pub(super) fn finish_pools(&mut self, keep: bool) {
        let mut index = 0;
        while index < self.pools.len() {
            let (held, _) = self.held_in(self.pools[index].pool);
            if keep || held > 0 {
                if held > 0 {
                    let result = self.allocator.destroy_pool(self.pools[index].pool);
                    assert_eq!(
                        result,
                        Err(Error::PoolNotEmpty { allocations: held }),
                        "{}",
                        self.ctx()
                    );
                }
                index += 1;
                continue;
            }
            self.destroy_pool_at(index);
        }
    }
}
