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
mod defragment;
mod defragment_report;
mod replay;
mod report;
mod ring;
mod ring_backends;
mod ring_peers;
mod ring_report;
mod trace;
mod vulkan;
mod vulkano_peer;

use std::process::ExitCode;

use backends::{Backend, Which};
use report::{Results, Row};
use trace::{RequirementSource, Trace, TraceKind};
use vulkan::VulkanContext;
use vulkano::memory::allocator::{BuddyAllocator, FreeListAllocator};

const DEFAULT_SEED: u64 = 0x5EED_0005;

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

fn usage() -> &'static str {
    "usage: peers [--ops N] [--runs R] [--seed S] [--traces streaming,frame-loop,small-churn,mixed,ring]\n\
     \x20            [--ring-allocators vk-suballoc-ring,vk-suballoc-ring-mut,vk-suballoc,vma-linear-pool,gpu-alloc,gpu-allocator,\n\
     \x20                               core-ours-linear,core-vma-virtual-linear] [--ring-size BYTES]\n\
     \x20            [--allocators vk-suballoc,vk-suballoc-locked,vma,gpu-allocator,gpu-alloc,vulkano,\n\
     \x20                          core-ours,core-offset-allocator,core-vulkano-free-list,core-vulkano-buddy]\n\
     \x20            [--scaling 1000,10000,100000,1000000 | --no-scaling] [--scaling-ops N]\n\
     \x20            [--scaling-gpu-allocator-max N] [--scaling-vulkano-max N]\n\
     \x20            [--real-resources] [--print-requirements]\n\
     \x20            [--placement-hash] [--device NAME] (--traces \"\": the scaling run alone)\n\
     \x20            [--json FILE] [--markdown FILE] [--empty-block-reserve X] (vk-suballoc's Config)\n\
     \x20            [--defragment [--defragment-every N|P%]] (default every 2% of a trace)"
}

fn parse_number(s: &str) -> Result<u64, String> {
    let s = s.replace('_', "");
    let parsed = if let Some(hex) = s.strip_prefix("0x") {
        u64::from_str_radix(hex, 16).ok()
    } else if let Some((m, e)) = s.split_once('e') {
        match (m.parse::<u64>(), e.parse::<u32>()) {
            (Ok(m), Ok(e)) => m.checked_mul(10u64.pow(e)),
            _ => None,
        }
    } else {
        s.parse().ok()
    };
    parsed.ok_or_else(|| format!("not a number: {s}"))
}

