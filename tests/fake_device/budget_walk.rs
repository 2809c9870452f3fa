//! A seeded random walk over heap budgets and refused memory, on every
//! fake layout (with and without `VK_EXT_memory_budget`, heaps of
//! 512 MiB): requests pinned to one memory type or free to take any,
//! dedicated or not, within budget or not; custom pools; a growing upload
//! ring; frees now and after a frame; trims; other processes taking and
//! giving back memory (their usage and the budget change, seen after the
//! frame ends, by `end_frame` or by `collect_idle`); and the driver
//! refusing memory past a cap that moves (so that heaps remember refused
//! sizes). After each step:
//! - `budgets()`, when the step reads it, reports each heap's budget as the
//!   allocator reads the driver's (or `budget_fraction` of the heap) and
//!   a usage of exactly this allocator's memory plus the others';
//! - a within-budget request that made memory left that heap within its
//!   budget;
//! - a request without `within_budget` that passed a heap's budget did so
//!   by memory of its own size, never a new block (but with
//!   `DedicatedPolicy::Never`);
//! - a request pinned to one memory type, or in a custom pool, failed only
//!   when that type had no room for its last attempt, which always asks
//!   the driver: dedicated memory of its own size with
//!   `DedicatedPolicy::Always` or in a lazily allocated type (in a pool
//!   too); with `DedicatedPolicy::Auto` the same after the blocks, but for
//!   a request past half a preferred block, which tries dedicated memory
//!   first and a block after it: the preferred block, the only size of
//!   its ladder that holds it; with `DedicatedPolicy::Never` the least
//!   block of its ladder, which goes on below 1/64 of the preferred block
//!   to remainder blocks (its size rounded to a power of two); in a pool
//!   the smallest block of its ladder (the same, but at least 1/64 of the
//!   preferred block), or a pool's fixed block size; by the heap's cap and, within budget, by its budget; a request
//!   pinned to a type no request may take gets exactly the error that
//!   says so, and a request in a pool never that error;
//! - a request free to take any memory type of its usage failed only when
//!   no such type had room for its last attempt (its own size in dedicated
//!   memory: up to 16 MiB, it never tries dedicated memory first); within
//!   budget its error is exactly the refusal of the last type it tries
//!   (in the ranking's order, which `memory_type_for` gives, less AMD's
//!   device-coherent types unless the first is one): `OverBudget` when that
//!   type's heap has no budget for it, else `OutOfDeviceMemory`; without,
//!   `OutOfDeviceMemory`;
//! - a request free to take any type that succeeded is in one it tries,
//!   never past the first (in that order) whose heap had room within its
//!   budget for its own size: in `memory_type_for`'s type whenever that
//!   type had room, however full the allocator;
//! - an `OverBudget` carries its last attempt's figures: the heap of the
//!   last type tried (the pinned type's, the pool's), that heap's budget
//!   and usage exactly as `budgets()` reads them after the call, too high
//!   for the memory object, whose size is exactly that attempt's above.

use std::collections::HashSet;

use ash::vk::{self, Handle};
use gpu_alloc_types::MemoryPropertyFlags;
use vk_suballoc::device::fake::{FakeDevice, FakeLayout};
use vk_suballoc::{Allocation, Config, Error, Pool, UploadRing, UploadRingDesc, Usage};

use super::seeded_rng::Rng;
use super::{allocator, finish, layout_model, tried_order, FakeAllocator};

#[path = "budget_walk/requests.rs"]
mod requests;

const MIB: u64 = 1 << 20;
/// Every heap's size: its preferred block is 1/8 of it (64 MiB).
const HEAP: u64 = 512 * MIB;
/// The preferred block of every heap.
const PREFERRED_BLOCK: u64 = HEAP / 8;
/// The smallest block a custom pool's refused one is retried at: 1/64
/// of the preferred.
const SMALLEST_BLOCK: u64 = PREFERRED_BLOCK / 64;
/// Walks per layout, and steps per walk.
const WALKS: u64 = 2;
const STEPS: u64 = 300;

