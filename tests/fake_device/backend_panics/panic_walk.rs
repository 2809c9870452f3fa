//! Panics anywhere: random calls (allocations, frees now and after a
//! frame, frames, pools, upload rings, defragmentation, trims, a replaced
//! memory callback, capped heaps) while the logger panics on its k-th line,
//! the memory callback on its k-th event and the fake backend in a chosen
//! call (flushes and budget queries through its hooks), each caught. After
//! every step the allocator's memory objects are the device's and the
//! callback's count, each heap's bytes in them the device's (as the stats
//! and, without `VK_EXT_memory_budget`, the budgets count them), and no
//! held allocations overlap. At the end (`panic_walk/ending.rs`) every
//! held allocation frees once, nothing is left allocated and the device is
//! clean; or the allocator is dropped holding them, a panic armed, each is
//! named as a leak and every memory object and resource goes (TESTING.md,
//! "Failing a chosen device call"). `PANIC_WALK_RUNS=n` runs n walks
//! (default 20); the seed is printed, `VK_SUBALLOC_SEED` replays it.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;

use ash::vk::{self, Handle};
use vk_suballoc::device::fake::{FakeCall, FakeDevice, FakeLayout};
use vk_suballoc::device::DeviceError;
use vk_suballoc::{
    Allocation, AllocationDesc, Config, DedicatedPolicy, DefragmentationLimits, MemoryEvent,
    MemoryEventKind, Movable, Pool, PoolDesc, Request, ResourceKind, UploadRing, UploadRingDesc,
    Usage,
};

use crate::leak_log::on_line_with;
use crate::seeded_rng::Rng;
use crate::{allocator_with, panic_message, requirements, FakeAllocator};

#[path = "panic_walk/ending.rs"]
mod ending;

/// The backend calls the walk makes panic; not the destroys, whose fake
/// panic leaves the resource (`backend_panics.rs` frees its memory).
const CALLS: [FakeCall; 7] = [
    FakeCall::CreateBuffer,
    FakeCall::Map,
    FakeCall::Unmap,
    FakeCall::SignalQuery,
    FakeCall::BindBuffer,
    FakeCall::Invalidate,
    FakeCall::Free,
];

/// Makes this thread's logger panic on the `k`-th line from now that the
/// allocator logs, of any level.
fn arm_logger(k: u64) {
    on_line_with("vk-suballoc", move || {
        if k > 1 {
            arm_logger(k - 1);
        } else {
            panic!("the walk's logger panics");
        }
    });
}

/// Disarms [`arm_logger`].
fn disarm_logger() {
    on_line_with("a line the allocator never logs", || {});
}

