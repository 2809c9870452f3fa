//! Host access (writes, reads, flushes, invalidates) and the dumps.

use super::*;

impl Walk {
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
            // A lost device fails the flush of non-coherent memory.
            Err(Error::DeviceLost) => self.lost,
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
                let count = json["Total"]["AllocationCount"].as_u64();
                assert_eq!(
                    count,
                    Some(self.held().count() as u64),
                    "the JSON dump's count"
                );
            }
            1 => {
                let svg = self.allocator.memory_map_svg();
                let count = svg.matches(r#"class="alloc "#).count();
                assert_eq!(count, self.held().count(), "the SVG's allocations");
            }
            2 => self.check_memory_map(),
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
                    Ok(report) => assert!(on && report.is_clean(), "{report:?}"),
                    Err(error) => assert!(
                        !on && matches!(error, Error::CorruptionDetectionOff { .. }),
                        "check_corruption: {error:?}"
                    ),
                }
                let _ = self.allocator.stats().to_string();
            }
        }
    }

    /// The memory map's blocks tile, and its memory objects are the device's.
    pub(super) fn check_memory_map(&self) {
        let map = self.allocator.memory_map();
        let mut memories = Vec::new();
        for t in &map.memory_types {
            let pools = t.custom_pools.iter();
            let blocks = t
                .blocks
                .iter()
                .chain(pools.clone().flat_map(|p| p.blocks.iter()));
            for block in blocks {
                let mut end = 0;
                for range in &block.ranges {
                    assert_eq!(range.offset, end, "gap or overlap in the map");
                    end += range.size;
                }
                assert_eq!(end, block.size);
                memories.push(block.memory);
            }
            let dedicated = t
                .dedicated
                .iter()
                .chain(pools.flat_map(|p| p.dedicated.iter()));
            memories.extend(dedicated.map(|d| d.memory));
        }
        let mut device: Vec<_> = self
            .device
            .live_allocations()
            .iter()
            .map(|m| m.memory)
            .collect();
        memories.sort_unstable();
        device.sort_unstable();
        assert_eq!(memories, device, "the memory map's memory objects");
    }
}
