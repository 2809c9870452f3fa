//! Host access (writes, reads, flushes, invalidates) and the dumps.

use super::*;

/// The byte [`Walk::write_after_free`] writes: not the `0xEF` freed
/// memory is filled with.
const WRITTEN_AFTER_FREE: u8 = 0x5a;

/// What [`Walk::write_after_free`] needs of an allocation just freed.
pub(super) struct Freed {
    memory: vk::DeviceMemory,
    offset: u64,
    size: u64,
    pointer: Option<std::ptr::NonNull<u8>>,
    dedicated: bool,
    pool: Option<Pool>,
}

impl Walk {
    /// Frees a live allocation now, through `free_mut` when bit 0 of
    /// `how` is set; with bit 1, then writes a byte into the bytes it held
    /// ([`write_after_free`](Self::write_after_free)): by the GPU with bit
    /// 2, else by the host, at `how >> 3` thirty-seconds of its size.
    /// With bit 2 but not bit 1, first writes a byte past its end instead,
    /// `how >> 3` bytes into its debug margin ([`overrun`](Self::overrun)),
    /// which the free must count.
    pub(super) fn free_now(&mut self, pick: u16, how: u8) {
        let Some(i) = self.index(pick) else { return };
        let live = self.live.swap_remove(i);
        let a = &live.allocation;
        let overrun = how & 6 == 4 && self.overrun(a, how >> 3);
        if overrun {
            self.check_overrun(&live);
        }
        let freed = Freed {
            memory: a.memory(),
            offset: a.offset(),
            size: a.size(),
            pointer: a.mapped_ptr(),
            dedicated: a.is_dedicated(),
            pool: live.pool,
        };
        // SAFETY: the fake device runs no GPU work.
        let result = unsafe {
            if how & 1 == 1 {
                self.allocator.free_mut(live.allocation)
            } else {
                self.allocator.free(live.allocation)
            }
        };
        assert_eq!(result, Ok(()), "free");
        if let Some(resource) = live.resource {
            self.device.destroy_resource(resource.handle);
        }
        // Counted by this free, once (`settle_writes_after_free` checks).
        if overrun {
            self.counted += 1;
        }
        if how & 2 != 0 {
            self.write_after_free(&freed, how & 4 != 0, how >> 3);
            if freed.pool.is_some() {
                self.check_pool_corruption();
            }
        }
    }

    /// Before the free of `live`, whose margin was just written past:
    /// `check_corruption` of every type reports that damaged margin and no
    /// other (with its name, and a margin of at least `debug_margin` bytes
    /// inside its block), and the outstanding write after free; in a
    /// custom pool, `check_pool_corruption` of the pool reports the same,
    /// with the write after free only when the pool's block holds it.
    fn check_overrun(&self, live: &Live) {
        let a = &live.allocation;
        let name = live.name.map(String::from);
        let want = (a.memory_type(), a.memory(), a.offset(), a.size(), name);
        let block_size = self
            .device
            .live_allocations()
            .iter()
            .find(|m| m.memory == a.memory())
            .map(|m| m.size);
        let damaged = |report: &vk_suballoc::CorruptionReport| -> Vec<_> {
            for d in &report.damaged {
                assert!(
                    d.margin >= self.config.debug_margin
                        && Some(d.offset + d.size + d.margin) <= block_size,
                    "{d:?} in a block of {block_size:?} bytes"
                );
            }
            report
                .damaged
                .iter()
                .map(|d| (d.memory_type, d.memory, d.offset, d.size, d.name.clone()))
                .collect()
        };
        let report = self.allocator.check_corruption(!0);
        let report = report.unwrap_or_else(|e| panic!("check_corruption: {e:?}"));
        assert_eq!(
            damaged(&report),
            std::slice::from_ref(&want),
            "the damaged margins: {report:?}"
        );
        let written: Vec<_> = report
            .written_after_free
            .iter()
            .map(|w| (w.memory, w.first_changed))
            .collect();
        let outstanding: Vec<_> = self.written_after_free.into_iter().collect();
        assert_eq!(written, outstanding, "writes after free: {report:?}");
        let Some(pool) = live.pool else { return };
        let report = self.allocator.check_pool_corruption(&pool);
        let report = report.unwrap_or_else(|e| panic!("check_pool_corruption: {e:?}"));
        let damaged = damaged(&report);
        assert_eq!(damaged, [want], "the pool's damaged margins: {report:?}");
        self.check_pool_writes_after_free(pool, &report);
    }