/// The smallest block a custom pool's request of `size` bytes (at the
/// walk's alignment, 256) tries: its ladder halves the preferred block
/// while the half holds it, down to [`SMALLEST_BLOCK`].
fn smallest_block(size: u64) -> u64 {
    size.next_multiple_of(256)
        .next_power_of_two()
        .max(SMALLEST_BLOCK)
}

/// The least block a default pool's request of `size` bytes (at the
/// walk's alignment, 256) tries when it may not take dedicated memory:
/// below [`SMALLEST_BLOCK`] its ladder goes on halving the preferred block
/// while the half holds it (a remainder block, then this least one).
fn least_block(size: u64) -> u64 {
    size.next_multiple_of(256).next_power_of_two()
}

struct BudgetWalk {
    rng: Rng,
    allocator: FakeAllocator,
    device: FakeDevice,
    layout: FakeLayout,
    /// Per heap: the budget the driver reports, and the others' usage.
    budget: Vec<u64>,
    others: Vec<u64>,
    /// Per heap: where the driver stops granting memory (`None`: the heap).
    cap: Vec<Option<u64>>,
    live: Vec<Allocation>,
    fences: Vec<vk::Fence>,
    pools: Vec<Pool>,
    pool_shapes: Vec<(u32, u64)>,
    ring: Option<UploadRing>,
    /// The last steps, for a failure's message.
    log: Vec<String>,
    context: String,
}

impl BudgetWalk {
    fn new(layout: FakeLayout, seed: u64, context: String) -> Self {
        let (allocator, device) = allocator(layout.clone());
        let mut rng = Rng(seed);
        let heaps = layout.memory_heaps.len();
        let budget: Vec<u64> = (0..heaps).map(|_| HEAP / 4 + rng.below(HEAP)).collect();
        let others: Vec<u64> = budget.iter().map(|b| rng.below(b / 2)).collect();
        for (heap, (&budget, &others)) in budget.iter().zip(&others).enumerate() {
            device.set_heap_budget(heap as u32, budget, others);
        }
        let desc = UploadRingDesc {
            size: 2 * MIB,
            grow: true,
            ..UploadRingDesc::default()
        };
        let ring = allocator.create_upload_ring(&desc).ok();
        Self {
            rng,
            allocator,
            device,
            layout,
            budget,
            others,
            cap: vec![None; heaps],
            live: Vec::new(),
            fences: Vec::new(),
            pools: Vec::new(),
            pool_shapes: Vec::new(),
            ring,
            log: Vec::new(),
            context,
        }
    }

    /// The budget of `heap` as the allocator reads it: the driver's (0
    /// read as `budget_fraction` of the heap, one past the heap as its
    /// size), or without the extension `budget_fraction` of the heap.
    fn budget(&self, heap: usize) -> u64 {
        let fraction = (HEAP as f64 * Config::default().budget_fraction) as u64;
        match self.budget[heap] {
            _ if !self.layout.memory_budget => fraction,
            0 => fraction,
            budget => budget.min(HEAP),
        }
    }

    /// The process's usage of `heap` as the driver reports it: this
    /// allocator's and, with the extension, the others'.
    fn usage(&self, heap: usize) -> u64 {
        let others = if self.layout.memory_budget {
            self.others[heap]
        } else {
            0
        };
        self.own(heap) + others
    }

    fn own(&self, heap: usize) -> u64 {
        self.device.heap_usage()[heap]
    }

    /// Bytes the driver still grants in `heap`.
    fn driver_room(&self, heap: usize) -> u64 {
        self.cap[heap]
            .unwrap_or(HEAP)
            .min(HEAP)
            .saturating_sub(self.own(heap))
    }

    fn budget_room(&self, heap: usize) -> u64 {
        self.budget(heap).saturating_sub(self.usage(heap))
    }

    fn heap_of(&self, memory_type: u32) -> usize {
        self.layout.memory_types[memory_type as usize].heap as usize
    }

    /// Bytes a request may still get in `heap`: the driver's room and,
    /// `within` budget, the budget's.
    fn room(&self, heap: usize, within: bool) -> u64 {
        if within {
            self.driver_room(heap).min(self.budget_room(heap))
        } else {
            self.driver_room(heap)
        }
    }

