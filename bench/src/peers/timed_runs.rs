//! The timed table's runs: a trace replayed on a fresh allocator of every row,
//! in rounds after one warm-up round that is not counted, each round starting
//! with another allocator; the hooks' counts read before the allocator drops;
//! the medians of the runs made into one [`Row`] per allocator; and the harness
//! alone on the scaling traces. It is apart from `main.rs`, which drives the
//! run and prints it, because this is what the table's figures are made of; the
//! timed replay loop itself is in `replay.rs`.

use vulkano::memory::allocator::{BuddyAllocator, FreeListAllocator};

use crate::backends::{self, Backend, Which};
use crate::report::{self, Row};
use crate::trace::Trace;
use crate::vulkan::{self, VulkanContext};
use crate::{median, median_range, replay, vulkano_peer, PLACEMENT_HASH};

/// One replay of `trace` on a fresh allocator `which`. The hooks' counters
/// start before the allocator is made, so memory it made as it was built
/// would count in its calls as in its peak (none of the peers makes any).
fn run_once(
    which: Which,
    ctx: &VulkanContext,
    trace: &Trace,
    overhead: f64,
) -> (replay::RunFigures, vulkan::MemoryCounts, Option<u64>) {
    vulkan::reset_counts();
    let max_allocations = (2 * trace.slots + 64) as u32;
    match which {
        Which::VkSuballoc => run_one(
            backends::VkSuballoc::<false>::new(ctx),
            trace,
            overhead,
            false,
        ),
        Which::VkSuballocLocked => run_one(
            backends::VkSuballoc::<true>::new(ctx),
            trace,
            overhead,
            false,
        ),
        Which::Vma => run_one(backends::Vma::new(ctx), trace, overhead, false),
        Which::GpuAllocator => run_one(backends::GpuAllocator::new(ctx), trace, overhead, false),
        Which::GpuAlloc => run_one(backends::GpuAlloc::new(ctx), trace, overhead, false),
        Which::OurCore if backends::strategy() == vk_suballoc::Strategy::MinMemory => run_one(
            backends::OurCore::<{ backends::MIN_MEMORY }>::new(max_allocations),
            trace,
            overhead,
            true,
        ),
        Which::OurCore if backends::strategy() == vk_suballoc::Strategy::MinOffset => run_one(
            backends::OurCore::<{ backends::MIN_OFFSET }>::new(max_allocations),
            trace,
            overhead,
            true,
        ),
        Which::OurCore if backends::strategy() == vk_suballoc::Strategy::MaxOffset => run_one(
            backends::OurCore::<{ backends::MAX_OFFSET }>::new(max_allocations),
            trace,
            overhead,
            true,
        ),
        Which::OurCore => run_one(
            backends::OurCore::<{ backends::MIN_TIME }>::new(max_allocations),
            trace,
            overhead,
            true,
        ),
        Which::OffsetAllocatorCore => run_one(
            backends::OffsetAllocatorCore::new(max_allocations, &trace.requests),
            trace,
            overhead,
            true,
        ),
        Which::Vulkano => run_one(vulkano_peer::Vulkano::new(ctx), trace, overhead, false),
        Which::VulkanoFreeListCore => run_one(
            vulkano_peer::VulkanoCore::<FreeListAllocator>::new(ctx.buffer_image_granularity),
            trace,
            overhead,
            true,
        ),
        Which::VulkanoBuddyCore => run_one(
            vulkano_peer::VulkanoCore::<BuddyAllocator>::new(ctx.buffer_image_granularity),
            trace,
            overhead,
            true,
        ),
    }
}

/// Runs `trace` through every allocator of `allocators`: one warm-up round
/// that is not counted, then `runs` rounds. Each round runs every allocator
/// once, starting with a different one each round, so that slow spells of a
/// shared machine fall on all of them alike.
pub(super) fn measure(
    allocators: &[Which],
    ctx: &VulkanContext,
    trace: &Trace,
    runs: usize,
    overhead: f64,
) -> Vec<Row> {
    let n = allocators.len();
    let mut results: Vec<Vec<RunResult>> = vec![Vec::with_capacity(runs); n];
    for round in 0..=runs {
        for k in 0..n {
            let i = (k + round) % n;
            let result = run_once(allocators[i], ctx, trace, overhead);
            if round > 0 {
                results[i].push(result);
            }
        }
    }
    allocators
        .iter()
        .zip(results)
        .map(|(&which, results)| row(which, trace, &results))
        .collect()
}

/// The harness alone on `trace` ([`backends::HarnessFloor`]): the median
/// ns per operation of `runs` replays after one warm-up, with the range.
/// Its replays run after the allocators' rounds, not between them.
pub(super) fn harness_floor(trace: &Trace, runs: usize, overhead: f64) -> report::Floor {
    let mut op: Vec<f64> = (0..=runs)
        .map(|_| {
            let mut floor = backends::HarnessFloor::default();
            replay::replay(&mut floor, trace, overhead, false, false).ns_per_op()
        })
        .skip(1)
        .collect();
    let ns_op = median(&mut op);
    report::Floor {
        ns_op,
        ns_op_min: op[0],
        ns_op_max: op[op.len() - 1],
    }
}

/// What one replay gives: its figures, the hooks' counts, and the memory
/// objects the allocator itself counts.
type RunResult = (replay::RunFigures, vulkan::MemoryCounts, Option<u64>);

