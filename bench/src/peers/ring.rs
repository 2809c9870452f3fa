//! The `ring` trace: per-frame transient allocations (uniforms, staging
//! copies, dynamic vertices) that all die when their frame completes, the
//! work vk-suballoc's upload rings (`Allocator::ring_allocate`) are for,
//! against the peers' nearest equivalents (`ring_backends.rs`).
//!
//! A seeded frame loop: each frame makes 50..=200 allocations of
//! 256 B..256 KiB (log-uniform) at one alignment (256 bytes, or the
//! buffer requirements' when larger, as a `minUniformBufferOffsetAlignment`),
//! and frame `f` completes at the start of frame `f + 2` or `f + 3`
//! (frames complete in order, so at most three frames hold ring space: two
//! in flight and the one being recorded). Every backend gets the same
//! sizes and the same completions. A frame's start releases the frames
//! completed by then (timed: an engine's `collect`, or the frees of their
//! allocations in allocation order, FIFO), then its allocations are made
//! (timed), then it ends (timed: `end_frame_timeline` for the ring, a
//! `finish_frame` for the bare core, nothing for the rest). The bench
//! signals the timeline semaphore from the host (`vkSignalSemaphore`,
//! untimed) when a frame completes: no queue work. Nothing is created and
//! no byte is written in the timed regions.
//!
//! Between the timed regions every allocation is checked: its offset is a
//! multiple of the alignment, and it overlaps no live allocation of the
//! same buffer (ring rows, whose offsets are the buffer's) or memory
//! object. After the last frame every frame completes and is released, and
//! the backend's own count of live allocations must be zero.

use std::collections::{BTreeMap, VecDeque};
use std::time::Instant;

use crate::ring_backends::{self, RingWhich};
use crate::ring_peers;
use crate::ring_report::RingRow;
use crate::trace::{RequirementSource, Resource, Rng};
use crate::vulkan::{self, VulkanContext};

/// The alignment of the trace's allocations, unless the device's
/// buffers need more.
pub const RING_ALIGN: u64 = 256;

/// The seeded frame loop every ring backend replays.
#[derive(Debug)]
pub struct RingTrace {
    pub seed: u64,
    /// Every allocation's size, frame after frame.
    pub sizes: Vec<u64>,
    /// Frame `f`'s allocations are `sizes[starts[f]..starts[f + 1]]`.
    pub starts: Vec<usize>,
    /// Frames completed by the start of frame `f` (frames `0..done[f]`).
    pub done: Vec<u64>,
    /// The alignment of every allocation.
    pub align: u64,
    /// `memoryTypeBits` of a uniform buffer (for the rows that take
    /// `VkMemoryRequirements`).
    pub memory_type_bits: u32,
}

impl RingTrace {
    pub fn frames(&self) -> usize {
        self.done.len()
    }

    pub fn allocations(&self) -> u64 {
        self.sizes.len() as u64
    }

    pub fn frame(&self, f: usize) -> &[u64] {
        &self.sizes[self.starts[f]..self.starts[f + 1]]
    }

    /// The most requested bytes alive at once: the frames not completed
    /// by a frame's start and that frame.
    pub fn peak_live(&self) -> u64 {
        let bytes: Vec<u64> = (0..self.frames())
            .map(|f| self.frame(f).iter().sum())
            .collect();
        (0..self.frames())
            .map(|f| bytes[self.done[f] as usize..=f].iter().sum::<u64>())
            .max()
            .unwrap_or(0)
    }
}

/// About `ops / 2` allocations (each is freed: `ops` operations, as the
/// other traces count them), seeded as the other traces.
pub fn generate(ops: usize, seed: u64, source: &mut RequirementSource<'_>) -> RingTrace {
    let uniform = source.get(Resource::Buffer {
        size: 256,
        usage: ash::vk::BufferUsageFlags::UNIFORM_BUFFER | ash::vk::BufferUsageFlags::TRANSFER_SRC,
    });
    let (sizes, starts, done) = frame_plan(ops, seed);
    RingTrace {
        seed,
        sizes,
        starts,
        done,
        align: uniform.alignment.max(RING_ALIGN),
        memory_type_bits: uniform.memory_type_bits,
    }
}

/// The sizes, frame starts and completions of [`generate`].
fn frame_plan(ops: usize, seed: u64) -> (Vec<u64>, Vec<usize>, Vec<u64>) {
    let mut rng = Rng::new(seed);
    let target = (ops / 2).max(1);
    let (mut sizes, mut starts, mut done) = (Vec::new(), vec![0], Vec::new());
    let mut completed = 0u64;
    while sizes.len() < target {
        let f = done.len() as u64;
        // Frame f - d completes now (d = 2 or 3), in order.
        let d = rng.range(2, 3);
        completed = completed.max((f + 1).saturating_sub(d));
        done.push(completed);
        for _ in 0..rng.range(50, 200) {
            sizes.push(rng.log_uniform(256, 256 << 10));
        }
        starts.push(sizes.len());
    }
    (sizes, starts, done)
}