    /// The error a request pinned to `memory_type` for `usage` gets
    /// whatever the heaps hold: `NoMemoryTypeBits` for a type no request
    /// may take (AMD's device-coherent types without their feature),
    /// `NoSuitableMemoryType` for a lazily allocated type (for transient
    /// attachments only).
    fn pinned_refusal(&self, memory_type: u32, usage: Usage) -> Option<Error> {
        let bits = 1 << memory_type;
        let props = self.layout.memory_types[memory_type as usize].props;
        if layout_model::usable_types(&self.layout) & bits == 0 {
            Some(Error::NoMemoryTypeBits(bits))
        } else if props.contains(MemoryPropertyFlags::LAZILY_ALLOCATED) {
            Some(Error::NoSuitableMemoryType {
                memory_type_bits: bits,
                usage,
            })
        } else {
            None
        }
    }

    /// The memory types a request free to take any type of `usage` may
    /// use: usable, not lazily allocated, not protected, host-visible when
    /// the host reads or writes it.
    fn candidates(&self, usage: Usage) -> Vec<u32> {
        let usable = layout_model::usable_types(&self.layout);
        let host = usage.needs_host_access();
        (0..self.layout.memory_types.len() as u32)
            .filter(|&t| {
                let props = self.layout.memory_types[t as usize].props;
                usable & (1 << t) != 0
                    && !props.contains(MemoryPropertyFlags::LAZILY_ALLOCATED)
                    && !props.contains(MemoryPropertyFlags::PROTECTED)
                    && (!host || props.contains(MemoryPropertyFlags::HOST_VISIBLE))
            })
            .collect()
    }

    /// The memory types a request free to take any type of `usage` tries,
    /// in order: [`candidates`](Self::candidates) as the ranking orders
    /// them (what `memory_type_for` names first among those left), less
    /// AMD's device-coherent types unless the first is one (they are no
    /// ordinary request's fallback).
    fn tried_types(&self, usage: Usage) -> Vec<u32> {
        tried_order(
            self.candidates(usage).iter().map(|t| 1 << t).sum(),
            self.layout.amd_device_coherent_types,
            // Every non-empty set of candidates has a first type.
            |left| (left != 0).then(|| self.allocator.memory_type_for(left, usage).unwrap()),
        )
    }

    fn memory_objects(&self) -> HashSet<u64> {
        let live = self.device.live_allocations();
        live.iter().map(|m| m.memory.as_raw()).collect()
    }

    fn ctx(&self) -> String {
        let last = &self.log[self.log.len().saturating_sub(10)..];
        format!("{}\n{}", self.context, last.join("\n"))
    }

    fn step(&mut self, step: u64) {
        match self.rng.below(20) {
            0..=7 => self.pinned_request(step),
            8 | 9 => self.any_type_request(step),
            10 => self.pool_request(step),
            11..=13 => self.free(step),
            14 => {
                self.end_frame();
                self.log.push(format!("{step}: frame ends"));
            }
            15 => self.others_change(step),
            16 => self.cap_changes(step),
            17 => self.ring_allocation(step),
            18 => {
                self.allocator.trim();
                self.log.push(format!("{step}: trim"));
            }
            _ => self.check_budgets(step),
        }
    }

    fn free(&mut self, step: u64) {
        if self.live.is_empty() {
            return;
        }
        let index = self.rng.below(self.live.len() as u64) as usize;
        let allocation = self.live.swap_remove(index);
        if self.rng.below(2) == 0 {
            // SAFETY: the fake device runs no GPU work.
            unsafe { self.allocator.free(allocation) }.unwrap();
        } else {
            self.allocator.free_after_frame(allocation).unwrap();
        }
        self.log.push(format!("{step}: free"));
    }

    /// Ends the frame, by `end_frame` (the frame before it done) or, now
    /// and then, by `collect_idle` (the device idle).
    fn end_frame(&mut self) {
        if self.rng.below(4) == 0 {
            // SAFETY: the fake device runs no GPU work.
            unsafe { self.allocator.collect_idle() };
            return;
        }
        let fence = self.device.create_fence();
        // SAFETY: a fake fence, signalled once "the GPU" is done.
        unsafe { self.allocator.end_frame(fence) }.unwrap();
        self.fences.push(fence);
        if self.fences.len() > 1 {
            self.device.signal_fence(self.fences.remove(0));
        }
        self.allocator.collect().unwrap();
    }