    /// Writes a byte after free into the bytes `freed` held, at `at`
    /// thirty-seconds of its size, by the GPU (`gpu`: into the device's
    /// view of non-coherent memory) or by the host through the freed
    /// allocation's kept pointer (into the host's view), where the walk
    /// can tell what must follow: with debug fills on, in a block still
    /// alive (dedicated memory went with its allocation), on a device not
    /// lost, and with no other write outstanding, so that the count
    /// `corruptions_detected` keeps says which write it counted. From then
    /// on every `check_corruption` must report that byte, and nothing else,
    /// until the write is counted
    /// ([`settle_writes_after_free`](Self::settle_writes_after_free)),
    /// once: by the allocation (or ring allocation) that takes the byte
    /// again, or by the release of its block, at the latest when the walk
    /// ends and every block is released.
    /// Panics unless `report`, `check_pool_corruption` of `pool`, lists
    /// the outstanding write after free exactly when it went into `pool`.
    fn check_pool_writes_after_free(&self, pool: Pool, report: &vk_suballoc::CorruptionReport) {
        let written: Vec<_> = report
            .written_after_free
            .iter()
            .map(|w| (w.memory, w.first_changed))
            .collect();
        let want: Vec<_> = self
            .written_after_free
            .filter(|_| self.written_after_free_pool == Some(pool))
            .into_iter()
            .collect();
        assert_eq!(written, want, "pool's writes after free: {report:?}");
    }

    fn write_after_free(&mut self, freed: &Freed, gpu: bool, at: u8) {
        if !self.config.debug_fill
            || freed.dedicated
            || self.lost
            || self.written_after_free.is_some()
        {
            return;
        }
        let Some(pointer) = freed.pointer else { return };
        let live = self.device.live_allocations();
        if !live.iter().any(|m| m.memory == freed.memory) {
            return;
        }
        let at = freed.size * u64::from(at) / 32;
        let offset = freed.offset + at;
        if gpu {
            // SAFETY: no slice of the block's bytes is alive (the walk
            // keeps none between operations).
            let written = unsafe {
                self.device
                    .write(freed.memory, offset, &[WRITTEN_AFTER_FREE])
            };
            assert!(written, "the GPU's write into a live block");
        } else {
            // SAFETY: the block is alive, so its mapping too, and `at` lies
            // in the bytes the freed allocation held; nothing else refers to
            // them (the walk runs on one thread, and the allocator keeps no
            // reference into free memory between calls).
            unsafe { pointer.as_ptr().add(at as usize).write(WRITTEN_AFTER_FREE) };
        }
        self.written_after_free = Some((freed.memory, offset));
        self.written_after_free_pool = freed.pool;
    }

    /// Writes one byte past the end of `a`, `at` bytes (modulo the
    /// margin) into its debug margin, where margins are checked:
    /// `detect_corruption` with a margin, in a block of a host-coherent
    /// type. Returns whether it wrote: the free that follows must then
    /// count one corruption, the damaged margin.
    fn overrun(&self, a: &Allocation, at: u8) -> bool {
        let margin = self.config.debug_margin;
        let props = self.layout.memory_types[a.memory_type() as usize].props;
        let guarded = self.config.detect_corruption
            && margin > 0
            && !a.is_dedicated()
            && props.contains(Props::HOST_VISIBLE | Props::HOST_COHERENT);
        let Some(pointer) = a.mapped_ptr().filter(|_| guarded) else {
            return false;
        };
        let past = a.size() + u64::from(at) % margin;
        // SAFETY: the margin lies in the allocation's block, mapped whole,
        // past its requested bytes and inside the bytes it takes (no other
        // allocation's); nothing else refers to it.
        unsafe {
            let byte = pointer.as_ptr().add(past as usize);
            byte.write(!byte.read());
        }
        true
    }

