//! The target's model of what the
//! allocator holds: live allocations, frees waiting for their frame, the
//! sealed frames and their signals, the custom pools.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};

use ash::vk;
use gpu_alloc_types::MemoryPropertyFlags as Props;
use vk_suballoc::device::fake::{FakeCounters, FakeDevice, FakeLayout, FakeMemory};
use vk_suballoc::device::{DedicatedHint, DeviceError};
use vk_suballoc::{
    Allocation, AllocationDesc, Allocator, Collected, Config, DedicatedPolicy, DedicatedTarget,
    DefragmentationLimits, Error, MemoryEvent, MemoryEventKind, Movable, Pool, PoolDesc, Request,
    ResourceKind, RingAllocation, UploadRing, UploadRingDesc, Usage,
};

#[path = "api.rs"]
mod api;
#[path = "model/apply.rs"]
mod apply;
#[path = "batch.rs"]
mod batch;
#[path = "figures.rs"]
mod figures;
#[path = "foreign.rs"]
mod foreign;
#[path = "frames.rs"]
mod frames;
#[path = "host.rs"]
mod host;
#[path = "ops.rs"]
mod ops;
#[path = "pool_probe.rs"]
mod pool_probe;
#[path = "pools.rs"]
mod pools;
#[path = "requests.rs"]
mod requests;
#[path = "rings.rs"]
mod rings;

use batch::Built;
pub use ops::{Op, PoolSpec, Req};
use rings::RingModel;

type FakeAllocator = Allocator<FakeDevice, FakeMemory>;

const USAGES: [Usage; 11] = [
    Usage::DEVICE_LOCAL,
    Usage::UPLOAD,
    Usage::UPLOAD.union(Usage::DEVICE_LOCAL),
    Usage::UPLOAD.union(Usage::ALLOW_TRANSFER_INSTEAD),
    Usage::READBACK,
    Usage::READBACK.union(Usage::UPLOAD),
    Usage::TRANSIENT,
    Usage::TRANSIENT.union(Usage::DEVICE_LOCAL),
    Usage::DEVICE_ADDRESS.union(Usage::DEVICE_LOCAL),
    Usage::DEVICE_LOCAL.union(Usage::PREFER_HOST),
    Usage::UPLOAD
        .union(Usage::ALLOW_TRANSFER_INSTEAD)
        .union(Usage::PREFER_HOST),
];
const KINDS: [ResourceKind; 4] = [
    ResourceKind::Buffer,
    ResourceKind::LinearImage,
    ResourceKind::OptimalImage,
    ResourceKind::Unknown,
];
const POLICIES: [DedicatedPolicy; 3] = [
    DedicatedPolicy::Auto,
    DedicatedPolicy::Always,
    DedicatedPolicy::Never,
];
const NAMES: [&str; 3] = ["fuzz-mesh", "fuzz-texture", "fuzz-staging"];

/// A range the allocator counts: live, or freed after a frame not collected.
#[derive(Clone, Copy, Debug)]
struct Held {
    memory: vk::DeviceMemory,
    offset: u64,
    size: u64,
    memory_type: u32,
    dedicated: bool,
    pool: Option<Pool>,
    /// The resource it was made for, for `bufferImageGranularity`.
    kind: ResourceKind,
    /// Resources of the device it holds (a ring chunk's buffer, an
    /// application's buffer or image queued with it): 0 or 1.
    resources: usize,
    /// The entries of the frame queue it takes once freed after a frame:
    /// 2 when its resource was queued as an alias before it.
    queued: usize,
    /// The name the memory map must show for it, where the model knows
    /// it: a live allocation's last name, kept once it is freed after a
    /// frame until that frame is collected (its range is still held);
    /// `None` where the model does not know (ring chunks, move sources
    /// and given-up destinations).
    name: Option<Option<&'static str>>,
}

/// An application's buffer or image (a fake device resource).
#[derive(Clone, Copy, Debug)]
pub(super) struct Resource {
    handle: u64,
    image: bool,
}

impl Resource {
    fn target(self) -> DedicatedTarget {
        use ash::vk::Handle;
        if self.image {
            DedicatedTarget::Image(vk::Image::from_raw(self.handle))
        } else {
            DedicatedTarget::Buffer(vk::Buffer::from_raw(self.handle))
        }
    }
}

