//! `--defragment`: what vk-suballoc's defragmentation plans buy and what
//! they cost, on the same traces as the timed table.
//!
//! Each trace is replayed through vk-suballoc alone, called as in the timed
//! table (`allocate_mut`/`free_mut`, no lock) with the same
//! `VkMemoryRequirements` per request: once plain, and with a plan over
//! every live allocation every N operations
//! ([`plan_defragmentation`](vk_suballoc::Allocator::plan_defragmentation),
//! default limits: blocks at most half in use), each movable with its trace
//! request's requirements and kind. Plans run up to the trace's last
//! allocation, not during its final free-all. A third replay plans with
//! `max_used_percent(100)`, emptying any block whose contents fit
//! elsewhere, as VMA's `FAST` algorithm does; a fourth with
//! `compact_blocks(true)`, packing the blocks that stay. Then each trace
//! goes into a custom pool of one fixed-size block a few percent over its
//! peak live bytes, plain and with compacting plans, counting the requests
//! no free range could hold ([`PoolRow`]). The scaling traces (64 B..1 KiB
//! buffers, 1e3..1e6 live) are replayed with plans too, for what a plan
//! over N live allocations costs: their plans fall in the churn, every
//! N % of its operations, not in the fill or the free-all ([`plan_window`]).
//!
//! A plan is carried out at once: each moved allocation's handle is
//! replaced by its destination and the old allocation freed. No resource
//! exists and nothing is copied, so the figures leave out what a real move
//! costs an engine: creating and binding the new resource, the GPU copy, and
//! waiting for it before the free (the blocks empty a frame or more later).
//!
//! Reserved bytes and `vkAllocateMemory`/`vkFreeMemory` calls are the
//! counting trampolines' (vulkan/hooks.rs), as in the timed table. Only the
//! plan calls and the frees of the moved allocations are timed; the replays
//! with plans run several times, in turns (so that a slow spell of a shared
//! machine falls on both), and each plan's time is its median over the runs
//! (the plans are the same every run). After every plan,
//! untimed, the live allocations are checked: no two overlap, no buffer and
//! optimal image share a `bufferImageGranularity` page, and every
//! destination is in the source's memory type but another memory object
//! (or, compacting, in the source's, wholly below it).

use std::time::Instant;

use vk_suballoc::{
    Allocation, AllocationDesc, DefragmentationLimits, Movable, Pool, PoolDesc, Request, Usage,
};

use crate::backends::{resource_kind, Backend, VkSuballoc};
use crate::trace::{Kind, Trace, FREE};
use crate::vulkan::{self, VulkanContext};

mod plan_schedule;

pub use plan_schedule::Every;
use plan_schedule::{plan_due, plan_every, plan_window};

/// One plan: when, over how much, what it did and how long it took.
#[derive(Clone, Copy, Debug, Default)]
pub struct PlanSample {
    /// Operations replayed before it.
    pub op: usize,
    /// Live allocations listed as movable (all of them).
    pub movables: usize,
    /// The `plan_defragmentation` call, in ns.
    pub ns: u64,
    pub moves: usize,
    /// The moved allocations' sizes.
    pub bytes_moved: u64,
    /// Blocks the plan empties, and their bytes (`plan.blocks_released`, `plan.bytes_released`).
    pub blocks: usize,
    pub block_bytes: u64,
    /// `vkFreeMemory` calls while the old allocations were freed: the
    /// blocks released (a block a plan empties is released, not kept).
    pub released: u64,
    /// Freeing the moved allocations' old places, in ns.
    pub free_ns: u64,
    /// Moves within one block (compaction), counted in `moves`.
    pub within_block: usize,
    /// Blocks compaction packed (`plan.blocks_compacted`).
    pub compacted: usize,
}

/// One replay of a trace, plain or with plans.
#[derive(Clone, Debug, Default)]
pub struct Replay {
    /// Most requested bytes alive at once, and most `VkDeviceMemory` bytes.
    pub peak_live: u64,
    pub peak_reserved: u64,
    /// Live and reserved bytes after the trace's last allocation (and the
    /// plan there, if one falls on it), before its final free-all.
    pub end_live: u64,
    pub end_reserved: u64,
    /// Live and reserved bytes averaged over the operations up to then.
    pub mean_live: f64,
    pub mean_reserved: f64,
    pub allocate_calls: u64,
    pub free_calls: u64,
    pub failures: u64,
    /// The failed requests' bytes.
    pub failed_bytes: u64,
    /// Of `failures`, in a fixed-size pool: those that failed for another
    /// reason than the pool's having no free range for them (`PoolFull`),
    /// which is all a pool replay measures; any fails the run.
    pub pool_errors: u64,
    pub plans: Vec<PlanSample>,
    /// Found by the checks after each plan (all should be 0).
    pub overlaps: u64,
    pub granularity_conflicts: u64,
    pub misplaced_moves: u64,
}