    /// `corruptions_detected` against the model (`counted`, which an
    /// overrun's free has raised already): unchanged, or one more while a
    /// write after free is outstanding, which is then counted (and never
    /// again).
    pub(super) fn settle_writes_after_free(&mut self) {
        let detected = self.allocator.corruptions_detected();
        if detected == self.counted + 1 && self.written_after_free.is_some() {
            self.written_after_free = None;
            self.counted = detected;
        }
        assert_eq!(
            detected, self.counted,
            "corruptions counted; outstanding write after free: {:?}",
            self.written_after_free
        );
    }

    pub(super) fn write(&mut self, pick: u16, value: u8) {
        let Some(i) = self.index(pick) else { return };
        let live = &mut self.live[i];
        let a = &mut live.allocation;
        let size = a.size();
        let mapped = a.mapped_ptr().is_some();
        // The first byte through the mutable slice, on odd values, then
        // flushed (non-coherent memory: the read invalidates).
        let first = if value % 2 == 1 {
            match self.allocator.mapped_slice_mut(a) {
                Ok(slice) => {
                    assert_eq!(slice.len() as u64, size);
                    slice[0] = value;
                    self.allocator.flush(a, 0..1)
                }
                Err(error) => Err(error),
            }
        } else {
            self.allocator.copy_to_allocation(a, 0, &[value])
        };
        let last = self.allocator.copy_to_allocation(a, size - 1, &[value]);
        let past = self.allocator.copy_to_allocation(a, size, &[value]);
        if mapped {
            assert_eq!((first, last), (Ok(()), Ok(())), "copy_to_allocation");
            assert!(
                matches!(past, Err(Error::RangeOutOfBounds { .. })),
                "{past:?}"
            );
            live.tag = Some(value);
        } else {
            assert_eq!(
                (first, last),
                (Err(Error::NotHostVisible), Err(Error::NotHostVisible))
            );
        }
    }

    pub(super) fn read(&mut self, pick: u16) {
        let Some(i) = self.index(pick) else { return };
        let live = &mut self.live[i];
        let Some(tag) = live.tag else { return };
        let a = &mut live.allocation;
        let size = a.size();
        let mut bytes = [0u8; 2];
        assert_eq!(
            self.allocator.copy_from_allocation(a, 0, &mut bytes[..1]),
            Ok(())
        );
        assert_eq!(
            self.allocator
                .copy_from_allocation(a, size - 1, &mut bytes[1..]),
            Ok(())
        );
        assert_eq!(bytes, [tag, tag], "host bytes of {a:?} clobbered");
        let slice = self.allocator.mapped_slice(a).unwrap();
        assert_eq!((slice[0], slice[slice.len() - 1]), (tag, tag));
    }

