//! `--defragment`'s markdown tables and JSON document.

use std::fmt::Write as _;

use crate::defragment::{DefragRow, PoolRow, Replay};
use crate::report::RunHeader;

const MIB: f64 = (1u64 << 20) as f64;

/// Everything one `--defragment` invocation measured.
#[derive(Debug, Default)]
pub struct DefragResults {
    /// Its `runs` are those of each replay with plans (plan times are
    /// medians over them).
    pub header: RunHeader,
    pub rows: Vec<DefragRow>,
    /// The scaling traces: live allocations, operations between plans,
    /// the replay with plans.
    pub scaling: Vec<(usize, usize, Replay)>,
    /// Each trace in one fixed-size pool block.
    pub pools: Vec<PoolRow>,
}

fn mib(bytes: u64) -> String {
    format!("{:.1}", bytes as f64 / MIB)
}

fn ratio(reserved: f64, live: f64) -> String {
    if live > 0.0 {
        format!("{:.3}", reserved / live)
    } else {
        "n/a".to_owned()
    }
}

fn opt_ns(x: Option<f64>) -> String {
    x.map_or_else(|| "n/a".to_owned(), |x| format!("{x:.0}"))
}

impl DefragResults {
    pub fn markdown(&self) -> String {
        let mut s = String::new();
        self.header.markdown(&mut s);
        let _ = writeln!(
            s,
            "Seed {:#x}, about {} operations per trace, plan times the median of {} runs. vk-suballoc alone, through `allocate_mut`/`free_mut` with the timed table's requirements, replayed plain and with a plan over every live allocation every N operations (no move or byte limits) up to the trace's last allocation. Each plan is carried out at once: the destination replaces the handle and the old allocation is freed; no resource is created and nothing is copied, so a real engine's resource creation, GPU copy and wait are not in these figures. VMA's own defragmentation was not run: this is not a comparison with the peers. Reserved bytes and calls are counted by the same trampolines as the timed table. \"End\" is just after the trace's last allocation, before its final free-all; \"mean\" averages over the operations up to then.\n",
            self.header.seed, self.header.ops, self.header.runs
        );
        let _ = writeln!(s, "### Memory: plain vs. with plans\n");
        let _ = writeln!(
            s,
            "| trace | replay | peak live MiB | peak reserved MiB | peak reserved/live | end live MiB | end reserved MiB | end reserved/live | mean reserved/live | vkAllocateMemory | vkFreeMemory | failures |"
        );
        let _ = writeln!(
            s,
            "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
        );
        for row in &self.rows {
            let plans = format!("plan every {} ops", row.every);
            let any_fill = format!("plan every {} ops, any fill", row.every);
            let compacting = format!("plan every {} ops, compacting", row.every);
            let replays = [
                ("plain", &row.plain),
                (plans.as_str(), &row.planned),
                (any_fill.as_str(), &row.any_fill),
                (compacting.as_str(), &row.compacted),
            ];
            for (name, r) in replays {
                let _ = writeln!(
                    s,
                    "| {} | {name} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
                    row.trace,
                    mib(r.peak_live),
                    mib(r.peak_reserved),
                    ratio(r.peak_reserved as f64, r.peak_live as f64),
                    mib(r.end_live),
                    mib(r.end_reserved),
                    ratio(r.end_reserved as f64, r.end_live as f64),
                    ratio(r.mean_reserved, r.mean_live),
                    r.allocate_calls,
                    r.free_calls,
                    r.failures
                );
            }
        }
        let _ = writeln!(s, "\n### Plans\n");
        let _ = writeln!(
            s,
            "| trace | replay | plans (with moves) | allocations listed per plan (median / max) | moves (within a block; blocks packed) | MiB moved | blocks emptied (MiB) | blocks released | plan µs (median / max) | plan ns per listed allocation (median) | plan ns per move | free ns per move |"
        );
        let _ = writeln!(
            s,
            "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
        );
        for (row, name, r) in self
            .rows
            .iter()
            .flat_map(|row| row.with_plans().map(|(name, r)| (row, name, r)))
        {
            let (listed_median, listed_max) = r.movables_median_max();
            let (ns_median, ns_max) = r.plan_ns_median_max();
            let (within, packed) = r.within_block();
            let _ = writeln!(
                s,
                "| {} | {name} | {} ({}) | {listed_median} / {listed_max} | {} ({within}; {packed}) | {} | {} ({}) | {} | {:.1} / {:.1} | {:.1} | {} | {} |",
                row.trace,
                r.plans.len(),
                r.plans_with_moves(),
                r.moves(),
                mib(r.bytes_moved()),
                r.blocks_emptied(),
                mib(r.block_bytes_emptied()),
                r.blocks_released(),
                ns_median as f64 / 1000.0,
                ns_max as f64 / 1000.0,
                r.plan_ns_per_movable(),
                opt_ns(r.plan_ns_per_move()),
                opt_ns(r.free_ns_per_move()),
            );
        }
        if !self.pools.is_empty() {
            s.push_str(&self.pools_markdown());
        }
        if !self.scaling.is_empty() {
            s.push_str(&self.scaling_markdown());
        }
        let scaling_names: Vec<String> = self
            .scaling
            .iter()
            .map(|(live, _, _)| format!("scaling-{live}"))
            .collect();
        let bad: Vec<String> = self
            .rows
            .iter()
            .flat_map(|row| {
                row.with_plans()
                    .map(|(name, r)| (row.trace.as_str(), name, r))
            })
            .chain(self.pools.iter().flat_map(|p| {
                [
                    (p.trace.as_str(), "one pool block, plain", &p.plain),
                    (p.trace.as_str(), "one pool block, compacting", &p.compacting),
                ]
            }))
            .chain(
                self.scaling
                    .iter()
                    .zip(&scaling_names)
                    .map(|((_, _, r), trace)| (trace.as_str(), "plans", r)),
            )
            .filter(|(_, _, r)| {
                r.overlaps + r.granularity_conflicts + r.misplaced_moves + r.pool_errors > 0
            })
            .map(|(trace, name, r)| {
                format!(
                    "**{trace} ({name}): {} overlaps, {} granularity conflicts, {} moves across types, or within one memory object but not wholly below their source or not compacting, {} pool requests failed for another reason than a full pool**",
                    r.overlaps, r.granularity_conflicts, r.misplaced_moves, r.pool_errors
                )
            })
            .collect();
        if bad.is_empty() {
            let _ = writeln!(
                s,
                "\nChecked after every plan: no overlap, no buffer and optimal image in one `bufferImageGranularity` page, every destination in its source's memory type and another memory object, or (compacting) in its source's, wholly below it; no pool request failed but for a full pool."
            );
        } else {
            let _ = writeln!(s, "\n{}", bad.join("\n\n"));
        }
        s
    }

