//! The walk's checks of everything counted against `stats()`, the device,
//! the memory map, the JSON dump and the SVG; and the end of a walk, where
//! everything is freed and nothing may leak.

use std::collections::HashMap;

use ash::vk::Handle;
use vk_suballoc::report::{BlockMap, RangeKind};
use vk_suballoc::Error;

use super::{Place, Walk};
use crate::assert_ranges_tile;

/// Whether a block of the memory map holds no allocation.
fn is_empty(block: &BlockMap) -> bool {
    block.allocations().next().is_none()
}

impl Walk {
    /// Reads the figures, the dumps or the map, and checks them.
    pub(super) fn inspect(&mut self) {
        let total = self.counted().count() as u64;
        let ctx = self.ctx();
        match self.rng.below(4) {
            0 => self.check_all(),
            1 => {
                let detailed = self.rng.below(2) == 0;
                let json = self.allocator.stats_json(detailed);
                let json: serde_json::Value = serde_json::from_str(&json)
                    .unwrap_or_else(|e| panic!("{ctx}: invalid JSON ({e})"));
                let count = json["Total"]["AllocationCount"].as_u64();
                assert_eq!(count, Some(total), "{ctx}: the JSON dump's count");
                self.check_json_figures(&json);
            }
            2 => {
                let svg = self.allocator.memory_map_svg();
                let count = svg.matches(r#"class="alloc "#).count() as u64;
                assert_eq!(count, total, "{ctx}: the SVG's allocations");
            }
            _ => {
                let stats = self.allocator.stats();
                assert_eq!(stats.allocations(), total, "{ctx}");
                let _ = stats.to_string();
            }
        }
    }

    /// The JSON dump's figures of each heap and memory type are those of
    /// `stats()`: memory objects (blocks and dedicated memory), their
    /// bytes, and allocations; its heaps' usage covers the allocator's
    /// memory.
    fn check_json_figures(&self, json: &serde_json::Value) {
        let ctx = self.ctx();
        let stats = self.allocator.stats();
        let figures = |stats: &serde_json::Value| {
            let figure = |key: &str| stats[key].as_u64().unwrap_or(u64::MAX);
            (
                figure("BlockCount"),
                figure("BlockBytes"),
                figure("AllocationCount"),
            )
        };
        let heaps = &json["MemoryInfo"];
        for h in &stats.heaps {
            let heap = &heaps[format!("Heap {}", h.heap)];
            let objects: u64 = (stats.memory_types.iter())
                .filter(|t| t.heap == h.heap)
                .map(|t| t.blocks + t.dedicated_allocations)
                .sum();
            let want = (objects, h.reserved_bytes, h.allocations);
            assert_eq!(figures(&heap["Stats"]), want, "{ctx}: heap {}", h.heap);
            let usage = heap["Budget"]["UsageBytes"].as_u64();
            assert!(usage >= Some(h.reserved_bytes), "{ctx}: {h:?}: {usage:?}");
            for t in stats.memory_types.iter().filter(|t| t.heap == h.heap) {
                let shown = &heap["MemoryPools"][format!("Type {}", t.memory_type)]["Stats"];
                let want = (
                    t.blocks + t.dedicated_allocations,
                    t.reserved_bytes(),
                    t.allocations(),
                );
                assert_eq!(figures(shown), want, "{ctx}: {t:?}");
            }
        }
    }

    /// Everything counted against `stats()`, the device and the memory map;
    /// no overlap, no shared granularity page; tags intact.
    pub(super) fn check_all(&self) {
        let ctx = self.ctx();
        let stats = self.allocator.stats();
        let types = self.layout.memory_types.len();
        let mut want = vec![(0u64, 0u64, 0u64, 0u64); types];
        let mut by_memory: HashMap<u64, Vec<(Place, u64)>> = HashMap::new();
        let mut total = 0;
        for c in self.counted() {
            let w = &mut want[c.memory_type as usize];
            (w.0, w.1) = (w.0 + 1, w.1 + c.size);
            if c.dedicated {
                (w.2, w.3) = (w.2 + 1, w.3 + c.size);
            }
            if let Some(place) = c.place {
                by_memory
                    .entry(place.memory.as_raw())
                    .or_default()
                    .push((place, c.size));
            }
            total += 1;
        }
        let device = self.device.live_allocations();
        assert_eq!(stats.memory_objects as usize, device.len(), "{ctx}");
        for (t, s) in stats.memory_types.iter().enumerate() {
            let got = (
                s.allocations(),
                s.live_bytes(),
                s.dedicated_allocations,
                s.dedicated_bytes,
            );
            assert_eq!(got, want[t], "{ctx}: memory type {t}: {s:?}");
            let reserved: u64 = device
                .iter()
                .filter(|m| m.memory_type == t as u32)
                .map(|m| m.size)
                .sum();
            assert_eq!(s.reserved_bytes(), reserved, "{ctx}: memory type {t}");
        }
        let usage = self.device.heap_usage();
        for h in &stats.heaps {
            assert_eq!(h.reserved_bytes, usage[h.heap as usize], "{ctx}: {h:?}");
            // The process's usage counts this allocator's memory, over the
            // budget or not.
            assert!(h.budget.usage >= h.reserved_bytes, "{ctx}: {h:?}");
        }
        // The memory callback heard of exactly the device's memory objects.
        if let Some(heard) = &self.heard {
            let on_device: HashMap<u64, (u32, u64)> = (device.iter())
                .map(|m| (m.memory.as_raw(), (m.memory_type, m.size)))
                .collect();
            assert_eq!(*heard.lock().unwrap(), on_device, "{ctx}: memory events");
        }
        let granularity = self.layout.buffer_image_granularity.max(1);
        // Only blocks hold two allocations, each followed by its margin.
        let margin = self.config.debug_margin;
        for group in by_memory.values_mut() {
            group.sort_by_key(|(p, _)| p.offset);
            for pair in group.windows(2) {
                let ((a, a_size), (b, _)) = (pair[0], pair[1]);
                assert!(
                    a.offset + a_size + margin <= b.offset,
                    "{ctx}: {a:?}+{a_size} overlaps {b:?} or its {margin}-byte margin"
                );
            }
            for (i, &(x, x_size)) in group.iter().enumerate() {
                for &(y, _) in &group[i + 1..] {
                    assert!(
                        x.kind.may_share_page_with(y.kind)
                            || (x.offset + x_size - 1) / granularity < y.offset / granularity,
                        "{ctx}: {x:?}+{x_size} and {y:?} share a granularity page"
                    );
                }
            }
        }
        self.check_map(total);
        self.check_pools();
        self.check_margins();
        for live in &self.live {
            assert!(self.allocator.owns(&live.allocation), "{ctx}");
            if let Some(tag) = live.tag {
                let bytes = self.allocator.mapped_slice(&live.allocation).unwrap();
                let ends = (bytes[0], bytes[bytes.len() - 1]);
                assert_eq!(
                    ends,
                    (tag, tag),
                    "{ctx}: host bytes of {:?} clobbered",
                    live.allocation
                );
            }
        }
        assert_eq!(
            self.allocator.frames_in_flight(),
            self.sealed.len(),
            "{ctx}"
        );
        assert_eq!(self.allocator.current_frame(), self.next_frame, "{ctx}");
        assert!(
            self.device.violations().is_empty(),
            "{ctx}: {:?}",
            self.device.violations()
        );
    }

    /// The memory map tiles each block and shows each live allocation with
    /// its kind and name, in its custom pool if it has one, and each pool
    /// with the blocks and dedicated allocations `pool_stats` counts; it
    /// holds as many allocations as the model.
    pub(super) fn check_map(&self, total: usize) {
        let ctx = self.ctx();
        let map = self.allocator.memory_map();
        let stats = self.allocator.stats();
        let mut in_blocks = HashMap::new();
        let mut dedicated = HashMap::new();
        // The pool, if any, of each block and dedicated memory object.
        let mut owner = HashMap::new();
        let pool_maps = self.pool_maps(&map);
        let default = (map.memory_types.iter()).map(|t| (&t.blocks, &t.dedicated, None));
        let pools =
            (pool_maps.iter()).map(|(pool, shown)| (&shown.blocks, &shown.dedicated, Some(*pool)));
        for (blocks, dedicated_memory, pool) in default.chain(pools) {
            for block in blocks {
                assert_ranges_tile(block, &ctx);
                owner.insert(block.memory.as_raw(), pool);
                for range in block.allocations() {
                    in_blocks.insert((block.memory.as_raw(), range.offset), range);
                }
            }
            for d in dedicated_memory {
                owner.insert(d.memory.as_raw(), pool);
                dedicated.insert(d.memory.as_raw(), (d.kind, d.name.as_deref()));
            }
        }
        for memory_type in &map.memory_types {
            let s = &stats.memory_types[memory_type.memory_type as usize];
            // Empty blocks beyond the largest are kept only while the
            // pool's blocks hold allocations (`Config::empty_block_reserve`,
            // weighed whenever a block empties): with none, or with VMA's
            // rule, one at most.
            let default_empty = memory_type.blocks.iter().filter(|b| is_empty(b)).count();
            let in_use = memory_type.blocks.iter().any(|b| !is_empty(b));
            if self.config.empty_block_reserve == 0.0 || !in_use {
                assert!(
                    default_empty <= 1,
                    "{ctx}: more than one empty block kept: {s:?}"
                );
            }
            // The type's figures count its custom pools' blocks too.
            let pools = memory_type.custom_pools.iter();
            let blocks: Vec<&BlockMap> = (memory_type.blocks.iter())
                .chain(pools.flat_map(|p| &p.blocks))
                .collect();
            let figures = (
                blocks.len() as u64,
                blocks.iter().map(|b| b.size).sum(),
                blocks.iter().filter(|b| is_empty(b)).count() as u64,
                blocks.iter().filter(|b| b.retiring).count() as u64,
            );
            assert_eq!(
                figures,
                (s.blocks, s.block_bytes, s.empty_blocks, s.retiring_blocks),
                "{ctx}: {s:?}"
            );
        }
        for (pool, shown) in &pool_maps {
            let s = self.allocator.pool_stats(pool);
            let s = s.unwrap_or_else(|e| panic!("{ctx}: pool_stats: {e:?}"));
            let figures = (
                shown.blocks.len() as u64,
                shown.blocks.iter().map(|b| b.size).sum(),
                shown.blocks.iter().filter(|b| is_empty(b)).count() as u64,
                shown.blocks.iter().filter(|b| b.retiring).count() as u64,
                shown.dedicated.len() as u64,
            );
            let want = (
                s.blocks,
                s.block_bytes,
                s.empty_blocks,
                s.retiring_blocks,
                s.dedicated_allocations,
            );
            assert_eq!(figures, want, "{ctx}: the map's pool {pool:?}");
        }
        for live in &self.live {
            let a = &live.allocation;
            let memory = a.memory().as_raw();
            assert_eq!(
                owner.get(&memory),
                Some(&live.pool),
                "{ctx}: {a:?} not in its pool's memory"
            );
        }
        assert_eq!(
            in_blocks.len() + dedicated.len(),
            total,
            "{ctx}: the map's allocations"
        );
        for live in &self.live {
            let a = &live.allocation;
            let kind = RangeKind::from(live.kind);
            if a.is_dedicated() {
                let entry = dedicated.get(&a.memory().as_raw());
                assert_eq!(entry, Some(&(kind, live.name)), "{ctx}: dedicated {a:?}");
                continue;
            }
            let range = in_blocks.get(&(a.memory().as_raw(), a.offset()));
            let range = range.unwrap_or_else(|| panic!("{ctx}: {a:?} is not in the map"));
            assert_eq!(range.kind, kind, "{ctx}: {a:?}");
            assert!(
                range.size >= a.size() + self.config.debug_margin,
                "{ctx}: {range:?} holds less than {a:?} and its margin"
            );
            assert_eq!(range.name.as_deref(), live.name, "{ctx}: name of {a:?}");
        }
    }

    /// With corruption detection, no margin damaged, and with debug fills,
    /// no freed memory written: the walk writes only inside its
    /// allocations. `check_corruption` refuses a walk without either.
    fn check_margins(&self) {
        let ctx = self.ctx();
        let detected = self.allocator.corruptions_detected();
        assert_eq!(
            detected, 0,
            "{ctx}: damaged margins or writes after free found"
        );
        match self.allocator.check_corruption(!0) {
            Ok(report) => {
                assert!(
                    self.config.debug_fill
                        || (self.config.detect_corruption && self.config.debug_margin > 0)
                );
                assert!(report.is_clean(), "{ctx}: {report:?}");
            }
            Err(error) => assert_eq!(
                error,
                Error::CorruptionDetectionOff {
                    memory_type_bits: !0
                },
                "{ctx}"
            ),
        }
    }

    /// Frees everything the way an engine shuts down (or, on a lost device,
    /// as far as it can), then checks that nothing leaked.
    pub(super) fn finish(mut self) {
        self.step = u64::MAX;
        self.check_all();
        // On a lost device the rings are left to the allocator's drop.
        while !self.lost && !self.rings.is_empty() {
            let ring = self.rings.swap_remove(0);
            assert_eq!(self.allocator.destroy_upload_ring(ring.ring), Ok(()));
            for (_, chunk) in ring.chunks {
                self.defer(chunk);
            }
        }
        for live in std::mem::take(&mut self.live) {
            if !self.lost {
                self.free_after_frame(live);
                continue;
            }
            // SAFETY: the fake device runs no GPU work.
            assert_eq!(unsafe { self.allocator.free(live.allocation) }, Ok(()));
            if let Some(handle) = live.resource {
                self.destroy_resource(live.kind, handle);
            }
        }
        if !self.lost {
            self.end_frame();
            (0..self.sealed.len()).for_each(|i| self.signal_frame(i));
            let released = self.allocator.wait_and_collect(u64::MAX);
            assert_eq!(released, Ok(self.release_signalled()), "{}", self.ctx());
            assert!(self.sealed.is_empty());
            self.check_all();
            // On some seeds the pools are left to the allocator's drop.
            let keep = self.rng.below(4) == 0;
            self.finish_pools(keep);
            self.allocator.trim();
            // What trim leaves: the kept pools' min_blocks.
            let kept = self.pool_figures();
            let min_blocks: u64 = self.pools.iter().map(|p| u64::from(p.min_blocks)).sum();
            let blocks: u64 = kept.iter().map(|s| s.blocks).sum();
            let bytes: u64 = kept.iter().map(|s| s.block_bytes).sum();
            let stats = self.allocator.stats();
            assert_eq!(
                (
                    stats.reserved_bytes(),
                    u64::from(stats.memory_objects),
                    blocks
                ),
                (bytes, min_blocks, min_blocks),
                "{stats:?}"
            );
        } else {
            self.collect_now(false);
            self.check_all();
            self.finish_pools(false);
        }
        println!("{}: {:?}", self.test, self.defragmented);
        println!("{}: {:?}", self.test, self.pooled);
        println!("{}: {} frames refused", self.test, self.frames_refused);
        self.foreign.finish();
        super::super::finish(self.allocator, &self.device);
        if let Some(heard) = self.heard {
            let heard = heard.lock().unwrap();
            assert!(heard.is_empty(), "{}: freed unheard: {heard:?}", self.test);
        }
    }
}
