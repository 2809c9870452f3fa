//! What a request of the walk may get: the memory types it may use, the
//! error a flawed request must get, when running out of memory is
//! explained; and the faults injected that explain failures.

use std::fmt::Debug;

use gpu_alloc_types::MemoryPropertyFlags as Props;
use vk_suballoc::device::fake::FakeCounters;
use vk_suballoc::device::DeviceError;
use vk_suballoc::report::Stats;
use vk_suballoc::{DedicatedPolicy, Error, Request, ResourceKind, Usage};

use super::super::{no_room, tried_order};
use super::{is_host_visible, is_non_coherent, Fired, Walk, MIB};

/// `AlignmentNotPowerOfTwo` for a `min_alignment` neither a power of two
/// nor 0: checked right after the requirements' own alignment, on both
/// request paths.
pub(super) fn min_alignment_refusal(request: &Request<'_>) -> Option<Error> {
    let min = request.desc.min_alignment;
    (min != 0 && !min.is_power_of_two()).then_some(Error::AlignmentNotPowerOfTwo(min))
}

impl Walk {
    /// The memory types the allocator may use at all: every one, less AMD's
    /// device-coherent types unless their feature is on, and less protected
    /// types unless `protectedMemory` is.
    pub(super) fn usable_types(&self) -> u32 {
        crate::layout_model::usable_types(&self.layout)
    }

    /// Memory types a request may use: [`suiting`](Self::suiting), with
    /// AMD's device-coherent types only for a request that may use no
    /// other type (they take no ordinary request's fallback).
    pub(super) fn candidates(&self, bits: u32, usage: Usage, size: u64) -> Vec<u32> {
        let all = self.suiting(bits, usage, size);
        let last_resort = |t: &u32| self.layout.amd_device_coherent_types & (1 << t) != 0;
        if all.iter().all(last_resort) {
            all
        } else {
            all.into_iter().filter(|t| !last_resort(t)).collect()
        }
    }

    /// The memory types a request naming no pool tries, in order: its
    /// [`candidates`](Self::candidates) as `memory_type_for_desc` ranks
    /// them (the type it names first among those left), less AMD's
    /// device-coherent types unless the first is one.
    pub(super) fn tried_types(&self, request: &Request<'_>) -> Vec<u32> {
        let r = &request.requirements;
        let candidates = self.candidates(r.memory_type_bits, request.desc.usage, r.size);
        tried_order(
            candidates.iter().map(|t| 1 << t).sum(),
            self.layout.amd_device_coherent_types,
            |left| {
                self.allocator
                    .memory_type_for_desc(left, &request.desc)
                    .ok()
            },
        )
    }

    /// Memory types that suit a request: the documented filters of the
    /// ranking (`memoryTypeBits`, usable types, heap size, host access,
    /// lazily allocated memory only for transient attachments, no protected
    /// memory).
    fn suiting(&self, bits: u32, usage: Usage, size: u64) -> Vec<u32> {
        let host = usage.needs_host_access();
        let bits = bits & self.usable_types();
        (0..self.layout.memory_types.len() as u32)
            .filter(|&t| {
                let ty = &self.layout.memory_types[t as usize];
                bits & (1 << t) != 0
                    && self.layout.memory_heaps[ty.heap as usize].size >= size
                    && (!ty.props.contains(Props::LAZILY_ALLOCATED)
                        || usage.contains(Usage::TRANSIENT))
                    && !ty.props.contains(Props::PROTECTED)
                    && (!host || is_host_visible(ty.props))
            })
            .collect()
    }