/// A per-frame transient allocator the ring replay drives.
pub trait RingBackend {
    /// What an allocation hands back.
    type Handle;
    /// `size` bytes at a multiple of `align` in the current frame; `None`
    /// on failure.
    fn allocate(&mut self, size: u64, align: u64) -> Option<Self::Handle>;
    /// Releases one completed frame's allocations, in allocation order
    /// (timed). Rings drop the handles: the frame's reclaim frees them.
    fn release(&mut self, handles: &mut Vec<Self::Handle>);
    /// After the completed frames' `release`: frames `0..done` completed
    /// (timed). A ring reclaims their space here.
    fn reclaim(&mut self, _done: u64) {}
    /// Ends frame `frame` (timed).
    fn end_frame(&mut self, _frame: u64) {}
    /// Frames `0..done` completed on the GPU (untimed): a host signal.
    fn complete(&mut self, _done: u64) {}
    /// Where the allocation lies: the buffer (rings) or memory object it
    /// is an offset of, as a raw handle (0 for the cores), and the offset.
    fn placement(&self, handle: &Self::Handle) -> (u64, u64);
    /// After the last frame is released (untimed): live allocations by the
    /// backend's own statistics (the ring's are released with a frame
    /// after the ring is destroyed), or `None` where it keeps none.
    fn live_allocations(&mut self) -> Option<u64>;
    /// `--real-resources`: writes `tag` into the first and last 8 bytes
    /// through the mapping (the ring through `ring_write`); `false` when
    /// it has none (the cores).
    fn write_tag(&mut self, _handle: &mut Self::Handle, _size: u64, _tag: u64) -> bool {
        false
    }
    /// Reads back what [`write_tag`](Self::write_tag) wrote (first, last).
    fn read_tag(&mut self, _handle: &mut Self::Handle, _size: u64) -> Option<(u64, u64)> {
        None
    }
}

/// The figures of one replay.
#[derive(Clone, Copy, Debug, Default)]
pub struct RingFigures {
    /// Nanoseconds in the allocation segments.
    pub alloc_ns: f64,
    /// Nanoseconds in frame starts (release + reclaim) and ends.
    pub frame_ns: f64,
    /// Calls made (failed ones included) and frames.
    pub allocs: u64,
    pub frames: u64,
    pub failures: u64,
    /// Peak of live requested bytes.
    pub peak_live: u64,
    /// Highest end offset (the cores' footprint).
    pub high_water: u64,
    /// Nanoseconds of the timed regions inside `vkAllocateMemory` /
    /// `vkFreeMemory`.
    pub driver_ns: f64,
    /// Checks: allocations at an offset that is not a multiple of the
    /// alignment, overlapping a live allocation, and (real resources)
    /// whose tags were overwritten before their frame completed.
    pub misaligned: u64,
    pub overlaps: u64,
    pub clobbered: u64,
    /// Live allocations the backend counts after the final release.
    pub leaked: Option<u64>,
    /// `VkDeviceMemory` bytes the hooks count alive once the backend is
    /// dropped.
    pub memory_left: u64,
}

impl RingFigures {
    pub fn ns_per_alloc(&self) -> f64 {
        self.alloc_ns / self.allocs.max(1) as f64
    }
    /// Frame starts and ends, per allocation.
    pub fn frame_ns_per_alloc(&self) -> f64 {
        self.frame_ns / self.allocs.max(1) as f64
    }
    pub fn ns_per_frame(&self) -> f64 {
        self.frame_ns / self.frames.max(1) as f64
    }
    /// Everything, per allocation.
    pub fn all_in_ns_per_alloc(&self) -> f64 {
        (self.alloc_ns + self.frame_ns) / self.allocs.max(1) as f64
    }
    pub fn clean(&self) -> bool {
        self.failures + self.misaligned + self.overlaps + self.clobbered + self.memory_left == 0
            && self.leaked.unwrap_or(0) == 0
    }
}

/// One live frame's allocations: handles, and (size, space, offset) for
/// the checks.
struct Frame<H> {
    handles: Vec<H>,
    placed: Vec<(u64, u64, u64)>,
}

