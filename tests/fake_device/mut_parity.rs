//! The `&mut self` twins ([`allocate_mut`](vk_suballoc::Allocator::allocate_mut),
//! [`free_mut`](vk_suballoc::Allocator::free_mut),
//! [`ring_allocate_mut`](vk_suballoc::Allocator::ring_allocate_mut)) do
//! what their `&self` methods do, with no lock: two allocators over two
//! identical fake devices take the same seeded walk, one through the
//! `&self` methods and one through the twins (every other call the same
//! on both), and after every step their results, `stats()`, memory maps,
//! pools' figures, corruption counts, devices (calls and memory objects),
//! memory events and logged lines (debug ones too, in order) must match.
//! The walk draws a layout with small heaps (so that requests run short
//! of memory and release kept empty blocks), a configuration (runs,
//! margins with corruption detection, debug fills, kept blocks), and
//! steps: requests of every kind, flawed ones among them, for custom
//! pools too; frees now and after frames; trims; upload rings; injected
//! allocation and map failures, capped heaps and budgets; margins damaged
//! and freed memory written; memory callbacks and loggers that panic; the
//! device lost. [`api_walk`](super::api_walk) mixes the twins with the
//! `&self` methods against a model, which does not see a difference in
//! what the model does not count (which kept blocks a free releases, the
//! lines it logs); this compares them.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use ash::vk;
use vk_suballoc::device::fake::{FakeDevice, FakeLayout};
use vk_suballoc::device::{DedicatedHint, DedicatedTarget, DeviceError};
use vk_suballoc::{
    Allocation, AllocationDesc, Config, DedicatedPolicy, Pool, PoolDesc, Request, ResourceKind,
    UploadRing, UploadRingDesc, Usage,
};

use super::leak_log::{
    disarm_panic_on_line, panic_on_line_with, record_thread_lines, take_thread_lines,
};
use super::seeded_rng::Rng;
use super::FakeAllocator;

const MIB: u64 = 1 << 20;
const USAGES: [Usage; 6] = [
    Usage::DEVICE_LOCAL,
    Usage::UPLOAD,
    Usage::UPLOAD.union(Usage::DEVICE_LOCAL),
    Usage::READBACK,
    Usage::TRANSIENT,
    Usage::DEVICE_ADDRESS,
];
const KINDS: [ResourceKind; 4] = [
    ResourceKind::Buffer,
    ResourceKind::LinearImage,
    ResourceKind::OptimalImage,
    ResourceKind::Unknown,
];
/// Texts a logger is made to panic on (once, on the next line with it).
const PANIC_TEXTS: [&str; 5] = [
    "margin",
    "after it was freed",
    "debug fill",
    "vk-suballoc",
    "memory type",
];

