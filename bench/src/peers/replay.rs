//! Replaying a trace through one allocator, timed per segment.
//!
//! Each segment (a run of allocations or of frees) is timed with two
//! `Instant::now()` reads; the clock's own cost, measured at start-up, is
//! subtracted per segment. Bookkeeping (live bytes, failures, high-water
//! marks) happens between segments, outside the timed regions, so every
//! allocator pays exactly its own `allocate`/`free` plus storing the handle.

use std::collections::BTreeMap;
use std::time::Instant;

use ash::vk;

use crate::backends::Backend;
use crate::trace::{Kind, Resource, Trace, FREE};
use crate::vulkan::VulkanContext;

/// The figures of one replay.
#[derive(Clone, Copy, Debug, Default)]
pub struct RunFigures {
    /// Nanoseconds spent in the measured allocation segments.
    pub alloc_ns: f64,
    /// Nanoseconds spent in the measured free segments.
    pub free_ns: f64,
    /// Allocations (failed ones included: each was a call) and frees (of
    /// the allocations that succeeded) in the measured segments.
    pub allocs: u64,
    pub frees: u64,
    /// Allocations that failed (whole trace).
    pub failures: u64,
    /// Peak of live requested bytes.
    pub peak_live: u64,
    /// Highest end offset of any allocation (the cores' footprint).
    pub high_water: u64,
    /// Nanoseconds of the measured segments spent inside the driver's
    /// `vkAllocateMemory`/`vkFreeMemory` (part of `alloc_ns` + `free_ns`).
    pub driver_ns: f64,
    /// FNV-style hash of every placement offset in trace order, when asked
    /// for: equal hashes mean an allocator change kept every placement.
    pub placement_hash: Option<u64>,
}

impl RunFigures {
    pub fn ns_per_alloc(&self) -> f64 {
        self.alloc_ns / self.allocs.max(1) as f64
    }
    pub fn ns_per_free(&self) -> f64 {
        self.free_ns / self.frees.max(1) as f64
    }
    pub fn ns_per_op(&self) -> f64 {
        (self.alloc_ns + self.free_ns) / (self.allocs + self.frees).max(1) as f64
    }
    /// Of [`ns_per_op`](Self::ns_per_op), the part inside the driver.
    pub fn driver_ns_per_op(&self) -> f64 {
        self.driver_ns / (self.allocs + self.frees).max(1) as f64
    }
}

/// The cost of one timed empty region, in ns (median of many).
pub fn timer_overhead_ns() -> f64 {
    let mut samples: Vec<f64> = (0..20_001)
        .map(|_| {
            let t0 = Instant::now();
            std::hint::black_box(());
            t0.elapsed().as_nanos() as f64
        })
        .collect();
    samples.sort_by(f64::total_cmp);
    samples[samples.len() / 2]
}

/// The cost of one uncontended `std::sync::Mutex` lock and unlock, in ns
/// (median of batches): what an internally synchronised allocator (ours,
/// VMA) pays per call and `&mut self` ones (gpu-alloc, gpu-allocator) leave
/// to their caller.
pub fn mutex_pair_ns() -> f64 {
    let mutex = std::sync::Mutex::new(0u64);
    let mut samples: Vec<f64> = (0..201)
        .map(|_| {
            let t0 = Instant::now();
            for _ in 0..1000 {
                *std::hint::black_box(&mutex)
                    .lock()
                    .unwrap_or_else(|p| p.into_inner()) += 1;
            }
            t0.elapsed().as_nanos() as f64 / 1000.0
        })
        .collect();
    samples.sort_by(f64::total_cmp);
    samples[samples.len() / 2]
}

