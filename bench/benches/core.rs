//! Benchmarks of the offset core: `vk_suballoc::offset` against the
//! `offset-allocator` crate (the Rust port of sebbbi's OffsetAllocator) on the
//! same seeded workloads in the same run, and the linear ring's bump cost.
//!
//! Run: `cargo bench -p vk-suballoc-bench --bench core`
//!
//! Each iteration frees one live allocation picked at random (uniformly over
//! all of them) and allocates the next size of the workload's stream in its
//! place, so the number of live allocations stays at the benchmark's argument
//! (1e3..1e6). Sizes are generated up front from a fixed seed and victims
//! come from a Weyl sequence, so both allocators see the same requests and
//! picking them costs a few instructions. Capacity is twice the expected live
//! volume.
//!
//! Workloads:
//! - `uniform_small`: sizes uniform in 1..=1024 bytes.
//! - `log_uniform`: sizes log-uniform in 256 B..64 MiB, counted in 256-byte
//!   units (1..=262144) so that `offset-allocator`'s `u32` offsets can address
//!   it; at 1e6 live allocations the volume (~2e10 units) exceeds `u32` and
//!   only `vk_suballoc` runs.

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use divan::Bencher;
use vk_suballoc::offset::{AllocationId, LinearAllocator, OffsetAllocator};

fn main() {
    // Long enough that the 1e6 runs touch many victims; the command line and
    // `DIVAN_*` variables still override these.
    divan::Divan::default()
        .sample_count(100)
        .sample_size(1000)
        .min_time(std::time::Duration::from_secs(1))
        .config_with_args()
        .main();
}

const LIVE: [usize; 4] = [1_000, 10_000, 100_000, 1_000_000];

/// Length of the pregenerated streams (a power of two).
const STREAM: usize = 1 << 16;

/// SplitMix64: a tiny seeded generator, so the bench needs no `rand`.
struct SplitMix(u64);

impl SplitMix {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `[0, 1)`.
    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
}

#[derive(Clone, Copy)]
enum Workload {
    UniformSmall,
    LogUniform,
}

impl Workload {
    fn size(self, rng: &mut SplitMix) -> u64 {
        match self {
            Workload::UniformSmall => 1 + rng.next() % 1024,
            // 256 B .. 64 MiB in 256-byte units: 2^0 .. 2^18.
            Workload::LogUniform => (2f64.powf(18.0 * rng.unit()).round() as u64).max(1),
        }
    }

    /// Expected size, for sizing the capacity.
    fn mean_size(self) -> f64 {
        match self {
            Workload::UniformSmall => 512.5,
            Workload::LogUniform => ((1u64 << 18) - 1) as f64 / (18.0 * std::f64::consts::LN_2),
        }
    }

    fn capacity(self, live: usize) -> u64 {
        (2.0 * live as f64 * self.mean_size()) as u64
    }
}

/// The seeded request streams one benchmark replays.
struct Streams {
    live: u64,
    initial: Vec<u64>,
    sizes: Vec<u64>,
}

impl Streams {
    fn new(workload: Workload, live: usize) -> Self {
        let mut rng = SplitMix(0x5eed_0000 + live as u64);
        Self {
            live: live as u64,
            initial: (0..live).map(|_| workload.size(&mut rng)).collect(),
            sizes: (0..STREAM).map(|_| workload.size(&mut rng)).collect(),
        }
    }

    /// The request of step `step`: which live allocation to free (uniform
    /// over all of them, from a Weyl sequence, so no table limits the set of
    /// victims) and the size to allocate in its place.
    #[inline]
    fn step(&self, step: u64) -> (usize, u64) {
        let weyl = step.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 32;
        let victim = (weyl * self.live) >> 32;
        (victim as usize, self.sizes[step as usize & (STREAM - 1)])
    }
}

fn ours_pair<const ALIGN: u64>(bencher: Bencher, workload: Workload, live: usize) {
    let streams = Streams::new(workload, live);
    let mut heap = OffsetAllocator::<3>::new(workload.capacity(live), live as u32 + 16).unwrap();
    let mut ids: Vec<Option<AllocationId>> = streams
        .initial
        .iter()
        .map(|&size| heap.allocate(size, ALIGN).ok().map(|a| a.id))
        .collect();
    let mut step = 0u64;
    bencher.bench_local(|| {
        let (victim, size) = streams.step(step);
        step += 1;
        if let Some(id) = ids[victim].take() {
            heap.free(id).unwrap();
        }
        ids[victim] = heap.allocate(size, ALIGN).ok().map(|a| a.id);
    });
    report_failures("vk_suballoc", heap.counters().failed_allocations, step);
}

