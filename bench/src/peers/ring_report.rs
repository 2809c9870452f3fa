//! The `ring` trace's rows, its markdown table and its JSON.

use std::fmt::Write as _;

use crate::report::{ns, quote};
use crate::ring::RingFigures;
use crate::ring_backends::RingWhich;
use crate::vulkan::MemoryCounts;

const MIB: f64 = (1u64 << 20) as f64;

/// One ring row: medians over its runs.
#[derive(Clone, Debug)]
pub struct RingRow {
    pub which: RingWhich,
    pub runs: usize,
    /// Allocation, frame starts and ends, per allocation; fastest and
    /// slowest run.
    pub all_in: f64,
    pub all_in_min: f64,
    pub all_in_max: f64,
    /// The allocation calls alone, per allocation.
    pub alloc: f64,
    /// Frame starts (release, reclaim) and ends, per allocation and per
    /// frame.
    pub frame_per_alloc: f64,
    pub per_frame: f64,
    /// Of `all_in`, inside `vkAllocateMemory`/`vkFreeMemory`.
    pub driver_per_alloc: Option<f64>,
    pub allocations: u64,
    pub frames: u64,
    pub peak_live: u64,
    /// Hooks' peak of `VkDeviceMemory` bytes, or the cores' highest end
    /// offset: the median, and the runs' range.
    pub peak_reserved: u64,
    pub peak_reserved_range: (u64, u64),
    pub vk_allocate_calls: Option<u64>,
    /// Worst run's checks.
    pub failures: u64,
    pub misaligned: u64,
    pub overlaps: u64,
    pub leaked: Option<u64>,
    pub memory_left: u64,
}

impl RingRow {
    pub fn new(which: RingWhich, results: &[(RingFigures, MemoryCounts)]) -> Self {
        let figures: Vec<RingFigures> = results.iter().map(|r| r.0).collect();
        let med = |f: fn(&RingFigures) -> f64| {
            let mut v: Vec<f64> = figures.iter().map(f).collect();
            crate::median(&mut v)
        };
        let mut all_in: Vec<f64> = figures
            .iter()
            .map(RingFigures::all_in_ns_per_alloc)
            .collect();
        let all_in_median = crate::median(&mut all_in);
        let vulkan = which.is_vulkan();
        let mut reserved: Vec<u64> = results
            .iter()
            .map(|(f, c)| if vulkan { c.peak_bytes } else { f.high_water })
            .collect();
        let (peak_reserved, low, high) = crate::median_range(&mut reserved);
        let mut calls: Vec<u64> = results.iter().map(|r| r.1.allocate_calls).collect();
        let worst = |f: fn(&RingFigures) -> u64| figures.iter().map(f).max().unwrap_or(0);
        let last = figures.last().copied().unwrap_or_default();
        Self {
            which,
            runs: figures.len(),
            all_in: all_in_median,
            all_in_min: all_in[0],
            all_in_max: all_in[all_in.len() - 1],
            alloc: med(RingFigures::ns_per_alloc),
            frame_per_alloc: med(RingFigures::frame_ns_per_alloc),
            per_frame: med(RingFigures::ns_per_frame),
            driver_per_alloc: vulkan.then(|| med(|f| f.driver_ns / f.allocs.max(1) as f64)),
            allocations: last.allocs,
            frames: last.frames,
            peak_live: worst(|f| f.peak_live),
            peak_reserved,
            peak_reserved_range: (low, high),
            vk_allocate_calls: vulkan.then(|| crate::median_range(&mut calls).0),
            failures: worst(|f| f.failures),
            misaligned: worst(|f| f.misaligned),
            overlaps: worst(|f| f.overlaps),
            leaked: figures.iter().filter_map(|f| f.leaked).max(),
            memory_left: worst(|f| f.memory_left),
        }
    }

    /// Every check passed in every run.
    pub fn clean(&self) -> bool {
        self.failures + self.misaligned + self.overlaps + self.memory_left == 0
            && self.leaked.unwrap_or(0) == 0
    }
}

/// The ring trace's part of a report.
#[derive(Debug, Default)]
pub struct RingSection {
    pub seed: u64,
    pub allocations: u64,
    pub frames: usize,
    pub align: u64,
    /// Bytes of the ring, the VMA pool's block and the cores' range.
    pub capacity: u64,
    pub peak_live: u64,
    /// One `vkGetSemaphoreCounterValue`, ns.
    pub semaphore_poll_ns: Option<f64>,
    pub rows: Vec<RingRow>,
}