/// One step of the walk, drawn once and taken by both sides.
#[derive(Clone, Debug)]
enum Step {
    Allocate {
        size: u64,
        alignment: u64,
        bits: u32,
        usage: Usage,
        kind: ResourceKind,
        dedicated: DedicatedPolicy,
        named: bool,
        within_budget: bool,
        existing_only: bool,
        min_alignment: Option<u64>,
        pool: Option<usize>,
        /// The driver's dedicated hint: 0 none, 1 preferred, 2 required.
        hint: u8,
        /// The dedicated target: 0 none, 1 the side's buffer, 2 its image.
        target: u8,
        priority: Option<f32>,
    },
    Free(usize),
    FreeAfterFrame(usize),
    EndFrame {
        signal: bool,
    },
    Trim,
    CreatePool {
        memory_type: u32,
        block_size: u64,
        min_blocks: u32,
        max_blocks: u32,
    },
    DestroyPool(usize),
    CreateRing {
        size: u64,
        usage: Usage,
        grow: bool,
    },
    RingAllocate {
        ring: usize,
        size: u64,
        align: u64,
    },
    DestroyRing(usize),
    FailAllocation {
        nth: u64,
        error: DeviceError,
    },
    FailMap(u64),
    CapHeap {
        heap: u32,
        bytes: u64,
    },
    Budget {
        heap: u32,
        budget: u64,
        external: u64,
    },
    DamageMargin(usize),
    WriteAfterFree(usize),
    CallbackPanics(u64),
    LoggerPanics(&'static str),
    CheckCorruption,
    LoseDevice,
}

/// One of the two allocators and what the walk holds of it.
struct Side {
    allocator: FakeAllocator,
    device: FakeDevice,
    /// Through the `&mut self` twins.
    exclusive: bool,
    live: Vec<Allocation>,
    pools: Vec<Pool>,
    rings: Vec<UploadRing>,
    /// Where freed allocations lay: (memory, offset, size).
    freed: Vec<(vk::DeviceMemory, u64, u64)>,
    /// The memory events so far, normalised.
    events: Arc<Mutex<Vec<String>>>,
    /// The number of the event the callback panics on (0: none).
    panic_at: Arc<AtomicU64>,
    /// A fake buffer and image, dedicated targets of some requests.
    targets: [u64; 2],
}

impl Side {
    fn new(layout: &FakeLayout, config: &Config, exclusive: bool) -> Self {
        let device = FakeDevice::new(layout.clone());
        let mut allocator = FakeAllocator::new(device.clone(), *config).unwrap();
        let events = Arc::new(Mutex::new(Vec::new()));
        let panic_at = Arc::new(AtomicU64::new(0));
        let (seen, at) = (Arc::clone(&events), Arc::clone(&panic_at));
        allocator.set_memory_callback(move |event| {
            let mut seen = seen.lock().unwrap_or_else(|e| e.into_inner());
            seen.push(format!(
                "{:?} {} type {} heap {} size {} {:?}",
                event.kind,
                low(event.memory),
                event.memory_type,
                event.heap,
                event.size,
                event.name.map(normalise)
            ));
            let count = seen.len() as u64;
            drop(seen);
            if at.load(Ordering::Relaxed) == count {
                at.store(0, Ordering::Relaxed);
                panic!("the memory callback panics on event {count}");
            }
        });
        let targets = [device.create_resource(), device.create_resource()];
        Self {
            allocator,
            device,
            exclusive,
            live: Vec::new(),
            pools: Vec::new(),
            rings: Vec::new(),
            freed: Vec::new(),
            events,
            panic_at,
            targets,
        }
    }