/// Replays `trace` through `backend`. With `high_water`, the end of every
/// allocation is read back (between segments) for the cores' footprint; with
/// `hash`, every offset is hashed into [`RunFigures::placement_hash`].
pub fn replay<B: Backend>(
    backend: &mut B,
    trace: &Trace,
    timer_overhead: f64,
    high_water: bool,
    hash: bool,
) -> RunFigures {
    let mut slots: Vec<Option<B::Handle>> = (0..trace.slots).map(|_| None).collect();
    let mut slot_size = vec![0u64; trace.slots];
    let mut fig = RunFigures {
        placement_hash: hash.then_some(0xcbf2_9ce4_8422_2325),
        ..RunFigures::default()
    };
    let mut live = 0u64;
    for (index, segment) in trace.segments.iter().enumerate() {
        let ops = &trace.ops[segment.start as usize..segment.end as usize];
        let driver_before = crate::vulkan::driver_ns();
        let t0 = Instant::now();
        if segment.alloc {
            for op in ops {
                let handle = backend.allocate(&trace.requests[op.req as usize]);
                slots[op.slot as usize] = handle;
            }
        } else {
            for op in ops {
                if let Some(handle) = slots[op.slot as usize].take() {
                    backend.free(handle);
                }
            }
        }
        let ns = (t0.elapsed().as_nanos() as f64 - timer_overhead).max(0.0);
        let measured = trace.measured.contains(&index);
        if measured {
            fig.driver_ns += (crate::vulkan::driver_ns() - driver_before) as f64;
        }
        if segment.alloc {
            for op in ops {
                match &slots[op.slot as usize] {
                    Some(handle) => {
                        let size = trace.requests[op.req as usize].requirements.size;
                        slot_size[op.slot as usize] = size;
                        live += size;
                        if high_water || hash {
                            let (_, offset) = backend.placement(handle);
                            fig.high_water = fig.high_water.max(offset + size);
                            if let Some(h) = &mut fig.placement_hash {
                                *h = (*h ^ offset).wrapping_mul(0x0100_0000_01b3);
                            }
                        }
                    }
                    None => {
                        slot_size[op.slot as usize] = 0;
                        fig.failures += 1;
                    }
                }
            }
            fig.peak_live = fig.peak_live.max(live);
            if measured {
                fig.alloc_ns += ns;
                fig.allocs += ops.len() as u64;
            }
        } else {
            // A slot's size is 0 exactly when its allocation failed (Vulkan
            // sizes are not): the timed loop skipped it, so it is no free.
            // Counted, it lowered a failing allocator's ns/free.
            let mut freed = 0u64;
            for op in ops {
                let size = std::mem::take(&mut slot_size[op.slot as usize]);
                live -= size;
                freed += u64::from(size != 0);
            }
            if measured {
                fig.free_ns += ns;
                fig.frees += freed;
            }
        }
    }
    debug_assert!(ops_are_consistent(trace));
    fig
}

fn ops_are_consistent(trace: &Trace) -> bool {
    trace
        .ops
        .iter()
        .all(|op| op.req == FREE || (op.req as usize) < trace.requests.len())
}

/// A real resource bound to an allocation.
enum Bound {
    Buffer(vk::Buffer),
    Image(vk::Image),
}

/// What `--real-resources` found for one allocator and trace.
#[derive(Clone, Copy, Debug, Default)]
pub struct RealFigures {
    pub resources: u64,
    pub failures: u64,
    pub overlaps: u64,
    /// A buffer and an optimal image in one `bufferImageGranularity` page
    /// of one memory object.
    pub granularity_conflicts: u64,
    pub requirement_mismatches: u64,
    /// Validation messages from before the allocator was made until after
    /// it dropped: set by the caller, which makes and drops it
    /// (`real_resources.rs`), not by [`replay_real`].
    pub validation_messages: u64,
}