    /// Each trace in one fixed-size pool block: what compacting plans save
    /// of the requests that find no free range.
    fn pools_markdown(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(
            s,
            "\n### One fixed-size pool block: requests refused, plain vs. compacting plans\n\nEach trace replayed into a custom pool of one block (`max_blocks(1)`) 2, 5 or 25 % larger than its peak live bytes: a request no free range holds fails (`PoolFull`) instead of making a block. Compacting plans: `compact_blocks(true)` every N operations, over every live allocation.\n"
        );
        let _ = writeln!(
            s,
            "| trace | block MiB (peak live +) | replay | requests refused | MiB refused | moves | MiB moved | plan µs (median / max) |"
        );
        let _ = writeln!(s, "|---|---:|---|---:|---:|---:|---:|---:|");
        for p in &self.pools {
            let compacting = format!("compacting plan every {} ops", p.every);
            for (name, r) in [("plain", &p.plain), (compacting.as_str(), &p.compacting)] {
                let (ns_median, ns_max) = r.plan_ns_median_max();
                let _ = writeln!(
                    s,
                    "| {} | {} (+{} %) | {name} | {} | {} | {} | {} | {:.1} / {:.1} |",
                    p.trace,
                    mib(p.block_bytes),
                    p.headroom_percent,
                    r.failures,
                    mib(r.failed_bytes),
                    r.moves(),
                    mib(r.bytes_moved()),
                    ns_median as f64 / 1000.0,
                    ns_max as f64 / 1000.0,
                );
            }
        }
        s
    }