    /// Takes `step`; returns what it gave, normalised.
    fn take(&mut self, step: &Step) -> String {
        match *step {
            Step::Allocate {
                size,
                alignment,
                bits,
                usage,
                kind,
                dedicated,
                named,
                within_budget,
                existing_only,
                min_alignment,
                pool,
                hint,
                target,
                priority,
            } => {
                let mut desc = AllocationDesc::new(usage).dedicated(dedicated);
                if named {
                    desc = desc.name("parity");
                }
                if within_budget {
                    desc = desc.within_budget();
                }
                if existing_only {
                    desc = desc.existing_memory_only();
                }
                if let Some(alignment) = min_alignment {
                    desc = desc.min_alignment(alignment);
                }
                if let Some(&pool) = pool.and_then(|i| self.pools.get(i % self.pools.len().max(1)))
                {
                    desc = desc.pool(pool);
                }
                let requirements = vk::MemoryRequirements {
                    size,
                    alignment,
                    memory_type_bits: bits,
                };
                if let Some(priority) = priority {
                    desc = desc.priority(priority);
                }
                let mut request =
                    Request::with_desc(requirements, kind, desc).driver_dedicated(DedicatedHint {
                        required: hint == 2,
                        preferred: hint != 0,
                    });
                if target != 0 {
                    let handle = self.targets[usize::from(target - 1)];
                    let target = if target == 1 {
                        DedicatedTarget::Buffer(vk::Handle::from_raw(handle))
                    } else {
                        DedicatedTarget::Image(vk::Handle::from_raw(handle))
                    };
                    // SAFETY: a live resource of the side's fake device,
                    // destroyed only after the allocator (`finish`), and
                    // never bound.
                    request = unsafe { request.dedicated_target(target) };
                }
                let result = if self.exclusive {
                    self.allocator.allocate_mut(&request)
                } else {
                    self.allocator.allocate(&request)
                };
                match result {
                    Ok(allocation) => {
                        let shown = show(&allocation);
                        self.live.push(allocation);
                        shown
                    }
                    Err(error) => normalise(&format!("{error:?}")),
                }
            }
            Step::Free(index) => {
                let Some(allocation) = self.remove_live(index) else {
                    return "no live allocation".into();
                };
                let place = (allocation.memory(), allocation.offset(), allocation.size());
                // SAFETY: the fake device runs no GPU work.
                let result = unsafe {
                    if self.exclusive {
                        self.allocator.free_mut(allocation)
                    } else {
                        self.allocator.free(allocation)
                    }
                };
                self.freed.push(place);
                format!("{result:?}")
            }
            Step::FreeAfterFrame(index) => match self.remove_live(index) {
                Some(allocation) => format!("{:?}", self.allocator.free_after_frame(allocation)),
                None => "no live allocation".into(),
            },
            Step::EndFrame { signal } => {
                let fence = self.device.create_fence();
                // SAFETY: the fence is the fake device's, signalled below or never.
                let ended = unsafe { self.allocator.end_frame(fence) };
                if signal {
                    self.device.signal_fence(fence);
                }
                let collected = self.allocator.collect();
                normalise(&format!("{ended:?} {collected:?}"))
            }
            Step::Trim => format!("{}", self.allocator.trim()),
            Step::CreatePool {
                memory_type,
                block_size,
                min_blocks,
                max_blocks,
            } => {
                let mut desc = PoolDesc::new(memory_type)
                    .min_blocks(min_blocks)
                    .max_blocks(max_blocks);
                if block_size != 0 {
                    desc = desc.block_size(block_size);
                }
                match self.allocator.create_pool(&desc) {
                    Ok(pool) => {
                        self.pools.push(pool);
                        "pool made".into()
                    }
                    Err(error) => normalise(&format!("{error:?}")),
                }
            }
            Step::DestroyPool(index) => {
                if self.pools.is_empty() {
                    return "no pool".into();
                }
                let pool = self.pools[index % self.pools.len()];
                let result = self.allocator.destroy_pool(pool);
                if result.is_ok() {
                    self.pools.retain(|p| *p != pool);
                }
                format!("{result:?}")
            }
            Step::CreateRing { size, usage, grow } => {
                let desc = UploadRingDesc {
                    size,
                    usage,
                    grow,
                    ..UploadRingDesc::default()
                };
                match self.allocator.create_upload_ring(&desc) {
                    Ok(ring) => {
                        self.rings.push(ring);
                        "ring made".into()
                    }
                    Err(error) => normalise(&format!("{error:?}")),
                }
            }
            Step::RingAllocate { ring, size, align } => {
                if self.rings.is_empty() {
                    return "no ring".into();
                }
                let ring = self.rings[ring % self.rings.len()];
                let result = if self.exclusive {
                    self.allocator.ring_allocate_mut(ring, size, align)
                } else {
                    self.allocator.ring_allocate(ring, size, align)
                };
                match result {
                    Ok(a) => format!(
                        "ring allocation: chunk memory {} at {} (buffer offset {}), {} bytes, frame {}",
                        low(a.memory()),
                        a.memory_offset(),
                        a.buffer_offset(),
                        a.size(),
                        a.frame()
                    ),
                    Err(error) => normalise(&format!("{error:?}")),
                }
            }
            Step::DestroyRing(index) => {
                if self.rings.is_empty() {
                    return "no ring".into();
                }
                let ring = self.rings.remove(index % self.rings.len());
                format!("{:?}", self.allocator.destroy_upload_ring(ring))
            }
            Step::FailAllocation { nth, error } => {
                self.device.fail_allocation(nth, error);
                String::new()
            }
            Step::FailMap(nth) => {
                self.device.fail_map(nth);
                String::new()
            }
            Step::CapHeap { heap, bytes } => {
                self.device.cap_heap(heap, bytes);
                String::new()
            }
            Step::Budget {
                heap,
                budget,
                external,
            } => {
                self.device.set_heap_budget(heap, budget, external);
                String::new()
            }
            Step::DamageMargin(index) => {
                let Some(a) = self.live.get(index % self.live.len().max(1)) else {
                    return "no live allocation".into();
                };
                if let Some(ptr) = a.mapped_ptr().filter(|_| !a.is_dedicated()) {
                    // SAFETY: the byte past the allocation lies in its
                    // block (a margin, or the next allocation's bytes),
                    // mapped whole; no slice of it is alive. The host's
                    // write, which the margin check reads (non-coherent
                    // memory too).
                    unsafe { ptr.as_ptr().add(a.size() as usize).write(0x42) };
                    return "written by the host".into();
                }
                // SAFETY: no slice of the memory is alive across the call.
                let written = unsafe {
                    self.device
                        .write(a.memory(), a.offset() + a.size(), &[0x42])
                };
                format!("{written}")
            }
            Step::WriteAfterFree(index) => {
                let Some(&(memory, offset, size)) = self.freed.get(index % self.freed.len().max(1))
                else {
                    return "nothing freed".into();
                };
                // SAFETY: as above.
                let written = unsafe { self.device.write(memory, offset + size / 2, &[0x24]) };
                format!("{written}")
            }
            Step::CallbackPanics(after) => {
                let seen = self.events.lock().unwrap().len() as u64;
                self.panic_at.store(seen + after, Ordering::Relaxed);
                String::new()
            }
            Step::LoggerPanics(_) => String::new(),
            Step::CheckCorruption => {
                normalise(&format!("{:?}", self.allocator.check_corruption(!0)))
            }
            Step::LoseDevice => {
                self.device.lose_device();
                String::new()
            }
        }
    }