impl Replay {
    pub fn moves(&self) -> usize {
        self.plans.iter().map(|p| p.moves).sum()
    }
    pub fn bytes_moved(&self) -> u64 {
        self.plans.iter().map(|p| p.bytes_moved).sum()
    }
    pub fn blocks_emptied(&self) -> usize {
        self.plans.iter().map(|p| p.blocks).sum()
    }
    /// Moves within one block (compaction), and the blocks they packed.
    pub fn within_block(&self) -> (usize, usize) {
        let moves = self.plans.iter().map(|p| p.within_block).sum();
        (moves, self.plans.iter().map(|p| p.compacted).sum())
    }
    pub fn block_bytes_emptied(&self) -> u64 {
        self.plans.iter().map(|p| p.block_bytes).sum()
    }
    pub fn blocks_released(&self) -> u64 {
        self.plans.iter().map(|p| p.released).sum()
    }
    pub fn plans_with_moves(&self) -> usize {
        self.plans.iter().filter(|p| p.moves > 0).count()
    }
    /// The plan calls' median and largest time, in ns.
    pub fn plan_ns_median_max(&self) -> (u64, u64) {
        let mut ns: Vec<u64> = self.plans.iter().map(|p| p.ns).collect();
        ns.sort_unstable();
        match ns.len() {
            0 => (0, 0),
            n => (ns[(n - 1) / 2], ns[n - 1]),
        }
    }
    /// The median of each plan's time over the allocations it was given.
    pub fn plan_ns_per_movable(&self) -> f64 {
        let mut per: Vec<f64> = self
            .plans
            .iter()
            .map(|p| p.ns as f64 / p.movables.max(1) as f64)
            .collect();
        per.sort_by(f64::total_cmp);
        per.get(per.len().saturating_sub(1) / 2)
            .copied()
            .unwrap_or(0.0)
    }
    /// Every plan's time over every move: what planning costs per move made.
    pub fn plan_ns_per_move(&self) -> Option<f64> {
        let moves = self.moves();
        let ns: u64 = self.plans.iter().map(|p| p.ns).sum();
        (moves > 0).then(|| ns as f64 / moves as f64)
    }
    /// Freeing an old allocation, per move.
    pub fn free_ns_per_move(&self) -> Option<f64> {
        let moves = self.moves();
        let ns: u64 = self.plans.iter().map(|p| p.free_ns).sum();
        (moves > 0).then(|| ns as f64 / moves as f64)
    }
    /// The median and largest count of allocations a plan was given.
    pub fn movables_median_max(&self) -> (usize, usize) {
        let mut n: Vec<usize> = self.plans.iter().map(|p| p.movables).collect();
        n.sort_unstable();
        match n.len() {
            0 => (0, 0),
            len => (n[(len - 1) / 2], n[len - 1]),
        }
    }
}

/// A trace's four replays.
#[derive(Clone, Debug)]
pub struct DefragRow {
    pub trace: String,
    pub seed: u64,
    pub ops: usize,
    /// Operations between plans.
    pub every: usize,
    pub plain: Replay,
    pub planned: Replay,
    /// With plans that empty blocks however full (`max_used_percent(100)`).
    pub any_fill: Replay,
    /// With default plans that also pack the blocks that stay
    /// (`compact_blocks(true)`).
    pub compacted: Replay,
}

impl DefragRow {
    /// The replays with plans, and their names.
    pub fn with_plans(&self) -> [(&'static str, &Replay); 3] {
        [
            ("plans", &self.planned),
            ("plans, any fill", &self.any_fill),
            ("plans, compacting", &self.compacted),
        ]
    }
}

/// What runs between operations.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Plans {
    None,
    /// A plan every so many operations.
    Every(usize),
    /// The same, emptying blocks however full.
    EveryAnyFill(usize),
    /// Default plans that also pack the blocks that stay.
    EveryCompact(usize),
}