struct Live {
    allocation: Allocation,
    requirements: vk::MemoryRequirements,
    kind: ResourceKind,
    pool: Option<Pool>,
    /// The byte written at both ends, once one was.
    tag: Option<u8>,
    /// The application's resource for it, if one was made.
    resource: Option<Resource>,
    /// Dedicated memory made for that resource
    /// (`VkMemoryDedicatedAllocateInfo`): nothing else may alias it.
    targeted: bool,
    /// The name it was last given (its request's or `set_name`'s), which
    /// `Allocator::name` must say.
    name: Option<&'static str>,
}

impl Held {
    fn of(a: &Allocation, pool: Option<Pool>, kind: ResourceKind) -> Self {
        Self {
            memory: a.memory(),
            offset: a.offset(),
            size: a.size(),
            memory_type: a.memory_type(),
            dedicated: a.is_dedicated(),
            pool,
            kind,
            resources: 0,
            queued: 1,
            name: None,
        }
    }
}

impl Live {
    fn held(&self) -> Held {
        Held {
            resources: usize::from(self.resource.is_some()),
            name: Some(self.name),
            ..Held::of(&self.allocation, self.pool, self.kind)
        }
    }
}

#[derive(Clone, Copy, Debug)]
enum Signal {
    Fence(vk::Fence),
    Timeline(u64),
}

struct Frame {
    signal: Signal,
    signalled: bool,
    freed: Vec<Held>,
}

struct LivePool {
    pool: Pool,
    memory_type: u32,
    min_blocks: u32,
    export: vk::ExternalMemoryHandleTypeFlags,
    priority: Option<f32>,
    /// `PoolDesc::min_alignment`: its allocations' offsets are multiples.
    min_alignment: u64,
    /// `PoolDesc::block_size` (0: growing blocks).
    block_size: u64,
    /// `PoolDesc::max_blocks`.
    max_blocks: Option<u32>,
}

/// A fault the walk injected into the fake device: the call it fails
/// (as `FakeDevice::fail_allocation` and `fail_map` count them).
#[derive(Clone, Copy, Debug)]
enum Injected {
    Allocate { at: u64, error: DeviceError },
    Map { at: u64 },
}

/// The memory objects a memory callback was told of, with their sizes;
/// `None` after an event that does not fit.
type Events = Arc<Mutex<Option<HashMap<vk::DeviceMemory, u64>>>>;

pub struct Walk {
    allocator: FakeAllocator,
    device: FakeDevice,
    layout: FakeLayout,
    config: Config,
    live: Vec<Live>,
    current: Vec<Held>,
    sealed: VecDeque<Frame>,
    next_frame: u64,
    timeline: vk::Semaphore,
    timeline_value: u64,
    pools: Vec<LivePool>,
    dead_pools: Vec<Pool>,
    lost: bool,
    rings: Vec<RingModel>,
    dead_rings: Vec<UploadRing>,
    /// Some ring allocations of frames collected or rings destroyed.
    stale_ring: Vec<RingAllocation>,
    /// What the memory callback was told; `None` when no callback is
    /// installed.
    events: Option<Events>,
    /// Another allocator, whose handles this one must refuse; made at the
    /// first `Op::Foreign`.
    foreign: Option<foreign::ForeignSide>,
    /// The byte written after free (`Walk::write_after_free`) that the
    /// debug fills have not counted yet: its memory and its offset there.
    written_after_free: Option<(vk::DeviceMemory, u64)>,
    /// The writes after free and margin overruns counted so far: what
    /// `corruptions_detected` must say.
    counted: u64,
    /// The custom pool whose block holds `written_after_free`, if one
    /// does: `check_pool_corruption` of that pool reports it, no other.
    written_after_free_pool: Option<Pool>,
    /// The faults injected so far, which alone explain
    /// `OutOfHostMemory`, `MapFailed` and (below the device's limit)
    /// `TooManyObjects`.
    injected: Vec<Injected>,
    /// Per heap, the budget and the usage by others the fake device
    /// reports (`FakeDevice::set_heap_budget`; at first 80 % of the heap
    /// and none).
    device_budgets: Vec<(u64, u64)>,
    /// The device's count of budget queries when the walk last changed
    /// `device_budgets`: until a later query, the allocator's estimate may
    /// hold the figures before (`Walk::budget_seen`).
    budget_changed_at: Option<u64>,
    /// A budget near the usage that `Op::Budget` put off to the start of
    /// the next operation, after the checks of its own have read the
    /// figures: a budget that moves between the allocator's readings.
    pending_budget: Option<NearUsage>,
}