    /// Drops the allocator and its dedicated targets, and checks the
    /// device: nothing left, no rule broken.
    fn finish(self) {
        drop(self.allocator);
        for target in self.targets {
            self.device.destroy_resource(target);
        }
        self.device.assert_clean();
    }

    fn remove_live(&mut self, index: usize) -> Option<Allocation> {
        if self.live.is_empty() {
            return None;
        }
        let index = index % self.live.len();
        Some(self.live.swap_remove(index))
    }

    /// Everything the walk compares after a step, normalised.
    fn snapshot(&self) -> Vec<String> {
        let mut pools: Vec<String> = self
            .pools
            .iter()
            .map(|pool| format!("{:?}", self.allocator.pool_stats(pool)))
            .collect();
        pools.sort();
        let mut objects: Vec<String> = self
            .device
            .live_allocations()
            .iter()
            .map(|m| {
                format!(
                    "{} {} type {} {:?} {:?} mapped {}",
                    low(m.memory),
                    m.size,
                    m.memory_type,
                    m.dedicated.is_some(),
                    m.name.as_deref().map(normalise),
                    m.mapped
                )
            })
            .collect();
        objects.sort();
        vec![
            format!("stats {:?}", self.allocator.stats()),
            normalise(&format!("map {:?}", self.allocator.memory_map())),
            format!("pools {pools:?}"),
            format!("corruptions {}", self.allocator.corruptions_detected()),
            format!("device {:?}", self.device.counters()),
            format!("objects {objects:?}"),
            format!("events {:?}", self.events.lock().unwrap()),
            format!("frame {}", self.allocator.current_frame()),
        ]
    }
}

/// A memory handle without its device's range (each fake device hands out
/// handles from a range of its own).
fn low(memory: vk::DeviceMemory) -> u64 {
    use ash::vk::Handle;
    memory.as_raw() & 0xFFFF_FFFF
}

/// `text` with every hexadecimal number (`0x...`) cut to its low 32 bits,
/// as [`low`].
fn normalise(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find("0x") {
        out.push_str(&rest[..at]);
        let digits = rest[at + 2..]
            .find(|c: char| !c.is_ascii_hexdigit())
            .unwrap_or(rest.len() - at - 2);
        let hex = &rest[at + 2..at + 2 + digits];
        match u128::from_str_radix(hex, 16) {
            Ok(value) if !hex.is_empty() => out.push_str(&format!("0x{:x}", value & 0xFFFF_FFFF)),
            _ => out.push_str(&rest[at..at + 2 + digits]),
        }
        rest = &rest[at + 2 + digits..];
    }
    out.push_str(rest);
    out
}

fn show(a: &Allocation) -> String {
    format!(
        "allocation: memory {} at {}, {} bytes, type {}, dedicated {}, pool {}, mapped {}",
        low(a.memory()),
        a.offset(),
        a.size(),
        a.memory_type(),
        a.is_dedicated(),
        a.is_in_custom_pool(),
        a.mapped_ptr().is_some()
    )
}

/// A step drawn from `rng`, for a device of `types` memory types and
/// `heaps` heaps.
fn draw(rng: &mut Rng, types: u32, heaps: u32) -> Step {
    let pick = |rng: &mut Rng, options: &[u64]| options[rng.below(options.len() as u64) as usize];
    match rng.below(100) {
        0..=44 => {
            let size = match rng.below(40) {
                0 => 0,
                1 => u64::MAX - rng.below(4096),
                2 => 1 << (40 + rng.below(20)),
                3..=15 => 1 + rng.below(16 << 10),
                16..=27 => 1 + rng.below(512 << 10),
                _ => 1 + rng.below(6 * MIB),
            };
            let alignment = match rng.below(40) {
                0 => 0,
                1 => 3 + 2 * rng.below(100),
                2 => 1 << 62,
                _ => 1 << rng.below(13),
            };
            let bits = match rng.below(20) {
                0 => 0,
                1..=5 => rng.next() as u32 & ((1 << types) - 1),
                _ => !0,
            };
            Step::Allocate {
                size,
                alignment,
                bits,
                usage: USAGES[rng.below(USAGES.len() as u64) as usize],
                kind: KINDS[rng.below(4) as usize],
                dedicated: match rng.below(8) {
                    0 => DedicatedPolicy::Always,
                    1 => DedicatedPolicy::Never,
                    _ => DedicatedPolicy::Auto,
                },
                named: rng.below(3) == 0,
                within_budget: rng.below(6) == 0,
                existing_only: rng.below(8) == 0,
                min_alignment: match rng.below(10) {
                    0 => Some(1 << rng.below(16)),
                    1 => Some(48),
                    _ => None,
                },
                pool: (rng.below(4) == 0).then(|| rng.below(8) as usize),
                hint: [0, 0, 0, 0, 1, 2][rng.below(6) as usize],
                target: [0, 0, 1, 2][rng.below(4) as usize],
                priority: [None, None, Some(0.0), Some(1.0), Some(-1.0)][rng.below(5) as usize],
            }
        }
        45..=65 => Step::Free(rng.next() as usize),
        66..=69 => Step::FreeAfterFrame(rng.next() as usize),
        70..=73 => Step::EndFrame {
            signal: rng.below(5) != 0,
        },
        74 => Step::Trim,
        75..=76 => Step::CreatePool {
            memory_type: rng.below(u64::from(types) + 1) as u32,
            block_size: pick(rng, &[0, 0, MIB, 2 * MIB, 3 * MIB + 4096]),
            min_blocks: rng.below(3) as u32,
            max_blocks: rng.below(5) as u32,
        },
        77 => Step::DestroyPool(rng.next() as usize),
        78 => Step::CreateRing {
            size: pick(rng, &[0, 64 << 10, 64 << 10, MIB, MIB]),
            usage: [
                Usage::UPLOAD,
                Usage::READBACK,
                Usage::UPLOAD | Usage::DEVICE_LOCAL,
            ][rng.below(3) as usize],
            grow: rng.below(2) == 0,
        },
        79..=83 => Step::RingAllocate {
            ring: rng.next() as usize,
            size: pick(rng, &[0, 1, 256, 4000, 40 << 10, 2 * MIB]),
            align: pick(rng, &[0, 1, 3, 16, 256, 4096]),
        },
        84 => Step::DestroyRing(rng.next() as usize),
        85..=86 => Step::FailAllocation {
            nth: 1 + rng.below(3),
            error: [
                DeviceError::OutOfDeviceMemory,
                DeviceError::OutOfHostMemory,
                DeviceError::TooManyObjects,
            ][rng.below(3) as usize],
        },
        87 => Step::FailMap(1 + rng.below(2)),
        88 => Step::CapHeap {
            heap: rng.below(u64::from(heaps)) as u32,
            bytes: rng.below(40) * MIB,
        },
        89 => Step::Budget {
            heap: rng.below(u64::from(heaps)) as u32,
            budget: rng.below(48) * MIB,
            external: rng.below(8) * MIB,
        },
        90..=92 => Step::DamageMargin(rng.next() as usize),
        93..=94 => Step::WriteAfterFree(rng.next() as usize),
        95 => Step::CallbackPanics(1 + rng.below(3)),
        96..=97 => Step::LoggerPanics(PANIC_TEXTS[rng.below(PANIC_TEXTS.len() as u64) as usize]),
        98 => Step::CheckCorruption,
        _ if rng.below(4) == 0 => Step::LoseDevice,
        _ => Step::Trim,
    }
}

/// A layout with small heaps, drawn from `rng`.
fn draw_layout(rng: &mut Rng) -> FakeLayout {
    let layout = match rng.below(9) {
        0 => FakeLayout::discrete(),
        1 => FakeLayout::integrated(),
        2 => FakeLayout::mobile(),
        3 => FakeLayout::rebar(),
        4 => FakeLayout::amd(),
        5 => FakeLayout::lavapipe(),
        6 => FakeLayout::intel_arc(),
        7 => FakeLayout::apple(),
        _ => FakeLayout::mali(),
    };
    let mut layout = layout.with_heap_sizes((16 + 16 * rng.below(4)) * MIB);
    if rng.below(3) == 0 {
        layout = layout.with_max_allocation_count(4 + rng.below(12) as u32);
    }
    layout.with_memory_budget(rng.below(2) == 0)
}

fn draw_config(rng: &mut Rng) -> Config {
    let detect = rng.below(2) == 0;
    Config {
        small_buffer_limit: if rng.below(3) == 0 { 0 } else { 16 << 10 },
        debug_margin: if detect { 16 << rng.below(3) } else { 0 },
        detect_corruption: detect,
        debug_fill: rng.below(2) == 0,
        empty_block_reserve: [0.0, 1.0, 4.0][rng.below(3) as usize],
        empty_block_frames: [1, 3, 120][rng.below(3) as usize],
        ..Config::default()
    }
}

/// One walk of `steps` steps from `seed`.
fn walk(seed: u64, steps: usize) {
    let mut rng = Rng(seed);
    let layout = draw_layout(&mut rng);
    let config = draw_config(&mut rng);
    let (types, heaps) = (
        layout.memory_types.len() as u32,
        layout.memory_heaps.len() as u32,
    );
    let context = format!("seed {seed}, layout {}, {config:?}", layout.name);
    let mut locked = Side::new(&layout, &config, false);
    let mut exclusive = Side::new(&layout, &config, true);
    record_thread_lines();
    let mut armed: Option<&'static str> = None;
    let mut history = Vec::new();
    for step_index in 0..steps {
        let step = draw(&mut rng, types, heaps);
        history.push(format!("{step:?}"));
        if let Step::LoggerPanics(text) = step {
            armed = Some(text);
        }
        let mut outcomes = Vec::new();
        for side in [&mut locked, &mut exclusive] {
            if let Some(text) = armed {
                panic_on_line_with(text);
            }
            let outcome =
                catch_unwind(AssertUnwindSafe(|| side.take(&step))).unwrap_or_else(|payload| {
                    let message = payload
                        .downcast_ref::<String>()
                        .cloned()
                        .or_else(|| payload.downcast_ref::<&str>().map(|s| (*s).to_string()))
                        .unwrap_or_default();
                    format!("panicked: {message}")
                });
            let fired = outcome.contains("the test's logger panics");
            disarm_panic_on_line();
            let lines: Vec<String> = take_thread_lines().iter().map(|l| normalise(l)).collect();
            outcomes.push((outcome, fired, lines, side.snapshot()));
        }
        let (a, b) = (&outcomes[0], &outcomes[1]);
        let where_ = || {
            let recent = history.len().saturating_sub(12);
            format!(
                "{context}: step {step_index} {step:?}, after\n{}",
                history[recent..].join("\n")
            )
        };
        assert_eq!(
            a.0,
            b.0,
            "the outcomes differ (&self, &mut self); {}",
            where_()
        );
        assert_eq!(
            a.2,
            b.2,
            "the lines logged differ (&self, &mut self); {}",
            where_()
        );
        for (x, y) in a.3.iter().zip(&b.3) {
            assert_eq!(x, y, "the state differs (&self, &mut self); {}", where_());
        }
        if a.1 || b.1 {
            armed = None;
        }
    }
    take_thread_lines();
    // Both drop with the same leaks, lines and device calls.
    let drop_side = |side: Side| {
        let device = side.device.clone();
        let events = Arc::clone(&side.events);
        side.panic_at.store(0, Ordering::Relaxed);
        drop(side.allocator);
        for target in side.targets {
            device.destroy_resource(target);
        }
        let lines: Vec<String> = take_thread_lines().iter().map(|l| normalise(l)).collect();
        let events = events.lock().unwrap().clone();
        (
            lines,
            device.counters(),
            events,
            device.live_allocations().len(),
        )
    };
    let (a, b) = (drop_side(locked), drop_side(exclusive));
    assert_eq!(a, b, "{context}: the drops differ");
    assert_eq!(a.3, 0, "{context}: memory left after the drop");
}

/// The `&self` methods and their `&mut self` twins, side by side over
/// seeded walks (`VK_SUBALLOC_SEED` replays one).
#[test]
fn mut_twins_match_the_locked_methods() {
    let seed = Rng::seed("mut_twins_match_the_locked_methods");
    let mut seeds = Rng(seed);
    for _ in 0..8 {
        let walk_seed = seeds.next();
        walk(walk_seed, 220);
    }
}

/// A free that empties a block of a memory type with debug fills, and so
/// releases it and two kept empty blocks, both written after they were
/// freed, to a logger that panics on the first line of a write after free:
/// through `free` or `free_mut`, the call panics once the blocks are
/// released and both lines given to the logger. (`free_mut` logged each line at once,
/// in the middle of the release: the logger's panic stopped it after the
/// first block, and the second stayed, its line untold.)
#[test]
fn a_logger_panicking_in_a_free_that_releases_blocks_stops_neither_twin() {
    let scenario = |exclusive: bool| {
        let config = Config {
            debug_fill: true,
            small_buffer_limit: 0,
            ..Config::default()
        };
        let mut side = Side::new(
            &FakeLayout::discrete().with_heap_sizes(64 * MIB),
            &config,
            exclusive,
        );
        // Allocations of 256 KiB until a fourth block takes one: the first
        // three are full. That one goes at once (its block, the largest,
        // stays empty).
        let request =
            super::buffer(256 << 10, 256, Usage::UPLOAD).dedicated(DedicatedPolicy::Never);
        let mut blocks: Vec<vk::DeviceMemory> = Vec::new();
        while blocks.len() < 4 {
            let allocation = side.allocator.allocate(&request).unwrap();
            if !blocks.contains(&allocation.memory()) {
                blocks.push(allocation.memory());
            }
            side.live.push(allocation);
        }
        let fourth = side.live.pop().unwrap();
        super::free(&side.allocator, fourth);
        // The first two blocks empty (kept: the third holds their bytes
        // and more), each written after its allocations were freed.
        for &block in &blocks[..2] {
            while let Some(index) = side.live.iter().position(|a| a.memory() == block) {
                side.take(&Step::Free(index));
            }
            // SAFETY: no slice of the memory is alive.
            assert!(unsafe { side.device.write(block, 4096, &[0x24]) });
        }
        let before = side.device.counters().frees;
        record_thread_lines();
        panic_on_line_with("written after it was freed");
        let mut outcomes = Vec::new();
        while let Some(index) = side.live.iter().position(|a| a.memory() == blocks[2]) {
            outcomes.push(catch_unwind(AssertUnwindSafe(|| side.take(&Step::Free(index)))).is_ok());
        }
        disarm_panic_on_line();
        let lines: Vec<String> = take_thread_lines()
            .iter()
            .map(|l| normalise(l))
            .filter(|l| !l.starts_with("DEBUG"))
            .collect();
        let released = side.device.counters().frees - before;
        let stats = side.allocator.stats();
        side.finish();
        (outcomes, lines, released, stats)
    };
    let locked = scenario(false);
    let exclusive = scenario(true);
    assert_eq!(
        locked.0.iter().filter(|ok| !**ok).count(),
        1,
        "the last free panics: {locked:?}"
    );
    // The two written blocks, and the one just emptied; the largest stays.
    assert_eq!(locked.2, 3, "the blocks are released: {locked:?}");
    assert_eq!(locked.1.len(), 2, "both lines reach the logger: {locked:?}");
    assert_eq!(exclusive.0, locked.0, "free_mut: {exclusive:?}");
    assert_eq!(exclusive.2, locked.2, "free_mut releases: {exclusive:?}");
    assert_eq!(exclusive.1, locked.1, "free_mut's lines: {exclusive:?}");
    assert_eq!(exclusive.3, locked.3, "free_mut's stats");
}

/// A free of an allocation whose margin is damaged (corruption detection)
/// and whose block's emptying releases another empty block, to a memory
/// callback that panics on that release and a logger that panics on the
/// damaged margin's line: through `free` or `free_mut`, in a default pool
/// or a custom one, the callback's panic goes on (the logger's is dropped,
/// as `free` drops it once the pool's lock is released), the line reaches
/// the logger and the allocation is freed. (`free_mut` logged the line
/// at once, in the middle of the free: the logger's panic went on instead
/// of the callback's.)
#[test]
fn a_callback_panic_in_a_free_outranks_the_loggers_on_both_twins() {
    let scenario = |exclusive: bool, in_pool: bool| {
        let config = Config {
            detect_corruption: true,
            debug_margin: 64,
            small_buffer_limit: 0,
            ..Config::default()
        };
        let mut side = Side::new(&FakeLayout::discrete(), &config, exclusive);
        let mut desc = AllocationDesc::new(Usage::UPLOAD).dedicated(DedicatedPolicy::Never);
        let size = if in_pool {
            side.take(&Step::CreatePool {
                memory_type: 2,
                block_size: MIB,
                min_blocks: 0,
                max_blocks: 2,
            });
            desc = desc.pool(side.pools[0]);
            768 << 10
        } else {
            MIB
        };
        // Allocations until two blocks hold some.
        let request =
            Request::with_desc(super::requirements(size, 256), ResourceKind::Buffer, desc);
        let mut blocks: Vec<vk::DeviceMemory> = Vec::new();
        while blocks.len() < 2 {
            let allocation = side.allocator.allocate(&request).unwrap();
            assert_eq!(allocation.memory_type(), 2);
            if !blocks.contains(&allocation.memory()) {
                blocks.push(allocation.memory());
            }
            side.live.push(allocation);
        }
        // The first block empties (kept); the last allocation, alone in
        // the second, is damaged past its end.
        while let Some(index) = side.live.iter().position(|a| a.memory() == blocks[0]) {
            side.take(&Step::Free(index));
        }
        while side.live.len() > 1 {
            side.take(&Step::Free(0));
        }
        assert_eq!(side.take(&Step::DamageMargin(0)), "written by the host");
        side.take(&Step::CallbackPanics(1));
        record_thread_lines();
        panic_on_line_with("memory corruption");
        let outcome = catch_unwind(AssertUnwindSafe(|| side.take(&Step::Free(0))));
        disarm_panic_on_line();
        let lines: Vec<String> = take_thread_lines()
            .into_iter()
            .filter(|line| line.contains("memory corruption"))
            .collect();
        let message = outcome.err().and_then(|payload| {
            payload
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| payload.downcast_ref::<&str>().map(|s| (*s).to_string()))
        });
        let stats = side.allocator.stats();
        if in_pool {
            assert_eq!(side.allocator.destroy_pool(side.pools[0]), Ok(()));
        }
        let live = side.live.len();
        side.finish();
        (message, lines.len(), live, stats)
    };
    for in_pool in [false, true] {
        let locked = scenario(false, in_pool);
        assert_eq!(
            locked.0.as_deref(),
            Some("the memory callback panics on event 3"),
            "free, in a pool: {in_pool}"
        );
        assert_eq!(locked.1, 1, "free, in a pool: {in_pool}: the line");
        assert_eq!(locked.3.allocations(), 0, "free, in a pool: {in_pool}");
        assert_eq!(
            scenario(true, in_pool),
            locked,
            "free_mut, in a pool: {in_pool}"
        );
    }
}