/// Replays `trace` plain, with a plan every `every` (default limits), with
/// a plan every `every` that empties blocks however full, and with one that
/// also packs the blocks that stay; the last three `runs` times each, in
/// turns.
pub fn measure(ctx: &VulkanContext, trace: &Trace, every: Every, runs: usize) -> DefragRow {
    let every = plan_every(trace, every);
    let plain = replay(ctx, trace, Plans::None);
    let mut planned = Vec::with_capacity(runs);
    let mut any_fill = Vec::with_capacity(runs);
    let mut compacted = Vec::with_capacity(runs);
    for _ in 0..runs.max(1) {
        planned.push(replay(ctx, trace, Plans::Every(every)));
        any_fill.push(replay(ctx, trace, Plans::EveryAnyFill(every)));
        compacted.push(replay(ctx, trace, Plans::EveryCompact(every)));
    }
    DefragRow {
        trace: trace.name.clone(),
        seed: trace.seed,
        ops: trace.ops.len(),
        every,
        plain,
        planned: merge_runs(&trace.name, planned),
        any_fill: merge_runs(&trace.name, any_fill),
        compacted: merge_runs(&trace.name, compacted),
    }
}

/// The fixed-size pools' headroom over the trace's peak live bytes.
pub const POOL_HEADROOM_PERCENT: [u64; 3] = [2, 5, 25];

/// A trace's replays into one custom pool of one fixed-size block
/// (`max_blocks(1)`), a few percent larger than the trace's peak live
/// bytes, where
/// requests that find no free range fail (`PoolFull`) instead of making a
/// block: plain, and with a compacting plan every `every` operations.
#[derive(Clone, Debug)]
pub struct PoolRow {
    pub trace: String,
    pub every: usize,
    /// How much larger than the peak live bytes the block is, in percent.
    pub headroom_percent: u64,
    /// The pool's block.
    pub block_bytes: u64,
    pub plain: Replay,
    pub compacting: Replay,
}

/// The fixed-size pool (see [`PoolRow`]): its block is the trace's peak
/// live bytes and `headroom_percent` more, rounded up to MiB.
pub fn measure_fixed_pool(
    ctx: &VulkanContext,
    trace: &Trace,
    headroom_percent: u64,
    every: Every,
    runs: usize,
) -> PoolRow {
    const MIB: u64 = 1 << 20;
    let every = plan_every(trace, every);
    let peak = trace.peak_live();
    let block_bytes = (peak + peak * headroom_percent / 100).div_ceil(MIB) * MIB;
    let plain = replay_in(ctx, trace, Plans::None, Some(block_bytes));
    let compacting = (0..runs.max(1))
        .map(|_| replay_in(ctx, trace, Plans::EveryCompact(every), Some(block_bytes)))
        .collect();
    PoolRow {
        trace: trace.name.clone(),
        every,
        headroom_percent,
        block_bytes,
        plain,
        compacting: merge_runs(&trace.name, compacting),
    }
}

/// The scaling trace with `live` allocations, with a plan every `every`
/// (default limits), `runs` times: what a plan costs as live allocations
/// grow.
pub fn measure_scaling(
    ctx: &VulkanContext,
    trace: &Trace,
    every: Every,
    runs: usize,
) -> (usize, Replay) {
    let every = plan_every(trace, every);
    let replays = (0..runs.max(1))
        .map(|_| replay(ctx, trace, Plans::Every(every)))
        .collect();
    (every, merge_runs(&trace.name, replays))
}

/// Replays of one trace with the same plans, as one: the first one's
/// figures, with each plan's times the median over the runs. Placements do
/// not depend on timing, so every run makes the same plans; a warning says
/// when they differ.
fn merge_runs(trace: &str, replays: Vec<Replay>) -> Replay {
    let mut first = replays[0].clone();
    let same = replays.iter().all(|r| {
        r.plans.len() == first.plans.len()
            && r.plans.iter().zip(&first.plans).all(|(a, b)| {
                (a.op, a.moves, a.bytes_moved, a.blocks) == (b.op, b.moves, b.bytes_moved, b.blocks)
            })
    });
    if !same {
        eprintln!(
            "warning: {trace}: the runs made different plans; their times are the first run's"
        );
        return first;
    }
    for (index, plan) in first.plans.iter_mut().enumerate() {
        let mut ns: Vec<u64> = replays.iter().map(|r| r.plans[index].ns).collect();
        let mut free_ns: Vec<u64> = replays.iter().map(|r| r.plans[index].free_ns).collect();
        plan.ns = median(&mut ns);
        plan.free_ns = median(&mut free_ns);
    }
    first
}

/// The lower median.
fn median(values: &mut [u64]) -> u64 {
    values.sort_unstable();
    values[(values.len() - 1) / 2]
}

/// Whether a fixed-size pool's failed request is what the pool replays
/// count: a request no free range of its one block holds.
fn pool_refusal(error: &vk_suballoc::Error) -> bool {
    matches!(error, vk_suballoc::Error::PoolFull { .. })
}

