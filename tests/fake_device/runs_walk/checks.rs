//! The walk's checks after every step: each host-visible allocation's
//! bytes, non-coherent neighbours' writes, placements, and what the
//! allocator reports.

use std::collections::HashMap;

use ash::vk;
use vk_suballoc::{Error, ResourceKind};

use super::{Live, Walk};

impl Walk {
    /// Every host-visible allocation holds its tag, as the host and the
    /// GPU see it.
    pub(super) fn check_bytes(&self) {
        for live in self.live.iter().filter(|live| live.host_visible) {
            let a = &live.allocation;
            let host = self.allocator.mapped_slice(a).unwrap();
            assert!(
                host.iter().all(|&b| b == live.tag),
                "{}: the host's bytes of {:?} at {} changed",
                self.context,
                a.memory(),
                a.offset()
            );
            // SAFETY: no slice of the memory is alive.
            let gpu = unsafe { self.device.read(a.memory(), a.offset(), a.size() as usize) };
            assert!(
                gpu.unwrap().iter().all(|&b| b == live.tag),
                "{}: the GPU's bytes of {:?} at {} changed",
                self.context,
                a.memory(),
                a.offset()
            );
        }
    }

    /// In non-coherent memory: every allocation written by the host and
    /// not flushed, one invalidated, the others keep their writes; then
    /// the GPU writes the others and the one is flushed, and the others,
    /// invalidated, read what the GPU wrote.
    pub(super) fn neighbours(&mut self) {
        let picked: Vec<usize> = (0..self.live.len())
            .filter(|&i| self.live[i].non_coherent)
            .collect();
        if picked.len() < 2 {
            return;
        }
        let one = picked[self.rng.below(picked.len() as u64) as usize];
        let others: Vec<usize> = picked.into_iter().filter(|&i| i != one).collect();
        let host_tags: Vec<u8> = others.iter().map(|_| self.tag()).collect();
        for (&i, &tag) in others.iter().zip(&host_tags) {
            let slice = self
                .allocator
                .mapped_slice_mut(&mut self.live[i].allocation);
            slice.unwrap().fill(tag);
        }
        self.allocator
            .invalidate(&mut self.live[one].allocation, ..)
            .unwrap();
        for (&i, &tag) in others.iter().zip(&host_tags) {
            let host = self
                .allocator
                .mapped_slice(&self.live[i].allocation)
                .unwrap();
            assert!(
                host.iter().all(|&b| b == tag),
                "{}: an invalidate at {} dropped unflushed writes at {}",
                self.context,
                self.live[one].allocation.offset(),
                self.live[i].allocation.offset()
            );
            self.allocator.flush(&self.live[i].allocation, ..).unwrap();
        }
        let gpu_tags: Vec<u8> = others.iter().map(|_| self.tag()).collect();
        for (&i, &tag) in others.iter().zip(&gpu_tags) {
            let a = &self.live[i].allocation;
            let bytes = vec![tag; a.size() as usize];
            // SAFETY: no slice of the memory is alive.
            assert!(unsafe { self.device.write(a.memory(), a.offset(), &bytes) });
        }
        self.allocator
            .flush(&self.live[one].allocation, ..)
            .unwrap();
        let flushed_at = self.live[one].allocation.offset();
        for (&i, &tag) in others.iter().zip(&gpu_tags) {
            let live = &mut self.live[i];
            self.allocator.invalidate(&mut live.allocation, ..).unwrap();
            let host = self.allocator.mapped_slice(&live.allocation).unwrap();
            assert!(
                host.iter().all(|&b| b == tag),
                "{}: a flush at {flushed_at} wrote over the GPU's bytes at {}",
                self.context,
                live.allocation.offset()
            );
            live.tag = tag;
        }
    }

    /// No overlap, margins kept, granularity pages apart.
    pub(super) fn check_placements(&self) {
        let mut by_memory: HashMap<vk::DeviceMemory, Vec<&Live>> = HashMap::new();
        for live in self.live.iter().filter(|l| !l.allocation.is_dedicated()) {
            by_memory
                .entry(live.allocation.memory())
                .or_default()
                .push(live);
        }
        let page = self.granularity.max(1);
        for list in by_memory.values_mut() {
            list.sort_by_key(|live| live.allocation.offset());
            for pair in list.windows(2) {
                let (a, b) = (&pair[0].allocation, &pair[1].allocation);
                assert!(
                    a.offset() + a.size() + self.margin <= b.offset(),
                    "{}: {} bytes at {}, then an allocation at {}",
                    self.context,
                    a.size(),
                    a.offset(),
                    b.offset()
                );
            }
            for (i, x) in list.iter().enumerate() {
                for y in &list[i + 1..] {
                    let optimal = |kind| kind == ResourceKind::OptimalImage;
                    let unknown = |kind| kind == ResourceKind::Unknown;
                    let apart =
                        optimal(x.kind) != optimal(y.kind) || unknown(x.kind) || unknown(y.kind);
                    let (a, b) = (&x.allocation, &y.allocation);
                    assert!(
                        !apart
                            || page == 1
                            || (a.offset() + a.size() - 1) / page < b.offset() / page,
                        "{}: {:?} at {} and {:?} at {} share a {page}-byte page",
                        self.context,
                        x.kind,
                        a.offset(),
                        y.kind,
                        b.offset()
                    );
                }
            }
        }
    }

    /// The corruption checks, the device's rules, the figures and the map.
    pub(super) fn check_reports(&self) {
        // Refused exactly when neither detection (with a margin) nor debug
        // fills are on: every layout has host-visible coherent memory.
        let config = self.allocator.config();
        let checked = config.debug_fill || (config.detect_corruption && config.debug_margin != 0);
        match self.allocator.check_corruption(!0) {
            Ok(report) if checked => assert!(report.is_clean(), "{}: {report:?}", self.context),
            result => assert_eq!(
                result.map(|_| ()),
                Err(Error::CorruptionDetectionOff {
                    memory_type_bits: !0
                }),
                "{}: detection or fills on: {checked}",
                self.context
            ),
        }
        assert_eq!(self.allocator.corruptions_detected(), 0, "{}", self.context);
        let violations = self.device.violations();
        assert!(violations.is_empty(), "{}: {violations:?}", self.context);
        if !self.pending {
            let stats = self.allocator.stats();
            let count: u64 = stats.memory_types.iter().map(|t| t.allocations()).sum();
            let bytes: u64 = stats.memory_types.iter().map(|t| t.live_bytes()).sum();
            let sum: u64 = self.live.iter().map(|l| l.allocation.size()).sum();
            assert_eq!(
                count,
                self.live.len() as u64,
                "{}: allocations",
                self.context
            );
            assert_eq!(bytes, sum, "{}: live bytes", self.context);
        }
        let map = self.allocator.memory_map();
        let pools = map.custom_pools().flat_map(|pool| &pool.blocks);
        for block in map.memory_types.iter().flat_map(|t| &t.blocks).chain(pools) {
            super::super::assert_ranges_tile(block, &self.context);
        }
    }
}