fn peer_pair(bencher: Bencher, workload: Workload, live: usize) {
    let streams = Streams::new(workload, live);
    let capacity = u32::try_from(workload.capacity(live)).expect("fits u32");
    let max_allocs = u32::try_from(2 * live + 1024).expect("fits u32");
    let mut heap = offset_allocator::Allocator::<u32>::with_max_allocs(capacity, max_allocs);
    let to_u32 = |size: u64| u32::try_from(size).expect("fits u32");
    let mut live_allocs: Vec<Option<offset_allocator::Allocation<u32>>> = streams
        .initial
        .iter()
        .map(|&size| heap.allocate(to_u32(size)))
        .collect();
    let mut step = 0u64;
    let mut failures = 0u64;
    bencher.bench_local(|| {
        let (victim, size) = streams.step(step);
        step += 1;
        if let Some(allocation) = live_allocs[victim].take() {
            heap.free(allocation);
        }
        live_allocs[victim] = heap.allocate(to_u32(size));
        failures += u64::from(live_allocs[victim].is_none());
    });
    report_failures("offset-allocator", failures, step);
}

fn report_failures(name: &str, failures: u64, steps: u64) {
    if failures > 0 {
        eprintln!("  note: {name}: {failures} of {steps} allocations failed (fragmentation)");
    }
}

/// Sizes uniform in 1..=1024 bytes.
mod uniform_small {
    use super::*;

    #[divan::bench(args = LIVE)]
    fn vk_suballoc(bencher: Bencher, live: usize) {
        ours_pair::<1>(bencher, Workload::UniformSmall, live);
    }

    #[divan::bench(args = LIVE)]
    fn vk_suballoc_align_256(bencher: Bencher, live: usize) {
        ours_pair::<256>(bencher, Workload::UniformSmall, live);
    }

    #[divan::bench(args = LIVE)]
    fn offset_allocator(bencher: Bencher, live: usize) {
        peer_pair(bencher, Workload::UniformSmall, live);
    }
}

/// Sizes log-uniform in 256 B..64 MiB, in 256-byte units.
mod log_uniform {
    use super::*;

    #[divan::bench(args = LIVE)]
    fn vk_suballoc(bencher: Bencher, live: usize) {
        ours_pair::<1>(bencher, Workload::LogUniform, live);
    }

    #[divan::bench(args = LIVE)]
    fn vk_suballoc_align_256(bencher: Bencher, live: usize) {
        ours_pair::<256>(bencher, Workload::LogUniform, live);
    }

    /// Up to 1e5 live: 1e6 needs more than `u32` units.
    #[divan::bench(args = [1_000, 10_000, 100_000])]
    fn offset_allocator(bencher: Bencher, live: usize) {
        peer_pair(bencher, Workload::LogUniform, live);
    }
}

/// The benchmark loop alone, with no allocator: the victim's id taken from
/// the table and a new one stored in its place, ids the size of ours
/// (`Option<AllocationId>`, 16 bytes). What every pair above pays besides
/// its allocator; at 1e6 live allocations the table is 16 MiB, touched at
/// random.
mod harness_alone {
    use super::*;

    #[divan::bench(args = LIVE)]
    fn ids_table(bencher: Bencher, live: usize) {
        let streams = Streams::new(Workload::UniformSmall, live);
        let mut ids: Vec<Option<[u32; 3]>> = (0..live as u32).map(|i| Some([i; 3])).collect();
        const { assert!(size_of::<Option<[u32; 3]>>() == size_of::<Option<AllocationId>>()) };
        let mut step = 0u64;
        bencher.bench_local(|| {
            let (victim, size) = streams.step(step);
            step += 1;
            divan::black_box(ids[victim].take());
            ids[victim] = divan::black_box(Some([size as u32; 3]));
        });
    }
}

/// One bump allocation of the per-frame ring (sizes 16..=512, align 16 and 256).
mod linear {
    use super::*;

    fn bump<const ALIGN: u64>(bencher: Bencher) {
        let mut rng = SplitMix(0x1ea5);
        let sizes: Vec<u64> = (0..STREAM).map(|_| 16 + rng.next() % 497).collect();
        let mut ring = LinearAllocator::new(1 << 30, 3).unwrap();
        let mut step = 0usize;
        bencher.bench_local(|| {
            let size = sizes[step & (STREAM - 1)];
            step += 1;
            match ring.allocate(size, ALIGN) {
                Ok(allocation) => allocation,
                Err(_) => {
                    // Full: retire the frame (its fence "signalled") and go on.
                    let frame = ring.finish_frame().unwrap();
                    ring.reclaim_through(frame);
                    ring.allocate(size, ALIGN).unwrap()
                }
            }
        });
    }

    #[divan::bench]
    fn allocate_align_16(bencher: Bencher) {
        bump::<16>(bencher);
    }

    #[divan::bench]
    fn allocate_align_256(bencher: Bencher) {
        bump::<256>(bencher);
    }
}