/// One replay on a fresh allocator, with `plans` up to the last allocation.
fn replay(ctx: &VulkanContext, trace: &Trace, plans: Plans) -> Replay {
    replay_in(ctx, trace, plans, None)
}

/// [`replay`], every request in a custom pool of one block of
/// `pool_block` bytes when that is given (of the device-local memory type
/// the first request allows: lavapipe's only one), through the `&self`
/// allocation path that pools take.
fn replay_in(ctx: &VulkanContext, trace: &Trace, plans: Plans, pool_block: Option<u64>) -> Replay {
    let mut backend = VkSuballoc::<false>::new(ctx);
    vulkan::reset_counts();
    let pool: Option<Pool> = pool_block.map(|bytes| {
        let allocator = backend.allocator();
        let bits = trace.requests[0].requirements.memory_type_bits;
        let memory_type = allocator
            .memory_type_for(bits, Usage::DEVICE_LOCAL)
            .expect("a device-local type");
        let desc = PoolDesc::new(memory_type).block_size(bytes).max_blocks(1);
        allocator
            .create_pool(&desc)
            .expect("the pool's block fits its heap")
    });
    let mut slots: Vec<Option<Allocation>> = (0..trace.slots).map(|_| None).collect();
    let mut slot_req = vec![0u32; trace.slots];
    let window = plan_window(trace);
    let last_alloc = window.end;
    let mut r = Replay::default();
    let mut live = 0u64;
    let (mut live_sum, mut reserved_sum) = (0f64, 0f64);
    for (index, op) in trace.ops.iter().enumerate() {
        let slot = op.slot as usize;
        if op.req == FREE {
            if let Some(handle) = slots[slot].take() {
                live -= trace.requests[slot_req[slot] as usize].requirements.size;
                backend.free(handle);
            }
        } else {
            let req = &trace.requests[op.req as usize];
            let allocation = match pool {
                Some(pool) => {
                    let desc = AllocationDesc::new(Usage::DEVICE_LOCAL).pool(pool);
                    let request =
                        Request::with_desc(req.requirements, resource_kind(req.kind), desc);
                    let result = backend.allocator().allocate(&request);
                    if let Err(error) = &result {
                        r.pool_errors += u64::from(!pool_refusal(error));
                    }
                    result.ok()
                }
                None => backend.allocate(req),
            };
            match allocation {
                Some(handle) => {
                    slots[slot] = Some(handle);
                    slot_req[slot] = op.req;
                    live += req.requirements.size;
                    r.peak_live = r.peak_live.max(live);
                }
                None => {
                    r.failures += 1;
                    r.failed_bytes += req.requirements.size;
                }
            }
        }
        let done = index + 1;
        if done > last_alloc {
            continue;
        }
        let (every, limits) = match plans {
            Plans::None => (usize::MAX, DefragmentationLimits::default()),
            Plans::Every(every) => (every, DefragmentationLimits::default()),
            Plans::EveryAnyFill(every) => (
                every,
                DefragmentationLimits::default().max_used_percent(100),
            ),
            Plans::EveryCompact(every) => {
                (every, DefragmentationLimits::default().compact_blocks(true))
            }
        };
        if plan_due(&window, every, done) {
            let sample = plan(
                &mut backend,
                trace,
                &mut slots,
                &slot_req,
                (done, &limits),
                &mut r,
            );
            r.plans.push(sample);
            check(ctx, trace, &slots, &slot_req, &mut r);
        }
        let reserved = vulkan::counts().live_bytes;
        live_sum += live as f64;
        reserved_sum += reserved as f64;
        if done == last_alloc {
            r.end_live = live;
            r.end_reserved = reserved;
            r.mean_live = live_sum / done as f64;
            r.mean_reserved = reserved_sum / done as f64;
        }
    }
    if let Some(pool) = pool {
        let destroyed = backend.allocator().destroy_pool(pool);
        destroyed.expect("the trace frees everything");
    }
    let counts = vulkan::counts();
    r.peak_reserved = counts.peak_bytes;
    r.allocate_calls = counts.allocate_calls;
    r.free_calls = counts.free_calls;
    let own = u64::from(backend.allocator().stats().memory_objects);
    if own != counts.live_objects {
        eprintln!(
            "warning: the allocator counts {own} live memory objects, the hooks {}",
            counts.live_objects
        );
    }
    drop(backend);
    if vulkan::counts().live_bytes != 0 {
        eprintln!("warning: VkDeviceMemory still alive after dropping the allocator");
    }
    r
}