/// A heap's budget set near its usage (`Op::Budget` with `heap` bits 6
/// and 7 of 1; [`Walk::budget_near_usage`]).
#[derive(Clone, Copy, Debug)]
pub struct NearUsage {
    pub heap: u32,
    pub how: u16,
    pub count: u16,
}

/// A default pool's preferred block size in a heap of `size` bytes (as
/// `block_size.rs` figures it, the heap as `Config::heap_size_limits`
/// limits it) and the smallest block of its ladder (1/64 of it).
pub fn ladder(size: u64, config: &Config, max_allocation: u64) -> (u64, u64) {
    let preferred = if size <= config.small_heap_limit {
        (size / 8).next_multiple_of(32)
    } else {
        config.large_heap_block_size
    };
    let preferred = preferred.min(max_allocation).min(size).max(1);
    (preferred, preferred >> 6)
}

fn is_non_coherent(props: Props) -> bool {
    props.contains(Props::HOST_VISIBLE) && !props.contains(Props::HOST_COHERENT)
}

impl Walk {
    pub fn new(
        mut allocator: FakeAllocator,
        device: FakeDevice,
        layout: FakeLayout,
        config: Config,
        callback: bool,
    ) -> Self {
        let timeline = device.create_timeline_semaphore();
        let events = callback.then(|| Arc::new(Mutex::new(Some(HashMap::new()))));
        let device_budgets = (device.layout().memory_heaps.iter())
            .map(|h| (h.size / 10 * 8, 0))
            .collect();
        if let Some(events) = &events {
            allocator.set_memory_callback(api::tally_events(Arc::clone(events)));
        }
        Self {
            allocator,
            device,
            layout,
            config,
            live: Vec::new(),
            current: Vec::new(),
            sealed: VecDeque::new(),
            next_frame: 0,
            timeline,
            timeline_value: 0,
            pools: Vec::new(),
            dead_pools: Vec::new(),
            lost: false,
            rings: Vec::new(),
            dead_rings: Vec::new(),
            stale_ring: Vec::new(),
            events,
            foreign: None,
            written_after_free: None,
            counted: 0,
            written_after_free_pool: None,
            injected: Vec::new(),
            device_budgets,
            budget_changed_at: None,
            pending_budget: None,
        }
    }