fn parse_args() -> Result<Args, String> {
    let mut args = Args {
        ops: 200_000,
        runs: 5,
        seed: DEFAULT_SEED,
        traces: TraceKind::ALL.to_vec(),
        allocators: Which::ALL.to_vec(),
        scaling: vec![1_000, 10_000, 100_000, 1_000_000],
        scaling_ops: 100_000,
        scaling_gpu_allocator_max: 10_000,
        scaling_vulkano_max: 100_000,
        real_resources: false,
        defragment: false,
        defragment_every: defragment::Every::Percent(2.0),
        print_requirements: false,
        placement_hash: false,
        json: None,
        markdown: None,
        device: None,
        ring: true,
        ring_allocators: ring_backends::RingWhich::ALL.to_vec(),
        ring_size: 64 << 20,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().ok_or_else(|| format!("{flag} needs a value"));
        match flag.as_str() {
            "--ops" => args.ops = parse_number(&value()?)? as usize,
            "--runs" => args.runs = (parse_number(&value()?)? as usize).max(1),
            "--seed" => args.seed = parse_number(&value()?)?,
            "--traces" => {
                let list = value()?;
                args.ring = list.split(',').any(|t| t == "ring");
                args.traces = list
                    .split(',')
                    .filter(|t| !t.is_empty() && *t != "ring")
                    .map(|t| {
                        TraceKind::ALL
                            .into_iter()
                            .find(|k| k.name() == t)
                            .ok_or_else(|| format!("unknown trace {t}"))
                    })
                    .collect::<Result<_, _>>()?;
            }
            "--allocators" => {
                args.allocators = value()?
                    .split(',')
                    .map(|a| Which::parse(a).ok_or_else(|| format!("unknown allocator {a}")))
                    .collect::<Result<_, _>>()?;
            }
            "--scaling" => {
                args.scaling = value()?
                    .split(',')
                    .map(|n| parse_number(n).map(|n| n as usize))
                    .collect::<Result<_, _>>()?;
            }
            "--ring-allocators" => {
                args.ring_allocators = value()?
                    .split(',')
                    .map(|a| {
                        ring_backends::RingWhich::parse(a)
                            .ok_or_else(|| format!("unknown ring allocator {a}"))
                    })
                    .collect::<Result<_, _>>()?;
            }
            "--ring-size" => args.ring_size = parse_number(&value()?)?.max(1 << 20),
            "--no-scaling" => args.scaling.clear(),
            "--scaling-ops" => args.scaling_ops = parse_number(&value()?)? as usize,
            "--scaling-gpu-allocator-max" => {
                args.scaling_gpu_allocator_max = parse_number(&value()?)? as usize;
            }
            "--scaling-vulkano-max" => {
                args.scaling_vulkano_max = parse_number(&value()?)? as usize;
            }
            "--real-resources" => args.real_resources = true,
            "--defragment" => args.defragment = true,
            "--defragment-every" => {
                args.defragment_every = defragment::Every::parse(&value()?)?;
            }
            "--print-requirements" => args.print_requirements = true,
            "--placement-hash" => args.placement_hash = true,
            "--json" => args.json = Some(value()?),
            "--markdown" => args.markdown = Some(value()?),
            "--device" => args.device = Some(value()?),
            "--empty-block-reserve" => {
                let reserve: f64 = value()?
                    .parse()
                    .map_err(|_| format!("{flag} needs a number"))?;
                // Set once, before any allocator is made.
                let _ = backends::EMPTY_BLOCK_RESERVE.set(reserve);
            }
            "-h" | "--help" => return Err(usage().to_owned()),
            other => return Err(format!("unknown argument {other}\n{}", usage())),
        }
    }
    Ok(args)
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

/// One replay of `trace` on a fresh allocator `which`.
fn run_once(
    which: Which,
    ctx: &VulkanContext,
    trace: &Trace,
    overhead: f64,
) -> (replay::RunFigures, vulkan::MemoryCounts, Option<u64>) {
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
        Which::OurCore => run_one(
            backends::OurCore::new(max_allocations),
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
fn measure(
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
fn harness_floor(trace: &Trace, runs: usize, overhead: f64) -> report::Floor {
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

/// One replay on a fresh allocator; the counters are read before it drops.
fn run_one<B: Backend>(
    mut backend: B,
    trace: &Trace,
    overhead: f64,
    high_water: bool,
) -> (replay::RunFigures, vulkan::MemoryCounts, Option<u64>) {
    vulkan::reset_counts();
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

/// The Vulkan device `args` names, with the validation layer when
/// `validation`; `None` after printing why it could not be opened.
fn open_device(validation: bool, args: &Args) -> Option<VulkanContext> {
    VulkanContext::new(validation, args.device.as_deref())
        .map_err(|e| eprintln!("error: {e}"))
        .ok()
}

fn real_resources(args: &Args) -> ExitCode {
    let Some(ctx) = open_device(true, args) else {
        return ExitCode::FAILURE;
    };
    println!(
        "real resources on {} ({}), validation on, seed {:#x}, about {} operations per trace",
        ctx.device_name, ctx.driver_info, args.seed, args.ops
    );
    if let Err(e) = ctx.check_validation_reports() {
        eprintln!("error: {e}");
        return ExitCode::FAILURE;
    }
    println!("validation armed: a deliberate misaligned bind was reported");
    let mut source = RequirementSource::new(&ctx.device);
    let mut ok = true;
    for &kind in &args.traces {
        let trace = trace::generate(kind, args.ops, args.seed, &mut source);
        for &which in &args.allocators {
            let max_allocations = (2 * trace.slots + 64) as u32;
            let fig = match which {
                Which::VkSuballoc => {
                    replay::replay_real(&mut backends::VkSuballoc::<false>::new(&ctx), &trace, &ctx)
                }
                Which::VkSuballocLocked => {
                    replay::replay_real(&mut backends::VkSuballoc::<true>::new(&ctx), &trace, &ctx)
                }
                Which::Vma => replay::replay_real(&mut backends::Vma::new(&ctx), &trace, &ctx),
                Which::GpuAllocator => {
                    replay::replay_real(&mut backends::GpuAllocator::new(&ctx), &trace, &ctx)
                }
                Which::GpuAlloc => {
                    replay::replay_real(&mut backends::GpuAlloc::new(&ctx), &trace, &ctx)
                }
                Which::Vulkano => {
                    replay::replay_real(&mut vulkano_peer::Vulkano::new(&ctx), &trace, &ctx)
                }
                // The cores hand out offsets, not memory: nothing to bind.
                Which::OurCore
                | Which::OffsetAllocatorCore
                | Which::VulkanoFreeListCore
                | Which::VulkanoBuddyCore => {
                    let _ = max_allocations;
                    continue;
                }
            };
            let good = fig.failures == 0
                && fig.overlaps == 0
                && fig.granularity_conflicts == 0
                && fig.requirement_mismatches == 0
                && fig.validation_messages == 0;
            ok &= good;
            println!(
                "{:<12} {:<20} resources {:>7}  failures {}  overlaps {}  granularity conflicts {}  requirement mismatches {}  validation messages {}  {}",
                trace.name,
                which.name(),
                fig.resources,
                fig.failures,
                fig.overlaps,
                fig.granularity_conflicts,
                fig.requirement_mismatches,
                fig.validation_messages,
                if good { "ok" } else { "FAILED" }
            );
        }
    }
    if args.ring {
        ok &= real_ring(args, &ctx, &mut source);
    }
    if ok {
        if !args.traces.is_empty() {
            println!("real resources: every allocation bound, no overlap, no granularity conflict, no validation message");
        }
        if args.ring {
            println!(
                "ring: no allocation overlapped or was misaligned, every tag read back, nothing leaked (ring allocations are ranges of the ring's own buffer: nothing bound)"
            );
        }
        ExitCode::SUCCESS
    } else {
        eprintln!("real resources: FAILED");
        ExitCode::FAILURE
    }
}

/// `--real-resources` on the `ring` trace: every Vulkan row, untimed,
/// under validation, writing a tag into the first and last bytes of every
/// allocation through its mapping (the ring row through `ring_write`) and
/// checking it when the allocation's frame completes: a later allocation
/// that overlapped it would have overwritten it. A ring allocation is a
/// range of the ring's buffer, not a resource of its own, so nothing is
/// bound per allocation (the ring's buffer is real and bound by
/// vk-suballoc); the peers' rows hand out memory, whose placement the
/// shadow checks as in the timed run.
fn real_ring(args: &Args, ctx: &VulkanContext, source: &mut RequirementSource<'_>) -> bool {
    let trace = ring::generate(args.ops, args.seed, source);
    let before = vulkan::validation_messages();
    let mut ok = true;
    for which in ring::runnable(&args.ring_allocators, ctx) {
        if !which.is_vulkan() {
            continue;
        }
        let start = vulkan::validation_messages();
        let (fig, _) = ring::run_once(which, ctx, &trace, args.ring_size, 0.0, true);
        let messages = vulkan::validation_messages() - start;
        let good = fig.clean() && messages == 0;
        ok &= good;
        println!(
            "{:<12} {:<40} allocations {:>7}  failures {}  misaligned {}  overlaps {}  tags overwritten {}  leaked {:?}  bytes left {}  validation messages {}  {}",
            "ring",
            which.name(),
            fig.allocs,
            fig.failures,
            fig.misaligned,
            fig.overlaps,
            fig.clobbered,
            fig.leaked,
            fig.memory_left,
            messages,
            if good { "ok" } else { "FAILED" }
        );
    }
    ok && vulkan::validation_messages() == before
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
        // A pool's refused requests are what it measures, not a fault.
        && results.pools.iter().all(|p| {
            [&p.plain, &p.compacting]
                .iter()
                .all(|r| r.overlaps + r.granularity_conflicts + r.misplaced_moves == 0)
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