    /// The error a flawed request must get, whatever the device's state.
    pub(super) fn rejection(&self, request: &Request<'_>) -> Option<Error> {
        if let Some(pool) = request.desc.pool {
            return self.pool_rejection(pool, request);
        }
        let r = &request.requirements;
        let usage = request.desc.usage;
        let types = self.layout.memory_types.len();
        let bits = r.memory_type_bits & self.usable_types();
        if r.size == 0 {
            return Some(Error::ZeroSize);
        }
        if !r.alignment.is_power_of_two() {
            return Some(Error::AlignmentNotPowerOfTwo(r.alignment));
        }
        if let Some(error) = min_alignment_refusal(request) {
            return Some(error);
        }
        if request.driver_dedicated.required && request.target().is_none() {
            return Some(Error::MissingDedicatedTarget);
        }
        if bits == 0 {
            return Some(Error::NoMemoryTypeBits(r.memory_type_bits));
        }
        let unsuitable = Error::NoSuitableMemoryType {
            memory_type_bits: r.memory_type_bits,
            usage,
        };
        if usage.contains(Usage::DEVICE_ADDRESS) && !self.layout.buffer_device_address {
            return Some(Error::DeviceAddressNotEnabled);
        }
        let candidates = self.candidates(bits, usage, r.size);
        if !candidates.is_empty() {
            let max = self.layout.max_memory_allocation_size;
            if r.size > max {
                return Some(Error::SizeExceedsMaxAllocation { size: r.size, max });
            }
            // Existing memory only, yet dedicated memory in every candidate.
            let dedicated = |t: &u32| self.requires_dedicated(*t, request);
            return (request.desc.existing_memory_only && candidates.iter().all(dedicated))
                .then_some(Error::NoRoomInExistingMemory);
        }
        // Too large for every allowed type that suits the usage, when one
        // does; else for every allowed type, or unsuitable.
        let heap_of =
            |t: usize| self.layout.memory_heaps[self.layout.memory_types[t].heap as usize].size;
        // Every type that suits the usage, AMD's device-coherent ones
        // included: the allocator names the largest of their heaps.
        let suiting = self.suiting(bits, usage, 0);
        if let Some(largest_heap) = suiting.iter().map(|&t| heap_of(t as usize)).max() {
            return Some(Error::SizeExceedsHeaps {
                size: r.size,
                largest_heap,
            });
        }
        let largest_heap = (0..types)
            .filter(|t| bits & (1 << t) != 0)
            .map(heap_of)
            .max()
            .unwrap_or(0);
        Some(if r.size > largest_heap {
            Error::SizeExceedsHeaps {
                size: r.size,
                largest_heap,
            }
        } else {
            unsuitable
        })
    }

    /// Whether `request` gets dedicated memory of type `t` whatever the
    /// blocks hold: the driver or the caller requires it, or the type is
    /// lazily allocated (as in VMA). In a custom pool, exactly then.
    pub(super) fn requires_dedicated(&self, t: u32, request: &Request<'_>) -> bool {
        let props = self.layout.memory_types[t as usize].props;
        request.driver_dedicated.required
            || request.desc.dedicated == DedicatedPolicy::Always
            || props.contains(Props::LAZILY_ALLOCATED)
            || self.unknown_on_odd_pages(request)
    }

    /// Whether `request` is of unknown kind on a device whose granularity
    /// is not a power of two: it then takes dedicated memory, always.
    pub(super) fn unknown_on_odd_pages(&self, request: &Request<'_>) -> bool {
        request.kind == ResourceKind::Unknown
            && !self
                .layout
                .buffer_image_granularity
                .max(1)
                .is_power_of_two()
    }

    /// At least the bytes `request` takes in a block of memory type `t`.
    pub(super) fn placed_bound(&self, t: u32, request: &Request<'_>) -> u64 {
        let r = &request.requirements;
        let mut align = r.alignment.max(request.desc.min_alignment);
        if is_non_coherent(self.layout.memory_types[t as usize].props) {
            align = align.max(self.layout.non_coherent_atom_size);
        }
        if matches!(
            request.kind,
            ResourceKind::OptimalImage | ResourceKind::Unknown
        ) {
            align = align.max(self.layout.buffer_image_granularity.next_power_of_two());
        }
        // Saturated: an alignment of 2^63 leaves no multiple past it.
        let placed = (r.size + self.config.debug_margin).checked_next_multiple_of(align);
        placed.unwrap_or(u64::MAX)
    }

    /// A candidate memory type whose heap (and budget, when asked to stay
    /// within it) has room for a whole new block for `request`, or for its
    /// dedicated memory when only that will do, below the object limit: the
    /// request cannot run out of memory then.
    pub(super) fn room_for(&self, request: &Request<'_>, objects: u32) -> Option<u32> {
        if self.lost || objects >= self.layout.max_memory_allocation_count {
            return None;
        }
        let r = &request.requirements;
        let usage = self.device.heap_usage();
        let budgets = self.allocator.budgets();
        let only_dedicated = request.driver_dedicated.required
            || request.desc.dedicated == DedicatedPolicy::Always
            || self.unknown_on_odd_pages(request);
        let bits = r.memory_type_bits;
        self.candidates(bits, request.desc.usage, r.size)
            .into_iter()
            .find(|&t| {
                let heap = self.layout.memory_types[t as usize].heap as usize;
                let needed = if only_dedicated {
                    r.size
                } else {
                    self.preferred[t as usize].max(self.placed_bound(t, request))
                };
                let size = self.layout.memory_heaps[heap].size;
                let limit = self.caps[heap].map_or(size, |cap| cap.min(size));
                let budget = budgets[heap].budget.saturating_sub(budgets[heap].usage);
                needed <= self.layout.max_memory_allocation_size
                    && needed <= limit.saturating_sub(usage[heap])
                    && (!request.desc.within_budget || needed <= budget)
            })
    }