    pub(super) fn flush(&mut self, pick: u16, start: u16, end: u16, invalidate: bool, many: bool) {
        let Some(i) = self.index(pick) else { return };
        let size = self.live[i].allocation.size();
        // Offsets near the end, or from the start.
        let at = |x: u16| {
            if x & 1 == 0 {
                u64::from(x >> 1)
            } else {
                size.saturating_sub(u64::from(x >> 1))
                    .wrapping_add(u64::from(x >> 14))
            }
        };
        let (start, end) = (at(start), at(end));
        let mapped = self.live[i].allocation.mapped_ptr().is_some();
        let result = if many {
            // Every live allocation whole (the host-visible ones), this one
            // (again) with its range, last.
            if invalidate {
                let (before, rest) = self.live.split_at_mut(i);
                let (this, after) = rest.split_first_mut().unwrap();
                let others = before.iter_mut().chain(after.iter_mut());
                let others = others.filter(|l| l.allocation.mapped_ptr().is_some());
                let ranges = others.map(|l| {
                    let size = l.allocation.size();
                    (&mut l.allocation, 0..size)
                });
                let ranges = ranges.chain(std::iter::once((&mut this.allocation, start..end)));
                self.allocator.invalidate_allocations(ranges)
            } else {
                let others = self
                    .live
                    .iter()
                    .filter(|l| l.allocation.mapped_ptr().is_some());
                let ranges = others.map(|l| (&l.allocation, 0..l.allocation.size()));
                let this = &self.live[i].allocation;
                self.allocator
                    .flush_allocations(ranges.chain(std::iter::once((this, start..end))))
            }
        } else {
            let a = &mut self.live[i].allocation;
            if invalidate {
                self.allocator.invalidate(a, start..end)
            } else {
                self.allocator.flush(a, start..end)
            }
        };
        // The docs give no order between the two flaws.
        let out_of_bounds = start > end || end > size;
        let ok = match result {
            Ok(()) => mapped && !out_of_bounds,
            Err(Error::NotHostVisible) => !mapped,
            Err(Error::RangeOutOfBounds { .. }) => out_of_bounds,
            // No device error, lost device or not: the backend's flushes
            // and invalidates answer only out of memory (`MemoryDevice`),
            // and the fake device's only when `fail_flush` or
            // `fail_invalidate` asks, which the walk never does.
            Err(_) => false,
        };
        assert!(
            ok,
            "flush {start}..{end} of {size} bytes (many {many}): {result:?}"
        );
    }