/// The row of one allocator: medians over its runs. Memory figures and call
/// counts are medians too, with their range: they are the same every run
/// for every allocator but gpu-allocator, whose best fit takes equal fits in
/// a hash set's order, random per allocator.
fn row(which: Which, trace: &Trace, results: &[RunResult]) -> Row {
    let figures: Vec<replay::RunFigures> = results.iter().map(|r| r.0).collect();
    let (fig, counts, own) = *results.last().expect("at least one run");
    let mut alloc: Vec<f64> = figures
        .iter()
        .map(replay::RunFigures::ns_per_alloc)
        .collect();
    let mut free: Vec<f64> = figures
        .iter()
        .map(replay::RunFigures::ns_per_free)
        .collect();
    let mut op: Vec<f64> = figures.iter().map(replay::RunFigures::ns_per_op).collect();
    let mut driver: Vec<f64> = figures
        .iter()
        .map(replay::RunFigures::driver_ns_per_op)
        .collect();
    let vulkan = which.is_vulkan();
    let mut reserved: Vec<u64> = results
        .iter()
        .map(|(fig, counts, _)| {
            if vulkan {
                counts.peak_bytes
            } else {
                fig.high_water
            }
        })
        .collect();
    let mut calls: Vec<u64> = results.iter().map(|r| r.1.allocate_calls).collect();
    let mut free_calls: Vec<u64> = results.iter().map(|r| r.1.free_calls).collect();
    let (peak_reserved, reserved_min, reserved_max) = median_range(&mut reserved);
    let (allocate_calls, calls_min, calls_max) = median_range(&mut calls);
    Row {
        allocator: which,
        trace: trace.name.clone(),
        seed: trace.seed,
        runs: figures.len(),
        ns_alloc: median(&mut alloc),
        ns_free: median(&mut free),
        ns_op: median(&mut op),
        ns_driver_op: vulkan.then(|| median(&mut driver)),
        ns_op_min: op[0],
        ns_op_max: op[op.len() - 1],
        allocations: fig.allocs,
        frees: fig.frees,
        failures: figures.iter().map(|f| f.failures).max().unwrap_or(0),
        peak_live: figures.iter().map(|f| f.peak_live).max().unwrap_or(0),
        peak_reserved,
        peak_reserved_range: (reserved_min, reserved_max),
        vk_allocate_calls: vulkan.then_some(allocate_calls),
        vk_allocate_calls_range: vulkan.then_some((calls_min, calls_max)),
        vk_free_calls: vulkan.then(|| median_range(&mut free_calls).0),
        end_objects_hooked: vulkan.then_some(counts.live_objects),
        end_objects_own: own,
        placement_hash: fig.placement_hash,
    }
}

/// One replay on a fresh allocator; the counters (reset by `run_once`
/// before it was made) are read before it drops.
fn run_one<B: Backend>(
    mut backend: B,
    trace: &Trace,
    overhead: f64,
    high_water: bool,
) -> (replay::RunFigures, vulkan::MemoryCounts, Option<u64>) {
    let hash = PLACEMENT_HASH.load(std::sync::atomic::Ordering::Relaxed);
    let figures = replay::replay(&mut backend, trace, overhead, high_water, hash);
    let counts = vulkan::counts();
    let own = backend.own_memory_objects();
    if let Some(own) = own.filter(|&own| own != counts.live_objects) {
        eprintln!(
            "warning: the allocator counts {own} live memory objects, the hooks {}",
            counts.live_objects
        );
    }
    drop(backend);
    let after = vulkan::counts();
    if after.live_bytes != 0 {
        eprintln!(
            "warning: {} bytes of VkDeviceMemory still alive after dropping an allocator",
            after.live_bytes
        );
    }
    (figures, counts, own)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn trace() -> Trace {
        Trace {
            name: "t".to_owned(),
            seed: 1,
            requests: Vec::new(),
            ops: Vec::new(),
            segments: Vec::new(),
            slots: 0,
            measured: 0..0,
            allocations: 0,
            frees: 0,
        }
    }

    fn run(peak_bytes: u64, calls: u64, high_water: u64) -> RunResult {
        let fig = replay::RunFigures {
            peak_live: 100,
            high_water,
            ..Default::default()
        };
        let counts = vulkan::MemoryCounts {
            allocate_calls: calls,
            peak_bytes,
            ..Default::default()
        };
        (fig, counts, None)
    }

    #[test]
    fn memory_figures_are_the_median_of_the_runs_not_the_last() {
        let runs = [run(1408, 1166, 0), run(1344, 1110, 0), run(1376, 1136, 0)];
        let row = row(Which::GpuAllocator, &trace(), &runs);
        assert_eq!(row.peak_reserved, 1376);
        assert_eq!(row.peak_reserved_range, (1344, 1408));
        assert_eq!(row.vk_allocate_calls, Some(1136));
        assert_eq!(row.vk_allocate_calls_range, Some((1110, 1166)));
    }

    #[test]
    fn a_core_reserves_its_high_water_mark() {
        let runs = [run(0, 0, 500), run(0, 0, 500)];
        let row = row(Which::OurCore, &trace(), &runs);
        assert_eq!(row.peak_reserved, 500);
        assert_eq!(row.vk_allocate_calls, None);
        assert!((row.ratio() - 5.0).abs() < 1e-9);
    }
}