impl RingSection {
    pub fn markdown(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(s, "### ring: per-frame transient allocations\n");
        let _ = writeln!(
            s,
            "Seed {:#x}: {} frames, {} allocations of 256 B..256 KiB (log-uniform) at {}-byte alignment, each frame's released when it completes 2 or 3 frames later; peak live {:.1} MiB; rings, VMA's pool block and the cores {:.0} MiB. ns/alloc counts the allocation calls, frame the frame starts (release or collect) and ends (`end_frame_timeline`, `finish_frame`) over the allocations; per frame, the same over the frames. One `vkGetSemaphoreCounterValue` (what the ring's `collect` polls) costs {} ns here.\n",
            self.seed,
            self.frames,
            self.allocations,
            self.align,
            self.peak_live as f64 / MIB,
            self.capacity as f64 / MIB,
            self.semaphore_poll_ns.map_or_else(|| "n/a".to_owned(), ns),
        );
        let _ = writeln!(
            s,
            "| allocator | ns/alloc, all in (min..max) | allocate | frame, per alloc | frame, ns per frame | of which in driver, per alloc | peak reserved MiB | vkAllocateMemory | failures | checks |"
        );
        let _ = writeln!(s, "|---|---:|---:|---:|---:|---:|---:|---:|---:|---|");
        for row in &self.rows {
            let (low, high) = row.peak_reserved_range;
            let mut reserved = format!("{:.1}", row.peak_reserved as f64 / MIB);
            if low != high {
                let _ = write!(
                    reserved,
                    " ({:.1}..{:.1})",
                    low as f64 / MIB,
                    high as f64 / MIB
                );
            }
            if !row.which.is_vulkan() {
                reserved.push_str(" (range)");
            }
            let checks = if row.clean() {
                "ok".to_owned()
            } else {
                format!(
                    "FAILED: {} misaligned, {} overlaps, {:?} leaked, {} bytes left",
                    row.misaligned, row.overlaps, row.leaked, row.memory_left
                )
            };
            let _ = writeln!(
                s,
                "| {} | {} ({}..{}) | {} | {} | {} | {} | {} | {} | {} | {} |",
                row.which.name(),
                ns(row.all_in),
                ns(row.all_in_min),
                ns(row.all_in_max),
                ns(row.alloc),
                ns(row.frame_per_alloc),
                ns(row.per_frame),
                row.driver_per_alloc.map_or_else(|| "n/a".to_owned(), ns),
                reserved,
                row.vk_allocate_calls
                    .map_or_else(|| "n/a".to_owned(), |c| c.to_string()),
                row.failures,
                checks
            );
        }
        if let Some(ring) = self
            .rows
            .iter()
            .find(|r| r.which == RingWhich::VkSuballocRing)
        {
            let _ = writeln!(s, "\nvk-suballoc's ring against each row, all in:\n");
            let _ = writeln!(s, "| row | its ns/alloc over the ring's |");
            let _ = writeln!(s, "|---|---:|");
            for row in self.rows.iter().filter(|r| r.which != ring.which) {
                let _ = writeln!(
                    s,
                    "| {} | {:.2}x |",
                    row.which.name(),
                    row.all_in / ring.all_in
                );
            }
        }
        s.push('\n');
        s
    }

    /// The `"ring"` member of the JSON document (no trailing comma).
    pub fn json(&self) -> String {
        let rows: Vec<String> = self
            .rows
            .iter()
            .map(|r| {
                format!(
                    "      {{\"allocator\": {}, \"runs\": {}, \"ns_per_alloc_all_in\": {:.2}, \"ns_per_alloc_all_in_min\": {:.2}, \"ns_per_alloc_all_in_max\": {:.2}, \"ns_per_alloc_allocate\": {:.2}, \"ns_per_alloc_frame\": {:.2}, \"ns_per_frame\": {:.2}, \"ns_per_alloc_in_driver\": {}, \"allocations\": {}, \"frames\": {}, \"peak_live_bytes\": {}, \"peak_reserved_bytes\": {}, \"peak_reserved_bytes_min\": {}, \"peak_reserved_bytes_max\": {}, \"reserved_is_range_high_water\": {}, \"vk_allocate_memory_calls\": {}, \"failures\": {}, \"misaligned\": {}, \"overlaps\": {}, \"leaked\": {}, \"memory_left_bytes\": {}}}",
                    quote(r.which.key()),
                    r.runs,
                    r.all_in,
                    r.all_in_min,
                    r.all_in_max,
                    r.alloc,
                    r.frame_per_alloc,
                    r.per_frame,
                    r.driver_per_alloc
                        .map_or_else(|| "null".to_owned(), |x| format!("{x:.2}")),
                    r.allocations,
                    r.frames,
                    r.peak_live,
                    r.peak_reserved,
                    r.peak_reserved_range.0,
                    r.peak_reserved_range.1,
                    !r.which.is_vulkan(),
                    r.vk_allocate_calls
                        .map_or_else(|| "null".to_owned(), |c| c.to_string()),
                    r.failures,
                    r.misaligned,
                    r.overlaps,
                    r.leaked.map_or_else(|| "null".to_owned(), |c| c.to_string()),
                    r.memory_left,
                )
            })
            .collect();
        format!(
            "  \"ring\": {{\n    \"seed\": {}, \"frames\": {}, \"allocations\": {}, \"align\": {}, \"capacity_bytes\": {}, \"peak_live_bytes\": {}, \"semaphore_poll_ns\": {},\n    \"rows\": [\n{}\n    ]\n  }}",
            self.seed,
            self.frames,
            self.allocations,
            self.align,
            self.capacity,
            self.peak_live,
            self.semaphore_poll_ns
                .map_or_else(|| "null".to_owned(), |x| format!("{x:.2}")),
            rows.join(",\n")
        )
    }
}