/// Replays `trace` creating, binding and destroying real buffers and images
/// (untimed): checks that each resource's requirements match the trace's,
/// that no two live allocations of one memory object overlap, and that no
/// buffer and optimal image share a `bufferImageGranularity` page. The
/// validation messages are the caller's to count, over the allocator's
/// whole life ([`RealFigures::validation_messages`]).
pub fn replay_real<B: Backend>(backend: &mut B, trace: &Trace, ctx: &VulkanContext) -> RealFigures {
    let device = &ctx.device;
    let mut fig = RealFigures::default();
    let mut slots: Vec<Option<(B::Handle, Bound)>> = (0..trace.slots).map(|_| None).collect();
    // Live ranges per memory object: (memory, offset) -> (end, is image).
    let mut shadow: BTreeMap<(u64, u64), (u64, bool)> = BTreeMap::new();
    let page = ctx.buffer_image_granularity.max(1);
    for op in &trace.ops {
        if op.req == FREE {
            let Some((handle, bound)) = slots[op.slot as usize].take() else {
                continue;
            };
            let (memory, offset) = backend.placement(&handle);
            shadow.remove(&(vk::Handle::as_raw(memory), offset));
            // SAFETY: created below on this device; nothing uses it.
            unsafe {
                match bound {
                    Bound::Buffer(b) => device.destroy_buffer(b, None),
                    Bound::Image(i) => device.destroy_image(i, None),
                }
            }
            backend.free(handle);
            continue;
        }
        let req = &trace.requests[op.req as usize];
        // SAFETY: valid create infos; each resource is destroyed above.
        let (bound, actual) = unsafe {
            match req.resource {
                Resource::Buffer { .. } => {
                    let b = device
                        .create_buffer(&crate::trace::buffer_info(&req.resource), None)
                        .expect("vkCreateBuffer");
                    (Bound::Buffer(b), device.get_buffer_memory_requirements(b))
                }
                Resource::Image { .. } => {
                    let i = device
                        .create_image(&crate::trace::image_info(&req.resource), None)
                        .expect("vkCreateImage");
                    (Bound::Image(i), device.get_image_memory_requirements(i))
                }
            }
        };
        if actual.size != req.requirements.size
            || actual.alignment != req.requirements.alignment
            || actual.memory_type_bits != req.requirements.memory_type_bits
        {
            fig.requirement_mismatches += 1;
        }
        debug_assert_eq!(matches!(bound, Bound::Image(_)), req.kind == Kind::Image);
        let Some(handle) = backend.allocate(req) else {
            fig.failures += 1;
            // SAFETY: just created, never bound.
            unsafe {
                match bound {
                    Bound::Buffer(b) => device.destroy_buffer(b, None),
                    Bound::Image(i) => device.destroy_image(i, None),
                }
            }
            continue;
        };
        let (memory, offset) = backend.placement(&handle);
        let end = offset + req.requirements.size;
        let key = (vk::Handle::as_raw(memory), offset);
        let image = req.kind == Kind::Image;
        let overlaps_before = shadow
            .range((key.0, 0)..key)
            .next_back()
            .is_some_and(|(_, &(e, _))| e > offset);
        let overlaps_after = shadow
            .range(key..(key.0, u64::MAX))
            .next()
            .is_some_and(|(&(_, o), _)| o < end);
        if overlaps_before || overlaps_after {
            fig.overlaps += 1;
        }
        // Every live range of the same memory touching the first or the last
        // granularity page of this one (ranges are disjoint, so ends grow
        // with offsets and the scans stop at the first range past the page).
        let first_page = offset / page * page;
        let last_page_end = (end - 1) / page * page + page;
        let other_kind_before = shadow
            .range((key.0, 0)..key)
            .rev()
            .take_while(|(_, &(e, _))| e > first_page)
            .any(|(_, &(_, i))| i != image);
        let other_kind_after = shadow
            .range(key..(key.0, u64::MAX))
            .take_while(|(&(_, o), _)| o < last_page_end)
            .any(|(_, &(_, i))| i != image);
        if other_kind_before || other_kind_after {
            fig.granularity_conflicts += 1;
        }
        shadow.insert(key, (end, image));
        // SAFETY: memory and offset come from the allocator for these
        // requirements; validation checks the rest.
        unsafe {
            match bound {
                Bound::Buffer(b) => device.bind_buffer_memory(b, memory, offset),
                Bound::Image(i) => device.bind_image_memory(i, memory, offset),
            }
        }
        .expect("vkBind*Memory");
        fig.resources += 1;
        slots[op.slot as usize] = Some((handle, bound));
    }
    fig
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trace::{Op, Req, Segment};

    /// Fails every other allocation.
    struct EveryOtherFails(u64);

    impl Backend for EveryOtherFails {
        type Handle = u64;
        fn allocate(&mut self, _: &Req) -> Option<u64> {
            self.0 += 1;
            (self.0 % 2 == 1).then_some(self.0)
        }
        fn free(&mut self, _: u64) {}
        fn placement(&self, handle: &u64) -> (vk::DeviceMemory, u64) {
            (vk::DeviceMemory::null(), *handle * 4096)
        }
    }

    #[test]
    fn a_failed_allocation_is_no_free() {
        let req = Req::device_local(256, 64, Kind::Buffer);
        let allocs = (0..4).map(|slot| Op { slot, req: 0 });
        let frees = (0..4).map(|slot| Op { slot, req: FREE });
        let trace = Trace {
            name: "t".to_owned(),
            seed: 0,
            requests: vec![req],
            ops: allocs.chain(frees).collect(),
            segments: vec![
                Segment {
                    alloc: true,
                    start: 0,
                    end: 4,
                },
                Segment {
                    alloc: false,
                    start: 4,
                    end: 8,
                },
            ],
            slots: 4,
            measured: 0..2,
            allocations: 4,
            frees: 4,
        };
        let fig = replay(&mut EveryOtherFails(0), &trace, 0.0, false, false);
        assert_eq!((fig.allocs, fig.failures, fig.frees), (4, 2, 2));
        assert_eq!(fig.peak_live, 512);
    }
}