/// A memory callback that counts memory objects made less those freed in
/// `balance`, and panics on the event that takes `countdown` from 1 to 0.
fn counting_callback(
    balance: &Arc<AtomicI64>,
    countdown: &Arc<AtomicI64>,
) -> impl Fn(&MemoryEvent<'_>) + Send + Sync + 'static {
    let (balance, countdown) = (Arc::clone(balance), Arc::clone(countdown));
    move |event| {
        let change = match event.kind {
            MemoryEventKind::Allocated => 1,
            MemoryEventKind::Freed => -1,
        };
        balance.fetch_add(change, Ordering::SeqCst);
        let armed = |left: i64| (left > 0).then_some(left - 1);
        if countdown.fetch_update(Ordering::SeqCst, Ordering::SeqCst, armed) == Ok(1) {
            panic!("the walk's memory callback panics");
        }
    }
}

/// An allocation the walk holds, with the requirements a move of it asks.
struct Held {
    allocation: Allocation,
    requirements: vk::MemoryRequirements,
}

struct Walk {
    rng: Rng,
    allocator: FakeAllocator,
    device: FakeDevice,
    context: String,
    balance: Arc<AtomicI64>,
    countdown: Arc<AtomicI64>,
    hooks: [Arc<AtomicI64>; 2],
    held: Vec<Held>,
    pools: Vec<Pool>,
    rings: Vec<UploadRing>,
    /// Fences of frames ended and not signalled yet, oldest first.
    fences: Vec<vk::Fence>,
    history: Vec<String>,
}

impl Walk {
    fn new(seed: u64) -> Self {
        let mut rng = Rng(seed);
        let layout = match rng.below(6) {
            0 => FakeLayout::discrete(),
            1 => FakeLayout::integrated(),
            2 => FakeLayout::mobile(),
            3 => FakeLayout::mali(),
            4 => FakeLayout::amd(),
            _ => FakeLayout::lavapipe(),
        };
        let layout = match rng.below(2) {
            0 => layout.with_heap_sizes(16 << (20 + rng.below(4))),
            _ => layout,
        };
        let layout = layout.with_memory_budget(rng.below(2) == 0);
        let mut config = Config {
            large_heap_block_size: 4 << 20,
            ..Config::default()
        };
        match rng.below(5) {
            0 => config.debug_fill = true,
            1 => {
                config.detect_corruption = true;
                config.debug_margin = 16;
            }
            2 => config.log_allocations = true,
            3 => config.allocation_backtraces = true,
            _ => {}
        }
        if rng.below(3) == 0 {
            config.empty_block_frames = 1;
        }
        let context = format!("seed {seed}, layout {}, {config:?}", layout.name);
        let (mut allocator, device) = allocator_with(layout, config);
        let balance = Arc::new(AtomicI64::new(0));
        let countdown = Arc::new(AtomicI64::new(0));
        allocator.set_memory_callback(counting_callback(&balance, &countdown));
        // The flush's and the budget query's countdowns (as the callback's).
        let hooks = [Arc::new(AtomicI64::new(0)), Arc::new(AtomicI64::new(0))];
        let hook = |left: &Arc<AtomicI64>| -> Box<dyn FnMut() + Send> {
            let left = Arc::clone(left);
            Box::new(move || {
                let armed = |left: i64| (left > 0).then_some(left - 1);
                if left.fetch_update(Ordering::SeqCst, Ordering::SeqCst, armed) == Ok(1) {
                    panic!("the walk's backend panics in a flush or a budget query");
                }
            })
        };
        device.set_flush_hook(Some(hook(&hooks[0])));
        device.set_budget_hook(Some(hook(&hooks[1])));
        Self {
            rng,
            allocator,
            device,
            context,
            balance,
            countdown,
            hooks,
            held: Vec::new(),
            pools: Vec::new(),
            rings: Vec::new(),
            fences: Vec::new(),
            history: Vec::new(),
        }
    }

    fn below(&mut self, n: usize) -> usize {
        self.rng.below(n as u64) as usize
    }

    fn where_(&self) -> String {
        format!("{}, after\n{}", self.context, self.history.join("\n"))
    }

    /// One step, drawn at random: its panic is caught, an error the walk
    /// does not expect (a free of an allocation it holds refused) fails it.
    fn step(&mut self, index: usize) {
        let pick = self.below(100);
        let kind = match pick {
            // As `take` draws them: with nothing held, these arm a panic.
            35..=49 | 82..=85 if self.held.is_empty() => "arm",
            0..=34 => "allocate",
            35..=49 => "free",
            50..=65 => "end a frame, collect or trim",
            66..=70 => "pool",
            71..=81 => "ring",
            82..=85 => "defragment",
            86..=87 => "other",
            _ => "arm",
        };
        let mut note = format!("{index}: {kind} ({pick})");
        let outcome = catch_unwind(AssertUnwindSafe(|| self.take(pick, &mut note)));
        match outcome {
            Ok(Ok(())) => {}
            Ok(Err(error)) => panic!("step {note}: {error}, {}", self.where_()),
            Err(payload) => note += &format!(" panicked: {}", panic_message(&*payload)),
        }
        self.history.push(note);
        self.check();
    }

    fn take(&mut self, pick: usize, note: &mut String) -> Result<(), String> {
        match pick {
            0..=29 => self.allocate(),
            30..=34 => self.allocate_many(),
            35..=49 if !self.held.is_empty() => return self.free(),
            50..=59 => self.end_frame_and_collect(),
            60..=62 => {
                // SAFETY: the fake device runs no GPU work.
                unsafe { self.allocator.collect_idle() };
            }
            63..=65 => {
                self.allocator.trim();
            }
            66..=70 => self.pool(),
            71..=81 => return self.ring(),
            82..=85 if !self.held.is_empty() => return self.defragment(),
            86..=87 => self.other(),
            88..=92 => {
                let k = 1 + self.rng.below(6);
                *note += &format!(" logger panics on line {k}");
                arm_logger(k);
            }
            93..=95 => {
                let k = 1 + self.rng.below(4) as i64;
                *note += &format!(" callback panics on event {k}");
                self.countdown.store(k, Ordering::SeqCst);
            }
            _ => {
                let nth = 1 + self.rng.below(3);
                if self.rng.below(3) == 0 {
                    let which = self.below(2);
                    let call = ["vkFlushMappedMemoryRanges", "a budget query"][which];
                    *note += &format!(" backend panics in {call} {nth}");
                    self.hooks[which].store(nth as i64, Ordering::SeqCst);
                } else if self.rng.below(5) == 0 {
                    *note += " backend panics in the next vkAllocateMemory";
                    self.device.panic_on_next_allocation();
                } else {
                    let call = CALLS[self.below(CALLS.len())];
                    *note += &format!(" backend panics in {call:?} {nth}");
                    self.device.panic_on(call, nth);
                }
            }
        }
        Ok(())
    }

    fn allocate(&mut self) {
        let size = match self.rng.below(4) {
            0 => 64 + self.rng.below(4096),
            1 => 4096 + self.rng.below(256 << 10),
            2 => (1 << 20) + self.rng.below(3 << 20),
            _ => 256 + self.rng.below(64 << 10),
        };
        let requirements = requirements(size, 1 << self.rng.below(9));
        let usage = [Usage::DEVICE_LOCAL, Usage::UPLOAD, Usage::READBACK][self.below(3)];
        let mut desc = AllocationDesc::new(usage);
        if self.rng.below(5) == 0 {
            desc = desc.dedicated(DedicatedPolicy::Always);
        }
        if !self.pools.is_empty() && self.rng.below(4) == 0 {
            let index = self.below(self.pools.len());
            desc = desc.pool(self.pools[index]);
        }
        if self.rng.below(2) == 0 {
            desc = desc.name("walk");
        }
        if self.rng.below(4) == 0 {
            desc = desc.within_budget();
        }
        let kind = [ResourceKind::Buffer, ResourceKind::OptimalImage][self.below(2)];
        let request = Request::with_desc(requirements, kind, desc);
        let made = if self.rng.below(2) == 0 {
            self.allocator.allocate(&request)
        } else {
            self.allocator.allocate_mut(&request)
        };
        if let Ok(allocation) = made {
            self.held.push(Held {
                allocation,
                requirements,
            });
        }
    }

    fn allocate_many(&mut self) {
        let count = 2 + self.rng.below(3);
        let all: Vec<_> = (0..count)
            .map(|_| requirements(256 + self.rng.below(1 << 20), 256))
            .collect();
        let requests: Vec<_> = all
            .iter()
            .map(|&r| Request::new(r, Usage::DEVICE_LOCAL, ResourceKind::Buffer))
            .collect();
        if let Ok(made) = self.allocator.allocate_many(&requests) {
            let held = made.into_iter().zip(all);
            self.held
                .extend(held.map(|(allocation, requirements)| Held {
                    allocation,
                    requirements,
                }));
        }
    }

    fn free(&mut self) -> Result<(), String> {
        let index = self.below(self.held.len());
        let allocation = self.held.swap_remove(index).allocation;
        let (allocator, device) = (&mut self.allocator, &self.device);
        let freed = match self.rng.below(5) {
            // SAFETY: the fake device runs no GPU work.
            0 => unsafe { allocator.free(allocation) },
            // SAFETY: as above.
            1 => unsafe { allocator.free_mut(allocation) },
            2 => allocator.free_after_frame(allocation),
            3 => {
                let buffer = vk::Buffer::from_raw(device.create_resource());
                // SAFETY: a fake buffer that only the allocator destroys.
                unsafe { allocator.destroy_buffer_after_frame(buffer, allocation) }
            }
            _ => {
                let image = vk::Image::from_raw(device.create_resource());
                // SAFETY: a fake image that only the allocator destroys.
                unsafe { allocator.destroy_image_after_frame(image, allocation) }
            }
        };
        freed.map_err(|error| format!("a free of an allocation held: {error:?}"))
    }

    fn end_frame_and_collect(&mut self) {
        let fence = self.device.create_fence();
        // SAFETY: a fake fence, signalled below, at a later step or never
        // (`collect_idle` releases its frame).
        if unsafe { self.allocator.end_frame(fence) }.is_ok() {
            self.fences.push(fence);
        }
        while !self.fences.is_empty() && self.rng.below(3) != 0 {
            self.device.signal_fence(self.fences.remove(0));
        }
        if self.rng.below(4) == 0 {
            let _ = self.allocator.wait_and_collect(0);
        } else {
            let _ = self.allocator.collect();
        }
    }

    fn pool(&mut self) {
        if !self.pools.is_empty() && self.rng.below(3) == 0 {
            let index = self.below(self.pools.len());
            if self.allocator.destroy_pool(self.pools[index]).is_ok() {
                self.pools.swap_remove(index);
            }
            return;
        }
        let memory_type = self.below(self.device.layout().memory_types.len()) as u32;
        let desc = PoolDesc::new(memory_type)
            .block_size(1 << 20)
            .min_blocks(self.rng.below(2) as u32);
        if let Ok(pool) = self.allocator.create_pool(&desc) {
            self.pools.push(pool);
        }
    }

    fn ring(&mut self) -> Result<(), String> {
        if self.rings.is_empty() || self.rng.below(4) == 0 {
            let desc = UploadRingDesc {
                size: 64 << 10,
                grow: self.rng.below(2) == 0,
                name: Some("walk ring"),
                ..Default::default()
            };
            if let Ok(ring) = self.allocator.create_upload_ring(&desc) {
                self.rings.push(ring);
            }
            return Ok(());
        }
        let index = self.below(self.rings.len());
        if self.rng.below(5) == 0 {
            let ring = self.rings.swap_remove(index);
            let destroyed = self.allocator.destroy_upload_ring(ring);
            return destroyed.map_err(|error| format!("a ring held: {error:?}"));
        }
        let (ring, size) = (self.rings[index], 256 + self.rng.below(32 << 10));
        let made = if self.rng.below(2) == 0 {
            self.allocator.ring_allocate(ring, size, 256)
        } else {
            self.allocator.ring_allocate_mut(ring, size, 256)
        };
        if let Ok(allocation) = made {
            let _ = self.allocator.ring_write(&allocation, 0, &[7; 64]);
        }
        Ok(())
    }

    /// A plan over every allocation held; each move is carried out (the
    /// old allocation freed after the frame, the destination held) or,
    /// one in four, given up.
    fn defragment(&mut self) -> Result<(), String> {
        let limits = DefragmentationLimits::default()
            .compact_blocks(self.rng.below(2) == 0)
            .split_blocks(self.rng.below(2) == 0);
        let movables: Vec<Movable<'_>> = self
            .held
            .iter()
            .map(|h| Movable::new(&h.allocation, h.requirements, ResourceKind::Buffer))
            .collect();
        let Ok(plan) = self.allocator.plan_defragmentation(&movables, &limits) else {
            return Ok(());
        };
        let mut moved = Vec::new();
        for planned in plan.moves {
            if self.rng.below(4) == 0 {
                let given_up = self.allocator.give_up_move(planned);
                given_up.map_err(|error| format!("a move given up: {error:?}"))?;
            } else {
                moved.push((planned.movable, planned.destination));
            }
        }
        // Highest index first: `remove` leaves the lower ones in place.
        moved.sort_by_key(|&(index, _)| std::cmp::Reverse(index));
        for (index, destination) in moved {
            let old = self.held.remove(index);
            let freed = self.allocator.free_after_frame(old.allocation);
            freed.map_err(|error| format!("a moved allocation's free: {error:?}"))?;
            self.held.push(Held {
                allocation: destination,
                requirements: old.requirements,
            });
        }
        Ok(())
    }

    fn other(&mut self) {
        match self.rng.below(5) {
            0 => {
                let _ = self.allocator.check_corruption(!0);
            }
            1 => {
                let heap = self.below(self.device.layout().memory_heaps.len()) as u32;
                self.device.cap_heap(heap, (8 << 20) * self.rng.below(8));
            }
            2 => {
                let callback = counting_callback(&self.balance, &self.countdown);
                self.allocator.set_memory_callback(callback);
            }
            3 if !self.held.is_empty() => {
                let index = self.below(self.held.len());
                let held = &self.held[index].allocation;
                let _ = self.allocator.flush(held, ..);
                let _ = self.allocator.set_name(held, Some("renamed"));
            }
            _ => {
                let nth = 1 + self.rng.below(3);
                self.device
                    .fail_allocation(nth, DeviceError::OutOfDeviceMemory);
            }
        }
    }

    /// The allocator's memory objects and bytes are the device's and the
    /// callback's; no two allocations held overlap.
    fn check(&self) {
        let objects = self.device.live_allocations();
        let live = objects.len() as u64;
        // `stats` reads the budgets: not a panic the walk armed for a step.
        let armed = self.hooks[1].swap(0, Ordering::SeqCst);
        let (stats, budgets) = (self.allocator.stats(), self.allocator.budgets());
        self.hooks[1].store(armed, Ordering::SeqCst);
        // Each heap's bytes as the device holds them, as the stats count
        // them, and (without VK_EXT_memory_budget) as its usage.
        let heap = |h: usize| objects.iter().filter(move |m| m.heap as usize == h);
        let bytes: Vec<u64> = (0..stats.heaps.len())
            .map(|h| heap(h).map(|m| m.size).sum())
            .collect();
        let reserved: Vec<u64> = stats.heaps.iter().map(|heap| heap.reserved_bytes).collect();
        let usage: Vec<u64> = match self.device.layout().memory_budget {
            true => bytes.clone(),
            false => budgets.iter().map(|budget| budget.usage).collect(),
        };
        let counted = (u64::from(stats.memory_objects), reserved, usage);
        assert_eq!(
            counted,
            (live, bytes.clone(), bytes),
            "memory, {}",
            self.where_()
        );
        let told = self.balance.load(Ordering::SeqCst);
        assert_eq!(told, live as i64, "memory events, {}", self.where_());
        let mut ranges: Vec<_> = self.held.iter().map(|h| &h.allocation).collect();
        ranges.sort_unstable_by_key(|a| (a.memory().as_raw(), a.offset()));
        for pair in ranges.windows(2) {
            let (memory, offset, size) = (pair[0].memory(), pair[0].offset(), pair[0].size());
            let (next, next_offset) = (pair[1].memory(), pair[1].offset());
            assert!(
                memory != next || offset + size <= next_offset,
                "overlapping allocations {pair:?}, {}",
                self.where_()
            );
        }
    }
}

#[test]
fn panics_anywhere_leave_the_allocator_whole() {
    let base = Rng::seed("panics_anywhere_leave_the_allocator_whole");
    let runs: u64 = std::env::var("PANIC_WALK_RUNS")
        .ok()
        .and_then(|runs| runs.parse().ok())
        .unwrap_or(20);
    for run in 0..runs {
        let mut walk = Walk::new(base.wrapping_add(run));
        for index in 0..300 {
            walk.step(index);
        }
        if walk.rng.below(2) == 0 {
            walk.drop_holding_everything();
        } else {
            walk.free_everything();
        }
    }
}
