//! Results: the markdown tables, the JSON file, and the target check.

use std::fmt::Write as _;

use crate::backends::Which;

/// One (allocator, trace) cell of the results.
#[derive(Clone, Debug)]
pub struct Row {
    pub allocator: Which,
    pub trace: String,
    pub seed: u64,
    pub runs: usize,
    /// Medians over the runs.
    pub ns_alloc: f64,
    pub ns_free: f64,
    pub ns_op: f64,
    /// Median of the part of `ns_op` spent inside the driver's
    /// `vkAllocateMemory`/`vkFreeMemory` (Vulkan allocators).
    pub ns_driver_op: Option<f64>,
    /// Fastest and slowest run's ns/op, to show the spread.
    pub ns_op_min: f64,
    pub ns_op_max: f64,
    pub allocations: u64,
    pub frees: u64,
    pub failures: u64,
    pub peak_live: u64,
    /// Peak of `VkDeviceMemory` bytes alive (Vulkan allocators), or the
    /// highest end offset (cores): the median over the runs.
    pub peak_reserved: u64,
    /// The smallest and largest `peak_reserved` of the runs.
    pub peak_reserved_range: (u64, u64),
    /// `vkAllocateMemory` calls: the median over the runs.
    pub vk_allocate_calls: Option<u64>,
    /// The fewest and most calls of the runs.
    pub vk_allocate_calls_range: Option<(u64, u64)>,
    pub vk_free_calls: Option<u64>,
    /// Memory objects alive at the end of the trace, by the counting hooks
    /// and by the allocator's own statistics (vk-suballoc only).
    pub end_objects_hooked: Option<u64>,
    pub end_objects_own: Option<u64>,
    /// Hash of every placement offset (`--placement-hash`).
    pub placement_hash: Option<u64>,
}

impl Row {
    pub fn ratio(&self) -> f64 {
        self.peak_reserved as f64 / self.peak_live.max(1) as f64
    }
}

/// What every report starts with: how it was made, and where.
#[derive(Debug, Default)]
pub struct RunHeader {
    pub command: String,
    pub machine: String,
    pub device: String,
    pub driver: String,
    pub seed: u64,
    pub ops: usize,
    /// Runs of each measurement (medians over them are reported).
    pub runs: usize,
}

impl RunHeader {
    /// The markdown's first lines: the machine and the device.
    pub fn markdown(&self, s: &mut String) {
        let _ = writeln!(s, "Machine: {}", self.machine);
        let _ = writeln!(s, "Device: {} ({})", self.device, self.driver);
    }

    /// The JSON document's first fields, each line ending in a comma.
    pub fn json(&self, s: &mut String) {
        let _ = writeln!(s, "  \"command\": {},", quote(&self.command));
        let _ = writeln!(s, "  \"machine\": {},", quote(&self.machine));
        let _ = writeln!(s, "  \"device\": {},", quote(&self.device));
        let _ = writeln!(s, "  \"driver\": {},", quote(&self.driver));
        let _ = writeln!(s, "  \"seed\": {},", self.seed);
        let _ = writeln!(s, "  \"ops\": {},", self.ops);
        let _ = writeln!(s, "  \"runs\": {},", self.runs);
    }
}

/// Everything one invocation measured.
#[derive(Debug, Default)]
pub struct Results {
    pub header: RunHeader,
    pub timer_overhead_ns: f64,
    /// One uncontended `Mutex` lock + unlock.
    pub mutex_pair_ns: f64,
    pub rows: Vec<Row>,
    /// Scaling rows: `trace` is `scaling-<live>`.
    pub scaling: Vec<(usize, Row)>,
    /// The harness alone on each scaling trace (`backends::HarnessFloor`).
    pub harness_floor: Vec<(usize, Floor)>,
    /// The `ring` trace, when it ran.
    pub ring: Option<crate::ring_report::RingSection>,
}

/// What the harness alone costs on one trace: ns per operation, the median
/// of its runs, with the fastest and slowest.
#[derive(Clone, Copy, Debug)]
pub struct Floor {
    pub ns_op: f64,
    pub ns_op_min: f64,
    pub ns_op_max: f64,
}

const MIB: f64 = (1u64 << 20) as f64;

pub fn ns(x: f64) -> String {
    if x >= 10_000.0 {
        format!("{:.1} us", x / 1000.0)
    } else if x >= 100.0 {
        format!("{x:.0}")
    } else {
        format!("{x:.1}")
    }
}