    /// Panics unless `error`, the answer to `request`, is the one its flaw
    /// names or one the situation explains.
    /// Whether `error`, for `request` that no flaw of its own refuses, is
    /// one the situation explains: an injected failure of its own kind
    /// (`fired`: out of host memory, a failed map, too many objects), a
    /// lost device, the object limit (with `objects` memory objects), a
    /// budget asked for, or a full heap (which callers check further).
    pub(super) fn exhaustion_explained(
        &self,
        error: Error,
        request: &Request<'_>,
        fired: Fired,
        objects: u32,
    ) -> bool {
        let limit = self.layout.max_memory_allocation_count;
        match error {
            Error::DeviceLost => self.lost,
            Error::OutOfHostMemory => fired.host_memory,
            Error::MapFailed => fired.map,
            Error::TooManyObjects(n) => n == limit && (fired.objects || objects >= limit),
            Error::OverBudget {
                heap,
                size,
                usage,
                budget,
            } => {
                request.desc.within_budget
                    && self.over_budget_figures(request, heap, size, usage, budget)
            }
            Error::OutOfDeviceMemory => true,
            _ => false,
        }
    }

    /// Whether the figures of an `OverBudget` for `request` are its last
    /// refused attempt's, as `Error::OverBudget`'s docs say: the heap of
    /// the last memory type it tries ([`tried_types`](Self::tried_types):
    /// a request held to the budget tries each once, and the last one's
    /// refusal is the error; its custom pool's), a reading of that heap
    /// (the one `budgets()` gives after the call) with no room for the
    /// refused memory object, which holds the request: its own size in
    /// dedicated memory the request requires (in the last type tried, or
    /// its pool's), a pool's fixed block, else at least its size. (A block's size turns on the blocks: not
    /// modelled.)
    fn over_budget_figures(
        &self,
        request: &Request<'_>,
        heap: u32,
        size: u64,
        usage: u64,
        budget: u64,
    ) -> bool {
        let r = &request.requirements;
        let heap_of = |t: u32| self.layout.memory_types[t as usize].heap;
        let (heap_ok, size_ok) = match request.desc.pool {
            Some(pool) => {
                let t = pool.memory_type();
                let block = self.live_pool(pool).and_then(|p| p.block_size);
                let bytes = match block {
                    _ if self.pool_dedicated(t, request) => size == r.size,
                    Some(block) => size == block,
                    None => size >= r.size,
                };
                (heap == heap_of(t), bytes)
            }
            None => {
                let last = self.tried_types(request).last().copied();
                // Dedicated memory required (as in a pool: the driver,
                // the policy, a lazily allocated type, a resource of
                // unknown kind on pages no block can round to) is of its
                // own size.
                let bytes = match last {
                    Some(t) if self.pool_dedicated(t, request) => size == r.size,
                    _ => size >= r.size,
                };
                (last.map(heap_of) == Some(heap), bytes)
            }
        };
        // The reading that refused it: nothing is made or released in the
        // heap after that last attempt, so `budgets()` reads it still.
        let read = self.allocator.budgets()[heap as usize];
        heap_ok
            && size_ok
            && (usage, budget) == (read.usage, read.budget)
            && no_room(usage, size, budget)
    }