    pub(super) fn inspect(&mut self, what: u8) {
        match what % 4 {
            0 => {
                let json = self.allocator.stats_json(what & 4 != 0);
                let json: serde_json::Value = serde_json::from_str(&json).expect("invalid JSON");
                // `Total`: every memory object the device holds (blocks and
                // dedicated memory, VMA's `BlockCount` and `BlockBytes`)
                // and every held range.
                let total = &json["Total"];
                let device = self.device.live_allocations();
                let figures =
                    ["BlockCount", "BlockBytes", "AllocationCount"].map(|k| total[k].as_u64());
                let want = [
                    device.len() as u64,
                    device.iter().map(|m| m.size).sum(),
                    self.held().count() as u64,
                ]
                .map(Some);
                assert_eq!(figures, want, "the JSON dump's total: {total}");
            }
            1 => {
                let svg = self.allocator.memory_map_svg();
                let count = svg.matches(r#"class="alloc "#).count();
                assert_eq!(count, self.held().count(), "the SVG's allocations");
            }
            2 => {
                self.check_memory_map();
                if what & 4 != 0 {
                    self.replace_memory_callback();
                }
            }
            _ => {
                // Margins: host-coherent types; debug fills: host-visible
                // ones, coherent or not.
                let usable_with = |props: Props| {
                    (0..self.layout.memory_types.len()).any(|t| {
                        self.usable_types() & (1 << t) != 0
                            && self.layout.memory_types[t].props.contains(props)
                    })
                };
                let coherent = Props::HOST_VISIBLE | Props::HOST_COHERENT;
                let on = (self.config.detect_corruption
                    && self.config.debug_margin > 0
                    && usable_with(coherent))
                    || (self.config.debug_fill && usable_with(Props::HOST_VISIBLE));
                match self.allocator.check_corruption(!0) {
                    Ok(report) => {
                        assert!(on && report.damaged.is_empty(), "{report:?}");
                        let written: Vec<_> = report
                            .written_after_free
                            .iter()
                            .map(|w| (w.memory, w.first_changed))
                            .collect();
                        let want: Vec<_> = self.written_after_free.into_iter().collect();
                        assert_eq!(written, want, "writes after free: {report:?}");
                    }
                    Err(error) => assert!(
                        !on && matches!(error, Error::CorruptionDetectionOff { .. }),
                        "check_corruption: {error:?}"
                    ),
                }
                self.check_pool_corruption();
                let _ = self.allocator.stats().to_string();
            }
        }
    }

    /// The memory map's blocks tile, as `BlockMap::ranges` promises (no
    /// gap, overlap or empty range, no two free ranges touching), its
    /// memory objects are the device's (their sizes and types included),
    /// its figures are the stats' and the model's (`check_map_figures`),
    /// and its allocations are the held ranges, each where the model holds
    /// it: in its memory type, in the custom pool it was made in (the one
    /// of the model's pool's key) or in none, in a block or dedicated
    /// memory as it was placed, at its offset, of the kind its request
    /// named (the `report` module's docs), with its last name (also once
    /// freed after a frame, until collected) and holding in a block at
    /// least its size and `debug_margin`, dedicated memory exactly its
    /// size (`RangeMap::size`, `memory_size`).
    pub(super) fn check_memory_map(&self) {
        use vk_suballoc::report::RangeKind;
        struct Shown {
            memory_type: u32,
            /// The custom pool's index in `keys`.
            pool: Option<usize>,
            dedicated: bool,
            size: u64,
            kind: RangeKind,
            name: Option<String>,
        }
        let stats = self.allocator.stats();
        let map = self.allocator.memory_map();
        let keys: Vec<_> = map.custom_pools().map(|p| self.shown_pool_key(p)).collect();
        self.check_map_figures(&map, &stats, &keys);
        let mut memories = Vec::new();
        let mut shown: HashMap<(vk::DeviceMemory, u64), Shown> = HashMap::new();
        let mut show = |key, entry: Shown| {
            let twice = shown.insert(key, entry).is_some();
            assert!(!twice, "{key:?} twice in the memory map");
        };
        let mut pool_at = 0;
        for t in &map.memory_types {
            let memory_type = t.memory_type;
            let first_pool = pool_at;
            pool_at += t.custom_pools.len();
            let pools = (t.custom_pools.iter().enumerate()).map(|(i, p)| (first_pool + i, p));
            let blocks = (t.blocks.iter().map(|b| (b, None))).chain(
                pools
                    .clone()
                    .flat_map(|(i, p)| p.blocks.iter().map(move |b| (b, Some(i)))),
            );
            for (block, pool) in blocks {
                let mut end = 0;
                let mut free_before = false;
                for range in &block.ranges {
                    assert_eq!(range.offset, end, "gap or overlap in the map");
                    assert!(range.size > 0, "an empty range: {block:?}");
                    let free = !range.is_allocation();
                    assert!(!(free && free_before), "free ranges touch: {block:?}");
                    free_before = free;
                    end += range.size;
                    if !free {
                        let entry = Shown {
                            memory_type,
                            pool,
                            dedicated: false,
                            size: range.size,
                            kind: range.kind,
                            name: range.name.clone(),
                        };
                        show((block.memory, range.offset), entry);
                    }
                }
                assert_eq!(end, block.size);
                memories.push((block.memory, block.size, memory_type));
            }
            let dedicated = (t.dedicated.iter().map(|d| (d, None)))
                .chain(pools.flat_map(|(i, p)| p.dedicated.iter().map(move |d| (d, Some(i)))));
            for (d, pool) in dedicated {
                let entry = Shown {
                    memory_type,
                    pool,
                    dedicated: true,
                    size: d.size,
                    kind: d.kind,
                    name: d.name.clone(),
                };
                show((d.memory, 0), entry);
                memories.push((d.memory, d.size, memory_type));
            }
        }
        let mut device: Vec<_> = self
            .device
            .live_allocations()
            .iter()
            .map(|m| (m.memory, m.size, m.memory_type))
            .collect();
        memories.sort_unstable();
        device.sort_unstable();
        assert_eq!(memories, device, "the memory map's memory objects");
        let pool_keys: HashMap<Pool, _> = (self.pools.iter())
            .map(|p| (p.pool, self.pool_key(p)))
            .collect();
        let margin = self.config.debug_margin;
        // A ring chunk the walk has not placed yet (null memory) is shown
        // somewhere the model does not know.
        let mut unplaced = 0;
        for h in self.held() {
            if h.memory == vk::DeviceMemory::null() {
                unplaced += 1;
                continue;
            }
            let Some(s) = shown.remove(&(h.memory, h.offset)) else {
                panic!("{h:?} missing from the memory map");
            };
            assert_eq!(
                (s.memory_type, s.pool.is_some(), s.dedicated, s.kind),
                (h.memory_type, h.pool.is_some(), h.dedicated, h.kind.into()),
                "{h:?} in the memory map"
            );
            if let (Some(p), Some(i)) = (h.pool, s.pool) {
                assert_eq!(Some(&keys[i]), pool_keys.get(&p), "{h:?}'s pool in the map");
            }
            if h.dedicated {
                assert_eq!(s.size, h.size, "{h:?} shown as {} bytes", s.size);
            } else {
                assert!(s.size >= h.size + margin, "{h:?} shown as {} bytes", s.size);
            }
            if let Some(name) = h.name {
                assert_eq!(s.name.as_deref(), name, "{h:?}'s name in the map");
            }
        }
        assert_eq!(shown.len(), unplaced, "allocations the model does not hold");
    }

    /// `check_pool_corruption` of each live pool agrees with
    /// `check_corruption` of its memory type, restricted to the pool: off
    /// when that is off (naming the type's bit), else no damaged margin
    /// (the overruns are counted by their frees), the write after free
    /// outstanding when the pool's block holds it, and as many margins
    /// checked as the pool's allocations in blocks (live, or freed after a
    /// frame not collected) where detection is on. Destroyed pools are
    /// refused with `StalePool`.
    fn check_pool_corruption(&self) {
        for p in &self.pools {
            let t = p.memory_type;
            let result = self.allocator.check_pool_corruption(&p.pool);
            let of_type = self.allocator.check_corruption(1 << t);
            let type_report = match of_type {
                Err(error) => {
                    assert_eq!(
                        error,
                        Error::CorruptionDetectionOff {
                            memory_type_bits: 1 << t
                        }
                    );
                    assert_eq!(result, Err(error), "check_pool_corruption");
                    continue;
                }
                Ok(report) => report,
            };
            let report = match result {
                Ok(report) => report,
                Err(error) => panic!("check_pool_corruption of type {t}: {error:?}"),
            };
            assert!(report.damaged.is_empty(), "{report:?}");
            self.check_pool_writes_after_free(p.pool, &report);
            let props = self.layout.memory_types[t as usize].props;
            let detects = self.config.detect_corruption
                && self.config.debug_margin > 0
                && props.contains(Props::HOST_VISIBLE | Props::HOST_COHERENT);
            let in_blocks = self
                .held()
                .filter(|h| h.pool == Some(p.pool) && !h.dedicated)
                .count() as u64;
            let want_checked = if detects { in_blocks } else { 0 };
            assert_eq!(report.checked, want_checked, "{report:?}");
            assert!(report.checked <= type_report.checked, "{report:?}");
            assert!(
                report.free_checked <= type_report.free_checked,
                "{report:?} beside {type_report:?}"
            );
        }
        for dead in &self.dead_pools {
            let result = self.allocator.check_pool_corruption(dead);
            assert_eq!(result, Err(Error::StalePool), "a destroyed pool");
        }
    }
}
