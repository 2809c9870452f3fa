//! `--real-resources`: every trace replayed untimed on the Vulkan rows
//! under the validation layer, with real buffers and images bound where
//! each allocator places them, and the `ring` trace with a tag written
//! into every allocation and read back when its frame completes. It checks
//! the placements (no failure, overlap, granularity conflict, requirement
//! mismatch or validation message) rather than timing them, which is why
//! it is apart from the timed runs of `timed_runs.rs`.

use std::process::ExitCode;

use crate::backends::{self, Backend, Which};
use crate::trace::{self, RequirementSource, Trace};
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
    // Every message from here on is counted once: in an allocator's row
    // when it came while that allocator lived, else below the rows.
    let armed = vulkan::validation_messages();
    let mut counted = 0;
    for &kind in &args.traces {
        let trace = trace::generate(kind, args.ops, args.seed, &mut source);
        for &which in &args.allocators {
            let fig = match which {
                Which::VkSuballoc => {
                    replay_checked(|| backends::VkSuballoc::<false>::new(&ctx), &trace, &ctx)
                }
                Which::VkSuballocLocked => {
                    replay_checked(|| backends::VkSuballoc::<true>::new(&ctx), &trace, &ctx)
                }
                Which::Vma => replay_checked(|| backends::Vma::new(&ctx), &trace, &ctx),
                Which::GpuAllocator => {
                    replay_checked(|| backends::GpuAllocator::new(&ctx), &trace, &ctx)
                }
                Which::GpuAlloc => replay_checked(|| backends::GpuAlloc::new(&ctx), &trace, &ctx),
                Which::Vulkano => replay_checked(|| vulkano_peer::Vulkano::new(&ctx), &trace, &ctx),
                // The cores hand out offsets, not memory: nothing to bind.
                Which::OurCore
                | Which::OffsetAllocatorCore
                | Which::VulkanoFreeListCore
                | Which::VulkanoBuddyCore => continue,
            };
            counted += fig.validation_messages;
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
    // Between the rows: the traces' requirement queries.
    let outside = vulkan::validation_messages() - armed - counted;
    if outside != 0 {
        println!("validation messages outside the allocators' rows: {outside}  FAILED");
        ok = false;
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

/// `trace` replayed with real resources ([`replay::replay_real`]) through
/// the backend `make` makes, with the validation messages counted from
/// before it is made until after it is dropped: a message while an
/// allocator is set up (vulkano wraps the bench's device on its first
/// use) or torn down (its blocks freed, unmapped) fails its row as one
/// during the replay does. Counted around the replay alone, such messages
/// were printed and the run still passed.
fn replay_checked<B: Backend>(
    make: impl FnOnce() -> B,
    trace: &Trace,
    ctx: &VulkanContext,
) -> replay::RealFigures {
    let (mut fig, messages) =
        with_messages_counted(make, |backend| replay::replay_real(backend, trace, ctx));
    fig.validation_messages = messages;
    fig
}

/// Makes a value with `make`, runs `run` on it and drops it, and returns
/// what `run` returned with the validation messages counted meanwhile,
/// making and dropping included.
fn with_messages_counted<B, R>(
    make: impl FnOnce() -> B,
    run: impl FnOnce(&mut B) -> R,
) -> (R, u64) {
    let before = vulkan::validation_messages();
    let mut value = make();
    let result = run(&mut value);
    drop(value);
    (result, vulkan::validation_messages() - before)
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Reports a message when it is made and another when it drops, as
    /// vulkano's first allocator did on the H200 (its device wrapper's
    /// property query) and an allocator's teardown could.
    struct Noisy;

    impl Noisy {
        fn new() -> Self {
            vulkan::note_validation_message();
            Self
        }
    }

    impl Drop for Noisy {
        fn drop(&mut self) {
            vulkan::note_validation_message();
        }
    }

    #[test]
    fn messages_while_an_allocator_is_made_or_dropped_count_in_its_row() {
        let (ran, messages) = with_messages_counted(Noisy::new, |_| 7);
        assert_eq!((ran, messages), (7, 2));
    }
}