/// [`ns`] with its unit always named: " ns" below 10 µs, where `ns`
/// prints none (a cell that appended " ns" to `ns` printed "25.0 us ns").
fn ns_with_unit(x: f64) -> String {
    if x >= 10_000.0 {
        ns(x)
    } else {
        format!("{} ns", ns(x))
    }
}

fn opt(x: Option<u64>) -> String {
    x.map_or_else(|| "n/a".to_owned(), |v| v.to_string())
}

impl Results {
    fn traces(&self) -> Vec<String> {
        let mut names: Vec<String> = Vec::new();
        for row in &self.rows {
            if !names.contains(&row.trace) {
                names.push(row.trace.clone());
            }
        }
        names
    }

    /// The markdown report (tables, then the ratios against the best peer).
    pub fn markdown(&self) -> String {
        let mut s = String::new();
        self.header.markdown(&mut s);
        let _ = writeln!(
            s,
            "Seed {:#x}, about {} operations per trace, median of {} runs (times, reserved bytes and calls alike; a range in parentheses when the runs differ); clock overhead {:.1} ns per timed segment, subtracted. An uncontended mutex lock + unlock costs {:.1} ns here (only the `vk-suballoc (locked)` and `vulkano` rows take one per call, vulkano's a `parking_lot` mutex per memory type, which it has no way to skip: vk-suballoc's `allocate_mut`/`free_mut`, gpu-alloc and gpu-allocator take `&mut self`, VMA runs `EXTERNALLY_SYNCHRONIZED`, and the cores take none).\n",
            self.header.seed,
            self.header.ops,
            self.header.runs,
            self.timer_overhead_ns,
            self.mutex_pair_ns
        );
        let strategy = crate::backends::strategy();
        if strategy != vk_suballoc::Strategy::MinTime {
            let _ = writeln!(
                s,
                "With `--strategy {}`: the vk-suballoc rows' requests and our core's row place with `Strategy::{strategy:?}`.\n",
                match strategy {
                    vk_suballoc::Strategy::MinMemory => "min-memory",
                    vk_suballoc::Strategy::MinOffset => "min-offset",
                    _ => "max-offset",
                },
            );
        }
        for trace in self.traces() {
            let _ = writeln!(s, "### {trace}\n");
            let _ = writeln!(
                s,
                "| allocator | ns/alloc | ns/free | ns/op (min..max) | of which in driver | peak live MiB | peak reserved MiB | reserved/live | vkAllocateMemory | failures |"
            );
            let _ = writeln!(s, "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
            for row in self.rows.iter().filter(|r| r.trace == trace) {
                let (low, high) = row.peak_reserved_range;
                let mut reserved_note = if low == high {
                    String::new()
                } else {
                    format!(" ({:.1}..{:.1})", low as f64 / MIB, high as f64 / MIB)
                };
                if !row.allocator.is_vulkan() {
                    reserved_note.push_str(" (range)");
                }
                let calls = match (row.vk_allocate_calls, row.vk_allocate_calls_range) {
                    (Some(c), Some((low, high))) if low != high => format!("{c} ({low}..{high})"),
                    (c, _) => opt(c),
                };
                let _ = writeln!(
                    s,
                    "| {} | {} | {} | {} ({}..{}) | {} | {:.1} | {:.1}{} | {:.3} | {} | {} |",
                    row.allocator.name(),
                    ns(row.ns_alloc),
                    ns(row.ns_free),
                    ns(row.ns_op),
                    ns(row.ns_op_min),
                    ns(row.ns_op_max),
                    row.ns_driver_op.map_or_else(|| "n/a".to_owned(), ns),
                    row.peak_live as f64 / MIB,
                    row.peak_reserved as f64 / MIB,
                    reserved_note,
                    row.ratio(),
                    calls,
                    row.failures
                );
            }
            let _ = writeln!(s);
        }
        if let Some(ring) = &self.ring {
            s.push_str(&ring.markdown());
        }
        if !self.scaling.is_empty() {
            s.push_str(&self.scaling_markdown());
        }
        s.push_str(&self.targets_markdown());
        s
    }

    fn scaling_markdown(&self) -> String {
        let mut s = String::new();
        let mut lives: Vec<usize> = self.scaling.iter().map(|(n, _)| *n).collect();
        lives.sort_unstable();
        lives.dedup();
        let _ = writeln!(
            s,
            "### scaling: ns per operation (free + allocate, 64 B..1 KiB) at N live allocations\n"
        );
        let mut header = "| allocator |".to_owned();
        let mut rule = "|---|".to_owned();
        for n in &lives {
            let _ = write!(header, " {n} |");
            rule.push_str("---:|");
        }
        header.push_str(" max/min |");
        rule.push_str("---:|");
        let _ = writeln!(s, "{header}\n{rule}");
        for which in Which::ALL {
            let cells: Vec<Option<f64>> = lives
                .iter()
                .map(|n| {
                    self.scaling
                        .iter()
                        .find(|(m, r)| m == n && r.allocator == which)
                        .map(|(_, r)| r.ns_op)
                })
                .collect();
            if cells.iter().all(Option::is_none) {
                continue;
            }
            let mut line = format!("| {} |", which.name());
            for cell in &cells {
                let _ = write!(line, " {} |", cell.map_or_else(|| "skipped".to_owned(), ns));
            }
            let _ = writeln!(line, " {} |", growth(&lives, &cells));
            s.push_str(&line);
        }
        let floor: Vec<Option<f64>> = lives
            .iter()
            .map(|n| {
                self.harness_floor
                    .iter()
                    .find(|(m, _)| m == n)
                    .map(|(_, f)| f.ns_op)
            })
            .collect();
        if floor.iter().any(Option::is_some) {
            let mut line = "| harness alone (no allocator) |".to_owned();
            for cell in &floor {
                let _ = write!(line, " {} |", cell.map_or_else(|| "–".to_owned(), ns));
            }
            let _ = writeln!(line, " {} |", growth(&lives, &floor));
            s.push_str(&line);
            let _ = writeln!(
                s,
                "\nThe harness alone: the replay loop storing and taking 64-byte handles (vk-suballoc's size) at random slots of its table, one slot per live allocation, with no allocator; every row above includes it."
            );
            if let Some(flat) = self.flat_allocator_growth() {
                let _ = writeln!(
                    s,
                    "An allocator whose own cost stayed at vk-suballoc's at {} live allocations would measure {flat:.2}x here.",
                    lives[0]
                );
            }
        }
        s.push('\n');
        s
    }

    /// What an allocator whose own cost per operation (its row less the
    /// harness's) stayed at vk-suballoc's at the fewest live allocations
    /// would measure as its slowest over fastest ns/op: the growth of the
    /// harness alone under that constant cost. `None` without both rows at
    /// the fewest live allocations and a floor at two counts or more.
    pub fn flat_allocator_growth(&self) -> Option<f64> {
        if self.harness_floor.len() < 2 {
            return None;
        }
        let &(first, first_floor) = self.harness_floor.iter().min_by_key(|(n, _)| *n)?;
        let ours = self
            .scaling
            .iter()
            .find(|(n, r)| *n == first && r.allocator == Which::VkSuballoc)?
            .1
            .ns_op;
        let own = (ours - first_floor.ns_op).max(0.0);
        let totals = self.harness_floor.iter().map(|(_, f)| own + f.ns_op);
        let max = totals.clone().fold(f64::MIN, f64::max);
        let min = totals.fold(f64::MAX, f64::min);
        Some(max / min)
    }

    /// The ratios against the best peer and the verdict on each target.
    /// Empty when no trace but the ring trace ran (it has its own ratios);
    /// a run of the scaling traces alone (`--traces ""`) keeps the
    /// flatness verdict and the note on failed allocations.
    pub fn targets_markdown(&self) -> String {
        let mut s = String::new();
        if !self.traces().is_empty() {
            self.peer_table_markdown(&mut s);
        }
        // A row with failed allocations timed and reserved for fewer
        // allocations than the others: its verdicts do not compare. The
        // scaling rows' too, whose table shows no failures column.
        let scaling_rows = self.scaling.iter().map(|(_, r)| r);
        for row in self
            .rows
            .iter()
            .chain(scaling_rows)
            .filter(|r| r.failures > 0)
        {
            let _ = writeln!(
                s,
                "\n**{}: {} failed {} allocations**, so its times, reserved/live and calls cover less work than the other rows'.",
                row.trace,
                row.allocator.name(),
                row.failures
            );
        }
        self.scaling_verdict_markdown(&mut s);
        s
    }

    /// The table of vk-suballoc against the best peer, trace by trace,
    /// appended to `s`.
    fn peer_table_markdown(&self, s: &mut String) {
        let _ = writeln!(s, "### vk-suballoc against the best peer\n");
        let _ = writeln!(
            s,
            "| trace | speed-up vs fastest Vulkan peer (>= 2) | vs our core (<= 1.5) | reserved/live: ours vs best peer (lower) | vkAllocateMemory: ours vs fewest peer (<=) |"
        );
        let _ = writeln!(s, "|---|---:|---:|---:|---:|");
        for trace in self.traces() {
            let rows: Vec<&Row> = self.rows.iter().filter(|r| r.trace == trace).collect();
            let Some(ours) = rows.iter().find(|r| r.allocator == Which::VkSuballoc) else {
                continue;
            };
            let peers: Vec<&&Row> = rows.iter().filter(|r| r.allocator.is_peer()).collect();
            let fastest = peers.iter().min_by(|a, b| a.ns_op.total_cmp(&b.ns_op));
            let tightest = peers.iter().min_by(|a, b| a.ratio().total_cmp(&b.ratio()));
            let fewest = peers
                .iter()
                .filter_map(|r| r.vk_allocate_calls.map(|c| (c, r)))
                .min_by_key(|(c, _)| *c);
            let core = rows.iter().find(|r| r.allocator == Which::OurCore);
            let verdict = |ok: bool| if ok { "met" } else { "MISSED" };
            let speed = fastest.map_or_else(
                || "n/a".to_owned(),
                |p| {
                    let x = p.ns_op / ours.ns_op;
                    format!(
                        "{x:.2}x ({}: {}) {}",
                        p.allocator.key(),
                        ns_with_unit(p.ns_op),
                        verdict(x >= 2.0)
                    )
                },
            );
            let vs_core = core.map_or_else(
                || "n/a".to_owned(),
                |c| {
                    let x = ours.ns_op / c.ns_op;
                    // The core never calls the driver: also compare what is
                    // left outside vkAllocateMemory/vkFreeMemory.
                    let outside = ours.ns_op - ours.ns_driver_op.unwrap_or(0.0);
                    // One unit for both when they share it ("42.6 vs 25.4 ns").
                    let mine = if ours.ns_op < 10_000.0 && c.ns_op >= 10_000.0 {
                        ns_with_unit(ours.ns_op)
                    } else {
                        ns(ours.ns_op)
                    };
                    format!(
                        "{x:.2}x ({mine} vs {}) {}; {:.2}x outside the driver",
                        ns_with_unit(c.ns_op),
                        verdict(x <= 1.5),
                        outside / c.ns_op
                    )
                },
            );
            let ratio = tightest.map_or_else(
                || "n/a".to_owned(),
                |p| {
                    let ok = peers.iter().all(|q| ours.ratio() < q.ratio());
                    format!(
                        "{:.3} vs {:.3} ({}) {}",
                        ours.ratio(),
                        p.ratio(),
                        p.allocator.key(),
                        verdict(ok)
                    )
                },
            );
            let calls = fewest.map_or_else(
                || "n/a".to_owned(),
                |(c, p)| {
                    let mine = ours.vk_allocate_calls.unwrap_or(u64::MAX);
                    format!(
                        "{mine} vs {c} ({}) {}",
                        p.allocator.key(),
                        verdict(mine <= c)
                    )
                },
            );
            let _ = writeln!(s, "| {trace} | {speed} | {vs_core} | {ratio} | {calls} |");
        }
    }

    /// The flatness verdict of the scaling run, when it ran at two live
    /// counts or more, appended to `s`.
    fn scaling_verdict_markdown(&self, s: &mut String) {
        let ours: Vec<f64> = self
            .scaling
            .iter()
            .filter(|(_, r)| r.allocator == Which::VkSuballoc)
            .map(|(_, r)| r.ns_op)
            .collect();
        if ours.len() > 1 {
            let flat = ours.iter().copied().fold(f64::MIN, f64::max)
                / ours.iter().copied().fold(f64::MAX, f64::min);
            let _ = writeln!(
                s,
                "\nScaling: vk-suballoc's slowest/fastest ns/op across live counts = {flat:.2} (target <= 1.3: {}).",
                if flat <= 1.3 { "met" } else { "MISSED" }
            );
            if let Some(flat) = self.flat_allocator_growth() {
                let _ = writeln!(
                    s,
                    "With the harness's own growth, an allocator of constant cost would measure {flat:.2}."
                );
            }
        }
    }

    /// The JSON document (hand-written: no serde in the bench's build).
    pub fn json(&self) -> String {
        let mut s = String::from("{\n");
        self.header.json(&mut s);
        let _ = writeln!(s, "  \"timer_overhead_ns\": {:.2},", self.timer_overhead_ns);
        let _ = writeln!(s, "  \"mutex_lock_unlock_ns\": {:.2},", self.mutex_pair_ns);
        s.push_str("  \"results\": [\n");
        let rows: Vec<String> = self.rows.iter().map(|r| row_json(r, None)).collect();
        s.push_str(&rows.join(",\n"));
        s.push_str("\n  ],\n  \"scaling\": [\n");
        let rows: Vec<String> = self
            .scaling
            .iter()
            .map(|(n, r)| row_json(r, Some(*n)))
            .collect();
        s.push_str(&rows.join(",\n"));
        s.push_str("\n  ],\n  \"harness_floor\": [\n");
        let rows: Vec<String> = self
            .harness_floor
            .iter()
            .map(|(n, f)| {
                format!(
                    "    {{\"live\": {n}, \"ns_op\": {:.2}, \"ns_op_min\": {:.2}, \"ns_op_max\": {:.2}}}",
                    f.ns_op, f.ns_op_min, f.ns_op_max
                )
            })
            .collect();
        s.push_str(&rows.join(",\n"));
        s.push_str("\n  ]");
        if let Some(ring) = &self.ring {
            s.push_str(",\n");
            s.push_str(&ring.json());
        }
        s.push_str("\n}\n");
        s
    }
}

/// A scaling row's slowest over fastest ns/op. When some live counts were
/// skipped, the range it spans is named: a ratio over 1e3..1e4 is not
/// comparable with one over 1e3..1e6.
fn growth(lives: &[usize], cells: &[Option<f64>]) -> String {
    let present: Vec<(usize, f64)> = lives
        .iter()
        .zip(cells)
        .filter_map(|(&n, cell)| cell.map(|x| (n, x)))
        .collect();
    let (Some(first), Some(last)) = (present.first(), present.last()) else {
        return "n/a".to_owned();
    };
    let max = present.iter().map(|&(_, x)| x).fold(f64::MIN, f64::max);
    let min = present.iter().map(|&(_, x)| x).fold(f64::MAX, f64::min);
    let flat = max / min;
    if present.len() == cells.len() {
        format!("{flat:.2}")
    } else {
        format!("{flat:.2} ({}..{} only)", first.0, last.0)
    }
}

pub fn quote(text: &str) -> String {
    let mut s = String::from("\"");
    for c in text.chars() {
        match c {
            '"' => s.push_str("\\\""),
            '\\' => s.push_str("\\\\"),
            '\n' => s.push_str("\\n"),
            c if (c as u32) < 0x20 => {
                let _ = write!(s, "\\u{:04x}", c as u32);
            }
            c => s.push(c),
        }
    }
    s.push('"');
    s
}

fn num(x: Option<u64>) -> String {
    x.map_or_else(|| "null".to_owned(), |v| v.to_string())
}

fn row_json(r: &Row, live: Option<usize>) -> String {
    let live = live.map_or_else(String::new, |n| format!("\"live\": {n}, "));
    format!(
        "    {{{live}\"allocator\": {}, \"trace\": {}, \"seed\": {}, \"runs\": {}, \"ns_per_alloc\": {:.2}, \"ns_per_free\": {:.2}, \"ns_per_op\": {:.2}, \"ns_per_op_min\": {:.2}, \"ns_per_op_max\": {:.2}, \"ns_per_op_in_driver\": {}, \"allocations\": {}, \"frees\": {}, \"failures\": {}, \"peak_live_bytes\": {}, \"peak_reserved_bytes\": {}, \"peak_reserved_bytes_min\": {}, \"peak_reserved_bytes_max\": {}, \"reserved_per_live\": {:.4}, \"reserved_is_range_high_water\": {}, \"vk_allocate_memory_calls\": {}, \"vk_allocate_memory_calls_min\": {}, \"vk_allocate_memory_calls_max\": {}, \"vk_free_memory_calls\": {}, \"end_memory_objects_hooked\": {}, \"end_memory_objects_own_stats\": {}, \"placement_hash\": {}}}",
        quote(r.allocator.key()),
        quote(&r.trace),
        r.seed,
        r.runs,
        r.ns_alloc,
        r.ns_free,
        r.ns_op,
        r.ns_op_min,
        r.ns_op_max,
        r.ns_driver_op
            .map_or_else(|| "null".to_owned(), |x| format!("{x:.2}")),
        r.allocations,
        r.frees,
        r.failures,
        r.peak_live,
        r.peak_reserved,
        r.peak_reserved_range.0,
        r.peak_reserved_range.1,
        r.ratio(),
        !r.allocator.is_vulkan(),
        num(r.vk_allocate_calls),
        num(r.vk_allocate_calls_range.map(|r| r.0)),
        num(r.vk_allocate_calls_range.map(|r| r.1)),
        num(r.vk_free_calls),
        num(r.end_objects_hooked),
        num(r.end_objects_own),
        num(r.placement_hash),
    )
}

#[cfg(test)]
mod tests;