/// Plans over every live allocation and carries the plan out at once.
fn plan(
    backend: &mut VkSuballoc<false>,
    trace: &Trace,
    slots: &mut [Option<Allocation>],
    slot_req: &[u32],
    (op, limits): (usize, &DefragmentationLimits),
    r: &mut Replay,
) -> PlanSample {
    let live: Vec<usize> = (0..slots.len()).filter(|&s| slots[s].is_some()).collect();
    let movables: Vec<Movable<'_>> = live
        .iter()
        .filter_map(|&slot| {
            let req = &trace.requests[slot_req[slot] as usize];
            let allocation = slots[slot].as_ref()?;
            Some(Movable::new(
                allocation,
                req.requirements,
                resource_kind(req.kind),
            ))
        })
        .collect();
    let t0 = Instant::now();
    let plan = backend.allocator().plan_defragmentation(&movables, limits);
    let ns = t0.elapsed().as_nanos() as u64;
    drop(movables);
    let plan = plan.expect("every movable is a live allocation of this allocator");
    let mut sample = PlanSample {
        op,
        movables: live.len(),
        ns,
        moves: plan.moves.len(),
        blocks: plan.blocks_released,
        block_bytes: plan.bytes_released,
        compacted: plan.blocks_compacted,
        ..PlanSample::default()
    };
    let mut old = Vec::with_capacity(plan.moves.len());
    for planned in plan.moves {
        let slot = live[planned.movable];
        let destination = planned.destination;
        let Some(source) = slots[slot].replace(destination) else {
            unreachable!("listed because live");
        };
        let destination = slots[slot].as_ref().expect("just placed");
        // Within one memory object only as compaction moves: wholly below.
        let within = destination.memory() == source.memory();
        if within {
            sample.within_block += 1;
        }
        let below = destination.offset() + destination.size() <= source.offset();
        if (within && !(limits.compact_blocks && below))
            || destination.memory_type() != source.memory_type()
        {
            r.misplaced_moves += 1;
        }
        sample.bytes_moved += source.size();
        old.push(source);
    }
    let frees_before = vulkan::counts().free_calls;
    let t0 = Instant::now();
    for source in old {
        backend.free(source);
    }
    sample.free_ns = t0.elapsed().as_nanos() as u64;
    sample.released = vulkan::counts().free_calls - frees_before;
    sample
}

/// Counts overlapping live allocations and buffer/image pairs that share a
/// `bufferImageGranularity` page of one memory object (`conflicts`).
fn check(
    ctx: &VulkanContext,
    trace: &Trace,
    slots: &[Option<Allocation>],
    slot_req: &[u32],
    r: &mut Replay,
) {
    let ranges: Vec<LiveRange> = slots
        .iter()
        .zip(slot_req)
        .filter_map(|(slot, &req)| {
            let allocation = slot.as_ref()?;
            let image = trace.requests[req as usize].kind == Kind::Image;
            let memory = ash::vk::Handle::as_raw(allocation.memory());
            let end = allocation.offset() + allocation.size();
            Some((memory, allocation.offset(), end, image))
        })
        .collect();
    let (overlaps, granularity_conflicts) = conflicts(ranges, ctx.buffer_image_granularity);
    r.overlaps += overlaps;
    r.granularity_conflicts += granularity_conflicts;
}

/// A live allocation: its memory object's raw handle, its start and end
/// there, and whether it is an optimal image.
type LiveRange = (u64, u64, u64, bool);

/// The overlapping pairs and the buffer/image pairs sharing a page of
/// `granularity` bytes among `ranges` (0 for none of either when the
/// allocator is right), counted between neighbours in address order,
/// which suffices to find any: a range that starts inside another starts
/// before that one's end, and so does every range between them, its
/// neighbour included; and a range between two that share a page lies in
/// that page, so it conflicts with one of them.
fn conflicts(mut ranges: Vec<LiveRange>, granularity: u64) -> (u64, u64) {
    let page = granularity.max(1);
    ranges.sort_unstable();
    let (mut overlaps, mut shared_pages) = (0, 0);
    for pair in ranges.windows(2) {
        let ((memory, _, end, image), (next_memory, offset, _, next_image)) = (pair[0], pair[1]);
        if memory != next_memory {
            continue;
        }
        if offset < end {
            overlaps += 1;
        }
        if image != next_image && (end - 1) / page == offset / page {
            shared_pages += 1;
        }
    }
    (overlaps, shared_pages)
}

#[cfg(test)]
mod tests;