    /// Other processes take or give back memory of a heap, or its budget
    /// changes; the allocator sees that from the frame's end on.
    fn others_change(&mut self, step: u64) {
        let heap = self.rng.below(self.budget.len() as u64) as usize;
        if self.rng.below(4) == 0 {
            self.budget[heap] = self.rng.below(2 * HEAP);
        }
        self.others[heap] = self.rng.below(self.budget[heap] + 1);
        self.device
            .set_heap_budget(heap as u32, self.budget[heap], self.others[heap]);
        self.end_frame();
        self.log.push(format!(
            "{step}: heap {heap}: others use {}, budget {}; frame ends",
            self.others[heap], self.budget[heap]
        ));
    }

    /// The driver grants memory in a heap up to a new cap (or the heap).
    fn cap_changes(&mut self, step: u64) {
        let heap = self.rng.below(self.cap.len() as u64) as usize;
        self.cap[heap] = match self.rng.below(3) {
            0 => None,
            _ => Some(self.own(heap) + self.rng.below(64 * MIB)),
        };
        self.device
            .cap_heap(heap as u32, self.cap[heap].unwrap_or(u64::MAX));
        self.log.push(format!(
            "{step}: heap {heap} capped at {:?}",
            self.cap[heap]
        ));
    }

    fn ring_allocation(&mut self, step: u64) {
        if let Some(ring) = self.ring {
            let size = 1 + self.rng.below(3 * MIB);
            let result = self.allocator.ring_allocate(ring, size, 256);
            self.log.push(format!(
                "{step}: {size} bytes of ring: {:?}",
                result.as_ref().err()
            ));
            // A growing ring past its chunks adds one (the ring's size, or
            // `size` if larger), not held to the budget: short of device
            // memory is its only refusal here.
            if let Err(error) = result {
                assert_eq!(error, Error::OutOfDeviceMemory, "{}", self.ctx());
            }
        }
    }

    fn check_budgets(&mut self, step: u64) {
        let budgets = self.allocator.budgets();
        for (heap, figures) in budgets.iter().enumerate() {
            assert_eq!(
                (figures.budget, figures.usage),
                (self.budget(heap), self.usage(heap)),
                "{}: heap {heap}",
                self.ctx()
            );
        }
        self.log.push(format!("{step}: budgets read"));
    }

    fn finish(mut self) {
        for fence in self.fences.drain(..) {
            self.device.signal_fence(fence);
        }
        for allocation in self.live.drain(..) {
            // SAFETY: the fake device runs no GPU work.
            unsafe { self.allocator.free(allocation) }.unwrap();
        }
        if let Some(ring) = self.ring.take() {
            self.allocator.destroy_upload_ring(ring).unwrap();
        }
        // SAFETY: as above.
        unsafe { self.allocator.collect_idle() };
        for pool in self.pools.drain(..) {
            self.allocator.destroy_pool(pool).unwrap();
        }
        finish(self.allocator, &self.device);
    }
}

#[test]
fn budgets_and_refusals_hold_on_every_layout() {
    let mut seeds = Rng::from_env("budget_walk");
    for walk in 0..WALKS {
        let seed = seeds.next();
        for layout in [
            FakeLayout::discrete(),
            FakeLayout::rebar(),
            FakeLayout::amd(),
            FakeLayout::intel_arc(),
            FakeLayout::integrated(),
            FakeLayout::integrated().with_memory_budget(true),
            FakeLayout::discrete().with_memory_budget(false),
            FakeLayout::mobile(),
            FakeLayout::mali(),
            FakeLayout::apple(),
        ] {
            let context = format!("budget walk {walk} on {}", layout.name);
            let mut state = BudgetWalk::new(layout.with_heap_sizes(HEAP), seed, context);
            for step in 0..STEPS {
                state.step(step);
            }
            state.finish();
        }
    }
}
