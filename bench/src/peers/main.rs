//! `peers`: vk-suballoc against VMA (vk-mem), gpu-allocator, gpu-alloc and
//! vulkano on one Vulkan device, and its offset core against
//! offset-allocator's and vulkano's suballocators, on the same seeded traces
//! in one run.
//!
//! ```text
//! cargo run -p vk-suballoc-bench --release --bin peers -- \
//!     [--ops N] [--runs R] [--seed S] [--traces a,b] [--allocators a,b]
//!     [--scaling 1000,10000,100000,1000000 | --no-scaling] [--scaling-ops N]
//!     [--real-resources] [--json out.json] [--markdown out.md]
//!     [--defragment [--defragment-every N|P%]]
//! ```
//!
//! See `bench/README.md` for what is measured and how.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod backends;
mod command_line;
mod defragment;
mod defragment_report;
mod real_resources;
mod replay;
mod report;
mod ring;
mod ring_backends;
mod ring_peers;
mod ring_report;
mod timed_runs;
mod trace;
mod vulkan;
mod vulkano_peer;

use std::process::ExitCode;

use backends::Which;
use command_line::parse_args;
use real_resources::real_resources;
use report::Results;
use timed_runs::{harness_floor, measure};
use trace::{RequirementSource, TraceKind};
use vulkan::VulkanContext;

/// `--placement-hash`: hash every placement (outside the timed segments).
static PLACEMENT_HASH: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

struct Args {
    ops: usize,
    runs: usize,
    seed: u64,
    traces: Vec<TraceKind>,
    allocators: Vec<Which>,
    scaling: Vec<usize>,
    scaling_ops: usize,
    /// gpu-allocator's best fit walks every free chunk: above this many live
    /// allocations its scaling runs take minutes, so they are skipped.
    scaling_gpu_allocator_max: usize,
    /// vulkano's free list is a `Vec` sorted by size: every free inserts
    /// into it, so the scaling trace's final free-all of N random
    /// allocations is quadratic (minutes at 1e6). Its two rows are skipped
    /// above this many live allocations.
    scaling_vulkano_max: usize,
    real_resources: bool,
    /// `--defragment`: vk-suballoc plain vs. with a defragmentation plan
    /// every `defragment_every`, instead of the timed table.
    defragment: bool,
    defragment_every: defragment::Every,
    /// Print what the driver reports for a few buffers and images.
    print_requirements: bool,
    /// Print a hash of every allocator's placements per trace.
    placement_hash: bool,
    json: Option<String>,
    markdown: Option<String>,
    /// Part of the physical device's name (case-insensitive); `None`: the first.
    device: Option<String>,
    /// The `ring` trace (`--traces ...,ring`; in the default set).
    ring: bool,
    ring_allocators: Vec<ring_backends::RingWhich>,
    /// Bytes of the ring, VMA's linear pool block and the ring cores.
    ring_size: u64,
}

/// The header of a report of this invocation on `ctx`.
fn run_header(args: &Args, ctx: &VulkanContext) -> report::RunHeader {
    report::RunHeader {
        command: std::env::args().collect::<Vec<_>>().join(" "),
        machine: machine(),
        device: ctx.device_name.clone(),
        driver: ctx.driver_info.clone(),
        seed: args.seed,
        ops: args.ops,
        runs: args.runs,
    }
}

fn machine() -> String {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let model = cpuinfo
        .lines()
        .find_map(|l| {
            l.strip_prefix("model name")
                .map(|m| m.trim_start_matches([' ', '\t', ':']))
        })
        .unwrap_or("unknown CPU")
        .to_owned();
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    format!("{model}, {cores} cores, {}", std::env::consts::OS)
}

fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    let n = values.len();
    if n % 2 == 1 {
        values[n / 2]
    } else {
        (values[n / 2 - 1] + values[n / 2]) / 2.0
    }
}

/// The lower median of `values` (an element of them; exact for an odd
/// count), with the smallest and largest.
fn median_range(values: &mut [u64]) -> (u64, u64, u64) {
    values.sort_unstable();
    (
        values[(values.len() - 1) / 2],
        values[0],
        values[values.len() - 1],
    )
}