    fn held(&self) -> impl Iterator<Item = Held> + '_ {
        self.live
            .iter()
            .map(Live::held)
            .chain(self.current.iter().copied())
            .chain(self.sealed.iter().flat_map(|f| f.freed.iter().copied()))
            .chain(self.ring_chunks())
    }

    /// The `min_alignment` of live pool `pool` (0 for none or no pool).
    fn pool_min_alignment(&self, pool: Option<Pool>) -> u64 {
        self.pools
            .iter()
            .find(|p| Some(p.pool) == pool)
            .map_or(0, |p| p.min_alignment)
    }

    /// The memory types the allocator may use at all.
    fn usable_types(&self) -> u32 {
        crate::layout_model::usable_types(&self.layout)
    }

    /// The protected memory types, which only a custom pool of one uses.
    fn protected_types(&self) -> u32 {
        crate::layout_model::protected_types(&self.layout)
    }

    fn index(&self, pick: u16) -> Option<usize> {
        (!self.live.is_empty()).then(|| pick as usize % self.live.len())
    }

    /// `probes` overlap nothing held, nor each other.
    fn check_disjoint(&self, probes: &[Held]) {
        let margin = self.config.debug_margin;
        let mut by_memory: HashMap<vk::DeviceMemory, Vec<(u64, u64)>> = HashMap::new();
        for h in self.held().chain(probes.iter().copied()) {
            // A ring chunk no ring allocation placed yet.
            if h.memory == vk::DeviceMemory::null() {
                continue;
            }
            let extra = if h.dedicated { 0 } else { margin };
            by_memory
                .entry(h.memory)
                .or_default()
                .push((h.offset, h.offset + h.size + extra));
        }
        let sizes: HashMap<vk::DeviceMemory, u64> = self
            .device
            .live_allocations()
            .iter()
            .map(|m| (m.memory, m.size))
            .collect();
        for (memory, ranges) in &mut by_memory {
            let size = *sizes
                .get(memory)
                .unwrap_or_else(|| panic!("{memory:?} is not live"));
            ranges.sort_unstable();
            for pair in ranges.windows(2) {
                assert!(pair[0].1 <= pair[1].0, "{memory:?}: {pair:?} overlap");
            }
            if let Some(last) = ranges.last() {
                assert!(last.1 <= size, "{memory:?}: {last:?} past its {size} bytes");
            }
        }
    }

    /// The checks after every operation.
    pub fn check(&mut self) {
        self.settle_writes_after_free();
        self.check_disjoint(&[]);
        let stats = self.allocator.stats();
        let types = self.layout.memory_types.len();
        let mut want = vec![(0u64, 0u64, 0u64, 0u64); types];
        for h in self.held() {
            let w = &mut want[h.memory_type as usize];
            if h.dedicated {
                (w.2, w.3) = (w.2 + 1, w.3 + h.size);
            } else {
                (w.0, w.1) = (w.0 + 1, w.1 + h.size);
            }
        }
        for (t, s) in stats.memory_types.iter().enumerate() {
            let got = (
                s.block_allocations,
                s.block_allocated_bytes,
                s.dedicated_allocations,
                s.dedicated_bytes,
            );
            assert_eq!(got, want[t], "stats of type {t}: {s:?}");
        }
        let live = self.device.live_allocations();
        assert_eq!(stats.memory_objects as usize, live.len(), "memory objects");
        self.check_stats_figures(&stats, &live);
        let blocks: u64 = stats
            .memory_types
            .iter()
            .map(|t| t.blocks + t.dedicated_allocations)
            .sum();
        assert_eq!(blocks, live.len() as u64, "blocks and dedicated memory");
        let violations = self.device.violations();
        assert!(violations.is_empty(), "{violations:#?}");
        self.check_rings();
        self.check_granularity();
        self.check_api(&stats);
        self.check_names();
    }

    /// Checks the memory map of what the walk left (`Op::Inspect` is
    /// one operation of many: in 30 minutes' corpus, 1,043 inputs, none
    /// reached its memory map), frees everything, collects every frame
    /// and checks that only the kept empty blocks remain, with their map;
    /// then that nothing leaks.
    pub fn finish(mut self) {
        self.check_memory_map();
        for ring in std::mem::take(&mut self.rings) {
            assert_eq!(self.allocator.destroy_upload_ring(ring.ring), Ok(()));
            self.current.extend(ring.chunks.iter().map(|c| c.held));
        }
        for live in std::mem::take(&mut self.live) {
            // SAFETY: the fake device runs no GPU work.
            assert_eq!(unsafe { self.allocator.free(live.allocation) }, Ok(()));
            if let Some(resource) = live.resource {
                self.device.destroy_resource(resource.handle);
            }
        }
        if self.lost {
            self.collect_idle();
        } else {
            self.end_frame(false);
            (0..self.sealed.len()).for_each(|i| self.signal_frame(i));
            self.collect(false);
        }
        assert!(self.sealed.is_empty() && self.current.is_empty());
        self.check();
        self.check_memory_map();
        let stats = self.allocator.stats();
        let pooled = |t: usize| -> u64 {
            self.pools
                .iter()
                .filter(|p| p.memory_type as usize == t)
                .map(|p| u64::from(p.min_blocks.max(1)))
                .sum()
        };
        for (t, s) in stats.memory_types.iter().enumerate() {
            assert_eq!(s.dedicated_allocations, 0);
            assert_eq!(s.blocks, s.empty_blocks, "type {t}: {s:?}");
            assert!(s.blocks <= 1 + pooled(t), "type {t} keeps {s:?}");
        }
        for p in &self.pools {
            let s = self.allocator.pool_stats(&p.pool).unwrap();
            assert!(
                s.blocks <= u64::from(p.min_blocks.max(1)),
                "pool keeps {s:?}"
            );
        }
        self.allocator.trim();
        let stats = self.allocator.stats();
        for (t, s) in stats.memory_types.iter().enumerate() {
            let min: u64 = self
                .pools
                .iter()
                .filter(|p| p.memory_type as usize == t)
                .map(|p| u64::from(p.min_blocks))
                .sum();
            assert_eq!(s.blocks, min, "type {t} after trim: {s:?}");
        }
        for p in std::mem::take(&mut self.pools) {
            assert_eq!(self.allocator.destroy_pool(p.pool), Ok(()));
        }
        assert!(
            self.device.live_allocations().is_empty(),
            "memory left after trim"
        );
        // Every block is released now: a write after free not counted yet
        // went unseen.
        self.settle_writes_after_free();
        assert_eq!(
            self.written_after_free, None,
            "a write after free never counted"
        );
        let Self {
            allocator, device, ..
        } = self;
        drop(allocator);
        device.assert_clean();
    }
}