    /// What a plan costs as live allocations grow: the scaling traces
    /// (64 B..1 KiB buffers).
    fn scaling_markdown(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(
            s,
            "\n### Plan cost at N live allocations (scaling traces: 64 B..1 KiB buffers, default limits)\n"
        );
        let _ = writeln!(
            s,
            "| live allocations | plan every | plans (with moves) | allocations listed per plan (median / max) | moves | blocks emptied | plan µs (median / max) | plan ns per listed allocation (median) |"
        );
        let _ = writeln!(s, "|---:|---:|---:|---:|---:|---:|---:|---:|");
        for (live, every, r) in &self.scaling {
            let (listed_median, listed_max) = r.movables_median_max();
            let (ns_median, ns_max) = r.plan_ns_median_max();
            let _ = writeln!(
                s,
                "| {live} | {every} ops | {} ({}) | {listed_median} / {listed_max} | {} | {} | {:.1} / {:.1} | {:.1} |",
                r.plans.len(),
                r.plans_with_moves(),
                r.moves(),
                r.blocks_emptied(),
                ns_median as f64 / 1000.0,
                ns_max as f64 / 1000.0,
                r.plan_ns_per_movable(),
            );
        }
        s
    }

    /// The JSON document (hand-written, as the timed table's).
    pub fn json(&self) -> String {
        let mut s = String::from("{\n");
        self.header.json(&mut s);
        s.push_str("  \"defragment\": [\n");
        let rows: Vec<String> = self
            .rows
            .iter()
            .map(|row| {
                format!(
                    "    {{\"trace\": {}, \"seed\": {}, \"ops\": {}, \"plan_every_ops\": {},\n      \"plain\": {},\n      \"plans\": {},\n      \"plans_any_fill\": {},\n      \"plans_compacting\": {}}}",
                    crate::report::quote(&row.trace),
                    row.seed,
                    row.ops,
                    row.every,
                    replay_json(&row.plain),
                    replay_json(&row.planned),
                    replay_json(&row.any_fill),
                    replay_json(&row.compacted)
                )
            })
            .collect();
        s.push_str(&rows.join(",\n"));
        s.push_str("\n  ],\n  \"fixed_pool\": [\n");
        let rows: Vec<String> = self
            .pools
            .iter()
            .map(|p| {
                format!(
                    "    {{\"trace\": {}, \"headroom_percent\": {}, \"block_bytes\": {}, \"plan_every_ops\": {},\n      \"plain\": {},\n      \"compacting\": {}}}",
                    crate::report::quote(&p.trace),
                    p.headroom_percent,
                    p.block_bytes,
                    p.every,
                    replay_json(&p.plain),
                    replay_json(&p.compacting)
                )
            })
            .collect();
        s.push_str(&rows.join(",\n"));
        s.push_str("\n  ],\n  \"scaling\": [\n");
        let rows: Vec<String> = self
            .scaling
            .iter()
            .map(|(live, every, r)| {
                format!(
                    "    {{\"live\": {live}, \"plan_every_ops\": {every}, \"plans\": {}}}",
                    replay_json(r)
                )
            })
            .collect();
        s.push_str(&rows.join(",\n"));
        s.push_str("\n  ]\n}\n");
        s
    }
}

fn replay_json(r: &Replay) -> String {
    let plans: Vec<String> = r
        .plans
        .iter()
        .map(|p| {
            format!(
                "[{}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}]",
                p.op,
                p.movables,
                p.ns,
                p.moves,
                p.bytes_moved,
                p.blocks,
                p.block_bytes,
                p.released,
                p.free_ns,
                p.within_block,
                p.compacted
            )
        })
        .collect();
    format!(
        "{{\"peak_live_bytes\": {}, \"peak_reserved_bytes\": {}, \"end_live_bytes\": {}, \"end_reserved_bytes\": {}, \"mean_live_bytes\": {:.0}, \"mean_reserved_bytes\": {:.0}, \"vk_allocate_memory_calls\": {}, \"vk_free_memory_calls\": {}, \"failures\": {}, \"failed_bytes\": {}, \"overlaps\": {}, \"granularity_conflicts\": {}, \"misplaced_moves\": {}, \"pool_errors\": {}, \"plan_columns\": [\"op\", \"movables\", \"plan_ns\", \"moves\", \"bytes_moved\", \"blocks_emptied\", \"block_bytes_emptied\", \"blocks_released\", \"free_ns\", \"moves_within_block\", \"blocks_compacted\"], \"plans\": [{}]}}",
        r.peak_live,
        r.peak_reserved,
        r.end_live,
        r.end_reserved,
        r.mean_live,
        r.mean_reserved,
        r.allocate_calls,
        r.free_calls,
        r.failures,
        r.failed_bytes,
        r.overlaps,
        r.granularity_conflicts,
        r.misplaced_moves,
        r.pool_errors,
        plans.join(", ")
    )
}