/// The Vulkan device `args` names, with the validation layer when
/// `validation`; `None` after printing why it could not be opened.
fn open_device(validation: bool, args: &Args) -> Option<VulkanContext> {
    VulkanContext::new(validation, args.device.as_deref())
        .map_err(|e| eprintln!("error: {e}"))
        .ok()
}

/// `--defragment`: each trace through vk-suballoc plain and with plans
/// (defragment.rs), then the tables.
fn defragment(args: &Args) -> ExitCode {
    let Some(ctx) = open_device(false, args) else {
        return ExitCode::FAILURE;
    };
    println!(
        "defragment: seed {:#x}, {} ops per trace, device {} ({}), bufferImageGranularity {}",
        args.seed, args.ops, ctx.device_name, ctx.driver_info, ctx.buffer_image_granularity
    );
    let mut results = defragment_report::DefragResults {
        header: run_header(args, &ctx),
        ..Default::default()
    };
    let mut source = RequirementSource::new(&ctx.device);
    for &kind in &args.traces {
        let trace = trace::generate(kind, args.ops, args.seed, &mut source);
        let row = defragment::measure(&ctx, &trace, args.defragment_every, args.runs);
        let (plain, planned, any_fill, compacted) =
            (&row.plain, &row.planned, &row.any_fill, &row.compacted);
        println!(
            "trace {} (seed {:#x}): plan every {} ops: {} plans, {} moves, {} blocks emptied; peak reserved {} / {} / {} / {} bytes, vkAllocateMemory {} / {} / {} / {} (plain / plans / plans, any fill / plans, compacting)",
            row.trace,
            row.seed,
            row.every,
            planned.plans.len(),
            planned.moves(),
            planned.blocks_emptied(),
            plain.peak_reserved,
            planned.peak_reserved,
            any_fill.peak_reserved,
            compacted.peak_reserved,
            plain.allocate_calls,
            planned.allocate_calls,
            any_fill.allocate_calls,
            compacted.allocate_calls
        );
        results.rows.push(row);
        for headroom in defragment::POOL_HEADROOM_PERCENT {
            let pool = defragment::measure_fixed_pool(
                &ctx,
                &trace,
                headroom,
                args.defragment_every,
                args.runs,
            );
            println!(
                "trace {} in one pool block of {} bytes (peak live + {headroom} %): failures {} / {} ({} / {} bytes), {} moves (plain / compacting plans every {} ops)",
                pool.trace,
                pool.block_bytes,
                pool.plain.failures,
                pool.compacting.failures,
                pool.plain.failed_bytes,
                pool.compacting.failed_bytes,
                pool.compacting.moves(),
                pool.every
            );
            results.pools.push(pool);
        }
    }
    for &live in &args.scaling {
        let seed = args.seed ^ live as u64;
        let trace = trace::scaling(live, args.scaling_ops, seed, &mut source);
        let (every, replay) =
            defragment::measure_scaling(&ctx, &trace, args.defragment_every, args.runs);
        let (median, max) = replay.plan_ns_median_max();
        println!(
            "scaling {live} live (seed {seed:#x}): plan every {every} ops: {} plans, median {:.1} us, max {:.1} us",
            replay.plans.len(),
            median as f64 / 1000.0,
            max as f64 / 1000.0
        );
        results.scaling.push((live, every, replay));
    }
    let text = results.markdown();
    println!("\n{text}");
    let mut ok = true;
    if let Some(path) = &args.json {
        if let Err(e) = std::fs::write(path, results.json()) {
            eprintln!("error: cannot write {path}: {e}");
            ok = false;
        }
    }
    if let Some(path) = &args.markdown {
        if let Err(e) = std::fs::write(path, &text) {
            eprintln!("error: cannot write {path}: {e}");
            ok = false;
        }
    }
    let checked = |r: &defragment::Replay| {
        r.overlaps + r.granularity_conflicts + r.misplaced_moves + r.failures == 0
    };
    let clean = results
        .rows
        .iter()
        .all(|row| row.plain.failures == 0 && row.with_plans().iter().all(|(_, r)| checked(r)))
        && results.scaling.iter().all(|(_, _, r)| checked(r))
        // A pool's refused requests are what it measures, not a fault;
        // a request that failed for another reason is.
        && results.pools.iter().all(|p| {
            [&p.plain, &p.compacting].iter().all(|r| {
                r.overlaps + r.granularity_conflicts + r.misplaced_moves + r.pool_errors == 0
            })
        });
    if !clean {
        eprintln!("defragment: a check FAILED (see the tables)");
    }
    if ok && clean {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

fn main() -> ExitCode {
    let args = match parse_args() {
        Ok(args) => args,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(2);
        }
    };
    if args.real_resources {
        return real_resources(&args);
    }
    if args.defragment {
        return defragment(&args);
    }
    PLACEMENT_HASH.store(args.placement_hash, std::sync::atomic::Ordering::Relaxed);
    let Some(ctx) = open_device(false, &args) else {
        return ExitCode::FAILURE;
    };
    let overhead = replay::timer_overhead_ns();
    let mutex_ns = replay::mutex_pair_ns();
    let mut results = Results {
        header: run_header(&args, &ctx),
        timer_overhead_ns: overhead,
        mutex_pair_ns: mutex_ns,
        ..Default::default()
    };
    println!(
        "peers: seed {:#x}, {} ops per trace, {} runs, device {} ({}), bufferImageGranularity {}, clock overhead {overhead:.1} ns, uncontended mutex lock+unlock {mutex_ns:.1} ns",
        args.seed, args.ops, args.runs, ctx.device_name, ctx.driver_info, ctx.buffer_image_granularity
    );
    let mut source = RequirementSource::new(&ctx.device);
    if args.print_requirements {
        // SAFETY: a physical device of this instance.
        let memory = unsafe {
            ctx.instance
                .get_physical_device_memory_properties(ctx.physical_device)
        };
        for (index, heap) in memory.memory_heaps_as_slice().iter().enumerate() {
            println!("heap {index}: {} MiB {:?}", heap.size >> 20, heap.flags);
        }
        for (index, memory_type) in memory.memory_types_as_slice().iter().enumerate() {
            println!(
                "type {index}: heap {} {:?}",
                memory_type.heap_index, memory_type.property_flags
            );
        }
        let transfer =
            ash::vk::BufferUsageFlags::TRANSFER_SRC | ash::vk::BufferUsageFlags::TRANSFER_DST;
        for usage in [ash::vk::BufferUsageFlags::STORAGE_BUFFER, transfer] {
            for size in [1u64, 63, 64, 65, 100, 1000, 4097, 100_000] {
                let r = source.get(trace::Resource::Buffer { size, usage });
                println!("buffer {size} {usage:?}: {r:?}");
            }
        }
        for (width, height) in [(16, 16), (17, 5), (1024, 1024), (16, 1024)] {
            let r = source.get(trace::Resource::Image { width, height });
            println!("image {width}x{height}: {r:?}");
        }
    }
    for &kind in &args.traces {
        let trace = trace::generate(kind, args.ops, args.seed, &mut source);
        println!(
            "trace {} (seed {:#x}): {} allocations, {} frees, {} segments, peak live {:.1} MiB",
            trace.name,
            trace.seed,
            trace.allocations,
            trace.frees,
            trace.segments.len(),
            trace.peak_live() as f64 / (1u64 << 20) as f64
        );
        for row in measure(&args.allocators, &ctx, &trace, args.runs, overhead) {
            println!(
                "  {:<28} {:>9.1} ns/alloc {:>9.1} ns/free {:>9.1} ns/op  reserved/live {:.3}  vkAllocateMemory {}  failures {}",
                row.allocator.name(),
                row.ns_alloc,
                row.ns_free,
                row.ns_op,
                row.ratio(),
                row.vk_allocate_calls.map_or_else(|| "n/a".into(), |c| c.to_string()),
                row.failures
            );
            if let Some(hash) = row.placement_hash {
                println!("  {:<28} placement hash {hash:#018x}", "");
            }
            results.rows.push(row);
        }
    }
    if args.ring {
        results.ring = Some(ring_section(&args, &ctx, &mut source, overhead));
    }
    for &live in &args.scaling {
        let seed = args.seed ^ live as u64;
        let trace = trace::scaling(live, args.scaling_ops, seed, &mut source);
        println!(
            "scaling {live} live (seed {seed:#x}): {} allocations, {} frees",
            trace.allocations, trace.frees
        );
        let allocators: Vec<Which> = args
            .allocators
            .iter()
            .copied()
            .filter(|&which| {
                let why = match which {
                    Which::GpuAllocator if live > args.scaling_gpu_allocator_max => {
                        "best fit over every free chunk; raise --scaling-gpu-allocator-max"
                    }
                    Which::Vulkano | Which::VulkanoFreeListCore
                        if live > args.scaling_vulkano_max =>
                    {
                        "a free list sorted in a Vec: the final free-all is quadratic; raise --scaling-vulkano-max"
                    }
                    _ => return true,
                };
                println!("  {:<28} skipped ({why})", which.name());
                false
            })
            .collect();
        for row in measure(&allocators, &ctx, &trace, args.runs, overhead) {
            println!("  {:<28} {:>9.1} ns/op", row.allocator.name(), row.ns_op);
            results.scaling.push((live, row));
        }
        let floor = harness_floor(&trace, args.runs, overhead);
        println!("  {:<28} {:>9.1} ns/op", "harness alone", floor.ns_op);
        results.harness_floor.push((live, floor));
    }
    println!("\n{}", results.markdown());
    let ring_clean = results.ring.as_ref().map_or(true, |ring| {
        ring.rows.iter().all(ring_report::RingRow::clean)
    });
    if !ring_clean {
        eprintln!("ring: a check FAILED (see the table)");
    }
    if let Some(path) = &args.json {
        if let Err(e) = std::fs::write(path, results.json()) {
            eprintln!("error: cannot write {path}: {e}");
            return ExitCode::FAILURE;
        }
    }
    if let Some(path) = &args.markdown {
        if let Err(e) = std::fs::write(path, results.markdown()) {
            eprintln!("error: cannot write {path}: {e}");
            return ExitCode::FAILURE;
        }
    }
    if ring_clean {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// The `ring` trace through its rows (ring.rs), printed as it goes.
fn ring_section(
    args: &Args,
    ctx: &VulkanContext,
    source: &mut RequirementSource<'_>,
    overhead: f64,
) -> ring_report::RingSection {
    let trace = ring::generate(args.ops, args.seed, source);
    let poll = ring::semaphore_poll_ns(ctx);
    println!(
        "trace ring (seed {:#x}): {} frames, {} allocations at {}-byte alignment, peak live {:.1} MiB, ring {} MiB; vkGetSemaphoreCounterValue {}",
        trace.seed,
        trace.frames(),
        trace.allocations(),
        trace.align,
        trace.peak_live() as f64 / (1u64 << 20) as f64,
        args.ring_size >> 20,
        poll.map_or_else(|| "n/a".to_owned(), |p| format!("{p:.1} ns"))
    );
    let which = ring::runnable(&args.ring_allocators, ctx);
    let rows = ring::measure(&which, ctx, &trace, args.ring_size, args.runs, overhead);
    for row in &rows {
        println!(
            "  {:<40} {:>8.1} ns/alloc all in ({:.1} allocate, {:.1} frame; {:.0} ns per frame)  vkAllocateMemory {}  failures {}  checks {}",
            row.which.name(),
            row.all_in,
            row.alloc,
            row.frame_per_alloc,
            row.per_frame,
            row.vk_allocate_calls.map_or_else(|| "n/a".into(), |c| c.to_string()),
            row.failures,
            if row.clean() { "ok" } else { "FAILED" }
        );
    }
    ring_report::RingSection {
        seed: trace.seed,
        allocations: trace.allocations(),
        frames: trace.frames(),
        align: trace.align,
        capacity: args.ring_size,
        peak_live: trace.peak_live(),
        semaphore_poll_ns: poll,
        rows,
    }
}