    pub(super) fn explain(
        &self,
        error: Error,
        request: &Request<'_>,
        before: &Stats,
        fired: Fired,
    ) {
        if let Some(expected) = self.rejection(request) {
            assert_eq!(error, expected, "{}: {request:?}", self.ctx());
            return;
        }
        if request.desc.existing_memory_only {
            self.explain_existing_only(error, request, fired);
            return;
        }
        let objects = before.memory_objects;
        assert!(
            self.exhaustion_explained(error, request, fired, objects),
            "{}: {error:?} for {request:?} is not explained (injected failures {fired:?}, lost {}, {objects} objects)",
            self.ctx(),
            self.lost
        );
        if !fired.any() && matches!(error, Error::OutOfDeviceMemory | Error::OverBudget { .. }) {
            if let Some(t) = self.room_for(request, objects) {
                panic!(
                    "{}: {error:?} for {request:?}, yet memory type {t} has room (heap usage {:?}, caps {:?}, budgets {:?}, {objects} objects)",
                    self.ctx(),
                    self.device.heap_usage(),
                    self.caps,
                    self.allocator.budgets()
                );
            }
        }
    }

    /// Panics unless `error`, the answer to an existing-memory-only
    /// `request` that no flaw of its own refuses, is
    /// `NoRoomInExistingMemory`, with no injected failure fired: such a
    /// request calls no `vkAllocateMemory` or `vkMapMemory`, so the device
    /// can fail it in no other way. Whether it fails is not predicted: that
    /// needs to know whether some block of some candidate type (in rank
    /// order) has a free range of the placed size at the placed alignment,
    /// which turns on the offset allocator's bins, the run slots, the
    /// granularity classes and the blocks a plan is emptying; a model of
    /// all that would be a second allocator, wrong where the first is. The
    /// caller checks instead what a user relies on: no memory object made,
    /// no device call, no figure changed, and a success in a block that
    /// existed before.
    pub(super) fn explain_existing_only(&self, error: Error, request: &Request<'_>, fired: Fired) {
        let ctx = self.ctx();
        assert_eq!(
            error,
            Error::NoRoomInExistingMemory,
            "{ctx}: {request:?} for existing memory only"
        );
        assert!(!fired.any(), "{ctx}: {request:?} reached the device");
    }

    /// Panics when `error` is `OutOfDeviceMemory` yet no
    /// `vkAllocateMemory` call since `before` was refused: a heap's
    /// remembered refusal skips only attempts that are not a request's
    /// last in a memory type, so no request fails for want of device
    /// memory without the driver having been asked
    /// (`memory/context/refusals.rs`).
    pub(super) fn check_driver_asked(&self, error: Error, before: &FakeCounters, what: &dyn Debug) {
        if error != Error::OutOfDeviceMemory {
            return;
        }
        let now = self.device.counters();
        assert!(
            now.refused_allocations() > before.refused_allocations(),
            "{}: {error:?} for {what:?}, yet the driver refused no call ({} calls, {} refused before; {} calls, {} refused after; heap usage {:?}, caps {:?})",
            self.ctx(),
            before.allocate_calls,
            before.refused_allocations(),
            now.allocate_calls,
            now.refused_allocations(),
            self.device.heap_usage(),
            self.caps
        );
    }

    /// Injects a failure, caps or frees a heap, or moves a budget.
    pub(super) fn inject(&mut self) {
        let heaps = self.layout.memory_heaps.len() as u64;
        let heap = self.rng.below(heaps) as usize;
        match self.rng.below(6) {
            0 | 1 if self.alloc_faults.len() < 2 => {
                let nth = 1 + self.rng.below(3);
                let errors = [
                    DeviceError::OutOfDeviceMemory,
                    DeviceError::OutOfDeviceMemory,
                    DeviceError::OutOfHostMemory,
                    DeviceError::TooManyObjects,
                ];
                let error = errors[self.rng.below(4) as usize];
                self.device.fail_allocation(nth, error);
                self.alloc_faults
                    .push((self.device.counters().allocate_calls + nth, error));
            }
            2 if self.map_faults.is_empty() => {
                let nth = 1 + self.rng.below(2);
                self.device.fail_map(nth);
                self.map_faults.push(self.device.counters().maps + nth);
            }
            3 => {
                let cap = self.device.heap_usage()[heap] + self.rng.below(64 * MIB);
                self.device.cap_heap(heap as u32, cap);
                self.caps[heap] = Some(cap);
            }
            4 => {
                self.device.cap_heap(heap as u32, u64::MAX);
                self.caps[heap] = None;
            }
            _ => {
                let size = self.layout.memory_heaps[heap].size;
                let budget = size / 100 * (20 + self.rng.below(81));
                let external = self.rng.below(budget / 2 + 1);
                self.device.set_heap_budget(heap as u32, budget, external);
            }
        }
    }
}
