//! `--real-resources`: every trace replayed untimed on the Vulkan rows
//! under the validation layer, with real buffers and images bound where
//! each allocator places them, and the `ring` trace with a tag written
//! into every allocation and read back when its frame completes. It checks
//! the placements (no failure, overlap, granularity conflict, requirement
//! mismatch or validation message) rather than timing them, which is why
//! it is apart from the timed runs of `timed_runs.rs`.

use std::process::ExitCode;

use crate::backends::{self, Which};
use crate::trace::{self, RequirementSource};
use crate::vulkan::{self, VulkanContext};
use crate::{open_device, replay, ring, vulkano_peer, Args};

pub(super) fn real_resources(args: &Args) -> ExitCode {
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