/// Replays `trace` through `backend`; with `tags`, writes a tag into every
/// allocation and checks it when its frame completes (`--real-resources`).
pub fn replay<B: RingBackend>(
    backend: &mut B,
    trace: &RingTrace,
    timer_overhead: f64,
    tags: bool,
) -> RingFigures {
    let mut fig = RingFigures::default();
    let mut live: VecDeque<Frame<B::Handle>> = VecDeque::new();
    let mut spare: Vec<Frame<B::Handle>> = Vec::new();
    // (space, offset) -> end, of every live allocation.
    let mut shadow: BTreeMap<(u64, u64), u64> = BTreeMap::new();
    let mut released = 0u64;
    let mut live_bytes = 0u64;
    let timed = |t0: Instant| (t0.elapsed().as_nanos() as f64 - timer_overhead).max(0.0);
    let frames = trace.frames();
    for f in 0..=frames {
        // The last pass completes every frame and only releases.
        let done = if f < frames {
            trace.done[f]
        } else {
            frames as u64
        };
        backend.complete(done);
        let due = (done - released) as usize;
        // Untimed: the checks' bookkeeping of the frames about to go.
        for (k, frame) in live.iter_mut().take(due).enumerate() {
            for (i, &(size, space, offset)) in frame.placed.iter().enumerate() {
                shadow.remove(&(space, offset));
                live_bytes -= size;
                if tags {
                    let want = frame_tag(released + k as u64, i);
                    if backend.read_tag(&mut frame.handles[i], size) != Some((want, !want)) {
                        fig.clobbered += 1;
                    }
                }
            }
        }
        let driver_before = vulkan::driver_ns();
        let t0 = Instant::now();
        for frame in live.iter_mut().take(due) {
            backend.release(&mut frame.handles);
        }
        backend.reclaim(done);
        fig.frame_ns += timed(t0);
        for _ in 0..due {
            let mut frame = live.pop_front().expect("a live frame per due one");
            frame.handles.clear();
            frame.placed.clear();
            spare.push(frame);
        }
        released = done;
        if f == frames {
            fig.driver_ns += (vulkan::driver_ns() - driver_before) as f64;
            break;
        }
        let sizes = trace.frame(f);
        let mut frame = spare.pop().unwrap_or_else(|| Frame {
            handles: Vec::with_capacity(256),
            placed: Vec::with_capacity(256),
        });
        let t0 = Instant::now();
        for &size in sizes {
            if let Some(handle) = backend.allocate(size, trace.align) {
                frame.handles.push(handle);
            }
        }
        fig.alloc_ns += timed(t0);
        fig.allocs += sizes.len() as u64;
        fig.failures += (sizes.len() - frame.handles.len()) as u64;
        let t0 = Instant::now();
        backend.end_frame(f as u64);
        fig.frame_ns += timed(t0);
        fig.driver_ns += (vulkan::driver_ns() - driver_before) as f64;
        fig.frames += 1;
        // Untimed checks. A failed allocation leaves a gap: match handles
        // to sizes only when none failed (else the sizes are unknown and
        // the frame goes unchecked; the failure is reported).
        if frame.handles.len() == sizes.len() {
            for (i, (handle, &size)) in frame.handles.iter_mut().zip(sizes).enumerate() {
                let (space, offset) = backend.placement(handle);
                fig.misaligned += u64::from(offset % trace.align != 0);
                let end = offset + size;
                let before = shadow
                    .range(..(space, offset))
                    .next_back()
                    .is_some_and(|(&(s, _), &e)| s == space && e > offset);
                let after = shadow
                    .range((space, offset)..)
                    .next()
                    .is_some_and(|(&(s, o), _)| s == space && o < end);
                fig.overlaps += u64::from(before || after);
                shadow.insert((space, offset), end);
                frame.placed.push((size, space, offset));
                live_bytes += size;
                fig.high_water = fig.high_water.max(end);
                if tags {
                    let tag = frame_tag(f as u64, i);
                    if !backend.write_tag(handle, size, tag) {
                        fig.clobbered += 1;
                    }
                }
            }
        }
        fig.peak_live = fig.peak_live.max(live_bytes);
        live.push_back(frame);
    }
    fig.leaked = backend.live_allocations();
    fig
}

/// The tag of allocation `i` of frame `frame` (its last 8 bytes get the
/// complement).
fn frame_tag(frame: u64, i: usize) -> u64 {
    (frame << 20 | i as u64) ^ 0x5a5a_0000_0000_0000
}

/// The rows of `which` that `ctx` can run: the ring row needs timeline
/// semaphores (said once, on standard error, when it is left out).
pub fn runnable(which: &[RingWhich], ctx: &VulkanContext) -> Vec<RingWhich> {
    which
        .iter()
        .copied()
        .filter(|&w| {
            let ok = !matches!(w, RingWhich::VkSuballocRing | RingWhich::VkSuballocRingMut)
                || ctx.timeline_semaphore;
            if !ok {
                eprintln!(
                    "ring: {} skipped: the device has no timelineSemaphore",
                    w.name()
                );
            }
            ok
        })
        .collect()
}

/// One replay of `trace` on a fresh backend `which`, with the hooks'
/// counts; the memory left once it is dropped goes in the figures.
pub fn run_once(
    which: RingWhich,
    ctx: &VulkanContext,
    trace: &RingTrace,
    capacity: u64,
    overhead: f64,
    tags: bool,
) -> (RingFigures, vulkan::MemoryCounts) {
    fn go<B: RingBackend>(
        mut backend: B,
        trace: &RingTrace,
        overhead: f64,
        tags: bool,
    ) -> (RingFigures, vulkan::MemoryCounts) {
        let fig = replay(&mut backend, trace, overhead, tags);
        let counts = vulkan::counts();
        drop(backend);
        (fig, counts)
    }
    vulkan::reset_counts();
    let bits = trace.memory_type_bits;
    let (mut fig, counts) = match which {
        RingWhich::VkSuballocRing => go(
            ring_backends::VkSuballocRing::<false>::new(ctx, capacity),
            trace,
            overhead,
            tags,
        ),
        RingWhich::VkSuballocRingMut => go(
            ring_backends::VkSuballocRing::<true>::new(ctx, capacity),
            trace,
            overhead,
            tags,
        ),
        RingWhich::VkSuballoc => go(
            ring_backends::VkSuballocGeneral::new(ctx, bits),
            trace,
            overhead,
            tags,
        ),
        RingWhich::VmaLinearPool => go(
            ring_peers::VmaLinearPool::new(ctx, capacity, bits),
            trace,
            overhead,
            tags,
        ),
        RingWhich::GpuAlloc => go(
            ring_peers::GpuAllocTransient::new(ctx, bits),
            trace,
            overhead,
            tags,
        ),
        RingWhich::GpuAllocator => go(
            ring_peers::GpuAllocatorGeneral::new(ctx, bits),
            trace,
            overhead,
            tags,
        ),
        RingWhich::OurLinearCore => go(
            ring_peers::OurLinearCore::new(capacity),
            trace,
            overhead,
            tags,
        ),
        RingWhich::VmaVirtualLinearCore => go(
            ring_peers::VmaVirtualLinearCore::new(capacity),
            trace,
            overhead,
            tags,
        ),
    };
    fig.memory_left = vulkan::counts().live_bytes;
    (fig, counts)
}

/// `trace` through every row of `which`: one uncounted warm-up round,
/// then `runs` rounds, each starting with another row (as the other
/// traces are measured).
pub fn measure(
    which: &[RingWhich],
    ctx: &VulkanContext,
    trace: &RingTrace,
    capacity: u64,
    runs: usize,
    overhead: f64,
) -> Vec<RingRow> {
    let n = which.len();
    let mut results: Vec<Vec<(RingFigures, vulkan::MemoryCounts)>> =
        vec![Vec::with_capacity(runs); n];
    for round in 0..=runs {
        for k in 0..n {
            let i = (k + round) % n;
            let result = run_once(which[i], ctx, trace, capacity, overhead, false);
            if round > 0 {
                results[i].push(result);
            }
        }
    }
    which
        .iter()
        .zip(results)
        .map(|(&w, results)| RingRow::new(w, &results))
        .collect()
}

/// The cost of one `vkGetSemaphoreCounterValue` (what the ring row's
/// `collect` calls per frame it polls), in ns: the median of batches.
pub fn semaphore_poll_ns(ctx: &VulkanContext) -> Option<f64> {
    if !ctx.timeline_semaphore {
        return None;
    }
    let mut kind = ash::vk::SemaphoreTypeCreateInfo::default()
        .semaphore_type(ash::vk::SemaphoreType::TIMELINE)
        .initial_value(0);
    let info = ash::vk::SemaphoreCreateInfo::default().push_next(&mut kind);
    // SAFETY: timelineSemaphore is enabled; destroyed below.
    let semaphore = unsafe { ctx.device.create_semaphore(&info, None) }.ok()?;
    let mut samples: Vec<f64> = (0..101)
        .map(|_| {
            let t0 = Instant::now();
            for _ in 0..100 {
                // SAFETY: a live timeline semaphore of this device.
                let _ = std::hint::black_box(unsafe {
                    ctx.device.get_semaphore_counter_value(semaphore)
                });
            }
            t0.elapsed().as_nanos() as f64 / 100.0
        })
        .collect();
    // SAFETY: nothing uses it.
    unsafe { ctx.device.destroy_semaphore(semaphore, None) };
    samples.sort_by(f64::total_cmp);
    Some(samples[samples.len() / 2])
}

#[cfg(test)]
mod tests;
