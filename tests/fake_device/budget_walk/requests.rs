//! The walk's requests and what each must satisfy: pinned to one memory
//! type, free to take any type of its usage, or in a custom pool; each
//! fails only without room for its last attempt (with exactly the error,
//! and an `OverBudget`'s figures, the model expects), stays within the
//! budget when asked to, and passes a budget otherwise only by memory of
//! its own size.

use std::collections::HashSet;

use ash::vk::{self, Handle};
use gpu_alloc_types::MemoryPropertyFlags;
use vk_suballoc::{Allocation, DedicatedPolicy, Error, PoolDesc, Request, ResourceKind, Usage};

use super::{least_block, smallest_block, BudgetWalk, HEAP, MIB, PREFERRED_BLOCK};
use crate::no_room;

impl BudgetWalk {
    /// A request in one memory type, which fails only without room for
    /// its last attempt.
    pub(super) fn pinned_request(&mut self, step: u64) {
        let types = self.layout.memory_types.len() as u64;
        let memory_type = self.rng.below(types) as u32;
        let heap = self.heap_of(memory_type);
        let policy = [
            DedicatedPolicy::Auto,
            DedicatedPolicy::Always,
            DedicatedPolicy::Never,
        ][self.rng.below(3) as usize];
        let never = policy == DedicatedPolicy::Never;
        let size = match self.rng.below(3) {
            0 => 1 + self.rng.below(64 << 10),
            2 if !never => 1 + self.rng.below(HEAP / 8),
            _ => 1 + self.rng.below(4 * MIB),
        };
        let props = self.layout.memory_types[memory_type as usize].props;
        let usage = if props.contains(MemoryPropertyFlags::HOST_VISIBLE) {
            Usage::UPLOAD
        } else {
            Usage::DEVICE_LOCAL
        };
        let requirements = vk::MemoryRequirements {
            size,
            alignment: 256,
            memory_type_bits: 1 << memory_type,
        };
        let mut request = Request::new(requirements, usage, ResourceKind::Buffer).dedicated(policy);
        let within = self.rng.below(2) == 0;
        if within {
            request = request.within_budget();
        }
        let refusal = self.pinned_refusal(memory_type, usage);
        let before = self.memory_objects();
        let own_before = self.own(heap);
        let result = self.allocator.allocate(&request);
        self.log.push(format!(
            "{step}: {size} bytes in type {memory_type} (heap {heap}), {policy:?}, within budget {within}: {:?}; own {:?}, others {:?}, budgets {:?}, caps {:?}",
            result.as_ref().map(Allocation::memory_type),
            self.device.heap_usage(),
            self.others,
            self.budget,
            self.cap
        ));
        if let Some(refusal) = refusal {
            // Types no request may take (AMD's device-coherent ones), or
            // not for this usage (lazily allocated ones).
            assert_eq!(
                result.as_ref().err(),
                Some(&refusal),
                "{}: pinned to type {memory_type}",
                self.ctx()
            );
            return;
        }
        match result {
            Ok(allocation) => {
                if within && self.own(heap) > own_before {
                    self.assert_within_budget(heap);
                }
                if !within {
                    self.assert_past_budget_by_own_size(&before, size, never);
                }
                self.live.push(allocation);
            }
            Err(error) => {
                let room = self.room(heap, within);
                let last_attempt = if never { least_block(size) } else { size };
                // `Always`: dedicated memory alone. `Auto`: blocks, then
                // dedicated memory; or, past half a preferred block,
                // dedicated memory first, then the blocks, whose only
                // size holding it is the preferred one. `Never`: blocks
                // down to the smallest that holds it.
                let bytes = match policy {
                    DedicatedPolicy::Never => least_block(size),
                    DedicatedPolicy::Auto if size > PREFERRED_BLOCK / 2 => PREFERRED_BLOCK,
                    _ => size,
                };
                self.assert_short_of_memory(error, within, heap, bytes);
                assert!(
                    room < last_attempt,
                    "{}: {error:?} for {size} bytes, with {room} bytes of room (the driver's {}, the budget's {})",
                    self.ctx(),
                    self.driver_room(heap),
                    self.budget_room(heap)
                );
            }
        }
    }

    /// A request any memory type of its usage may take.
    pub(super) fn any_type_request(&mut self, step: u64) {
        let size = 1 + self.rng.below(16 * MIB);
        let usage = [
            Usage::DEVICE_LOCAL,
            Usage::UPLOAD,
            Usage::READBACK,
            Usage::UPLOAD | Usage::DEVICE_LOCAL,
        ][self.rng.below(4) as usize];
        let kind = [ResourceKind::Buffer, ResourceKind::OptimalImage][self.rng.below(2) as usize];
        let requirements = vk::MemoryRequirements {
            size,
            alignment: 256,
            memory_type_bits: !0,
        };
        let mut request = Request::new(requirements, usage, kind);
        let within = self.rng.below(2) == 0;
        if within {
            request = request.within_budget();
        }
        let before = self.memory_objects();
        let own_before: Vec<u64> = (0..self.budget.len()).map(|h| self.own(h)).collect();
        // The first type tried (`memory_type_for`'s) with room within its
        // budget for the request's last attempt there, dedicated memory
        // of its own size, which it therefore takes, if no type before it
        // placed the request.
        let tried = self.tried_types(usage);
        let first_with_room = tried
            .iter()
            .position(|&t| self.room(self.heap_of(t), true) >= size);
        let result = self.allocator.allocate(&request);
        self.log.push(format!(
            "{step}: {size} bytes, {usage:?}, {kind:?}, within budget {within}: {:?}",
            result.as_ref().map(Allocation::memory_type)
        ));
        let allocation = match result {
            Ok(allocation) => allocation,
            Err(error) => {
                // Its last attempt in each type asks the driver for
                // dedicated memory of its own size (at most 16 MiB, it
                // never tries dedicated memory first, which takes more
                // than half a preferred block). Within budget its types
                // are tried once, in their ranking's order, so the last
                // one's refusal is the error: its budget's, else the
                // driver's. (Without, the walk over them past their
                // budgets ends with a driver's refusal.)
                assert!(size <= PREFERRED_BLOCK / 2);
                let last = *self
                    .tried_types(usage)
                    .last()
                    .expect("a type suits every usage");
                let heap = self.heap_of(last);
                let refusal = if within && no_room(self.usage(heap), size, self.budget(heap)) {
                    Error::OverBudget {
                        heap: heap as u32,
                        size,
                        usage: self.usage(heap),
                        budget: self.budget(heap),
                    }
                } else {
                    Error::OutOfDeviceMemory
                };
                assert_eq!(
                    error,
                    refusal,
                    "{}: {size} bytes refused, the last type tried is {last} (heap {heap})",
                    self.ctx()
                );
                for t in self.candidates(usage) {
                    let heap = self.heap_of(t);
                    let room = self.room(heap, within);
                    assert!(
                        room < size,
                        "{}: {error:?} for {size} bytes, yet type {t} (heap {heap}) has {room} bytes of room (the driver's {}, the budget's {})",
                        self.ctx(),
                        self.driver_room(heap),
                        self.budget_room(heap)
                    );
                }
                return;
            }
        };
        // Placed in a type it tries, and never past the first with room:
        // `memory_type_for`'s answer whenever that has room, however full
        // the allocator (its docs: the type a request is placed in first).
        let landed = tried.iter().position(|&t| t == allocation.memory_type());
        assert!(
            landed.is_some() && landed <= first_with_room.or(landed),
            "{}: {size} bytes placed in type {}, tried in the order {tried:?}, the first with room \
             being number {first_with_room:?}",
            self.ctx(),
            allocation.memory_type()
        );
        for (heap, &own) in own_before.iter().enumerate() {
            if within && self.own(heap) > own {
                self.assert_within_budget(heap);
            }
        }
        if !within {
            self.assert_past_budget_by_own_size(&before, size, false);
        }
        self.live.push(allocation);
    }

    /// Panics unless `error` says the memory ran short: out of device
    /// memory, or over budget for a request `within` it, with the figures
    /// of its last attempt (`Error::OverBudget`'s docs): `last_heap`, the
    /// heap of the last memory type it tried, that heap's budget and
    /// usage as the allocator reads them (the model's, unchanged since the
    /// refusal: nothing is made or released after it), and a memory object
    /// of `bytes`, that attempt's, which those figures have no room for.
    fn assert_short_of_memory(&self, error: Error, within: bool, last_heap: usize, bytes: u64) {
        let ctx = self.ctx();
        let Error::OverBudget {
            heap,
            size,
            usage,
            budget,
        } = error
        else {
            assert_eq!(
                error,
                Error::OutOfDeviceMemory,
                "{ctx}: within budget {within}"
            );
            return;
        };
        assert!(
            within,
            "{ctx}: {error:?} for a request not held to the budget"
        );
        let heap = heap as usize;
        assert_eq!(heap, last_heap, "{ctx}: {error:?}: the heap");
        assert_eq!(
            (budget, usage),
            (self.budget(heap), self.usage(heap)),
            "{ctx}: {error:?}: heap {heap}'s budget and usage"
        );
        assert!(
            no_room(usage, size, budget),
            "{ctx}: {error:?} within the budget"
        );
        assert_eq!(size, bytes, "{ctx}: {error:?}: its memory object");
    }

    /// A request in a custom pool (made first, up to three), which fails
    /// only without room for its last block.
    pub(super) fn pool_request(&mut self, step: u64) {
        if self.pools.len() < 3 && self.rng.below(2) == 0 {
            let memory_type = self.rng.below(self.layout.memory_types.len() as u64) as u32;
            let block_size = [0, 4 * MIB, 16 * MIB][self.rng.below(3) as usize];
            let desc = PoolDesc::new(memory_type).block_size(block_size);
            if let Ok(pool) = self.allocator.create_pool(&desc) {
                self.pools.push(pool);
                self.pool_shapes.push((memory_type, block_size));
            }
            return;
        }
        let index = self.rng.below(3) as usize;
        let Some(&pool) = self.pools.get(index) else {
            return;
        };
        let (pool_type, pool_block) = self.pool_shapes[index];
        let size = 1 + self.rng.below(2 * MIB);
        let requirements = vk::MemoryRequirements {
            size,
            alignment: 256,
            memory_type_bits: !0,
        };
        let mut request = Request::new(requirements, Usage::DEVICE_LOCAL, ResourceKind::Buffer);
        request.desc.pool = Some(pool);
        let within = self.rng.below(2) == 0;
        request.desc.within_budget = within;
        let own_before: Vec<u64> = (0..self.budget.len()).map(|h| self.own(h)).collect();
        let result = self.allocator.allocate(&request);
        self.log.push(format!(
            "{step}: {size} bytes in a pool, within budget {within}: {:?}",
            result.as_ref().map(Allocation::memory_type)
        ));
        match result {
            Ok(allocation) => {
                let heap = self.heap_of(allocation.memory_type());
                if within && self.own(heap) > own_before[heap] {
                    self.assert_within_budget(heap);
                }
                self.live.push(allocation);
            }
            // A pool's type was checked when it was made, and a
            // device-local request needs no host access: short of memory
            // is its only failure.
            Err(error) => {
                let heap = self.heap_of(pool_type);
                let room = self.room(heap, within);
                let lazy = self.layout.memory_types[pool_type as usize]
                    .props
                    .contains(MemoryPropertyFlags::LAZILY_ALLOCATED);
                // A lazily allocated type's memory is dedicated, of the
                // request's own size, in a pool too; else a pool's fixed
                // block, or the smallest of its ladder.
                let last_attempt = if lazy {
                    size
                } else if pool_block != 0 {
                    pool_block
                } else {
                    smallest_block(size)
                };
                self.assert_short_of_memory(error, within, heap, last_attempt);
                assert!(
                    room < last_attempt,
                    "{}: pool {error:?} for {size} bytes with {room} bytes of room",
                    self.ctx()
                );
            }
        }
    }

    fn assert_within_budget(&self, heap: usize) {
        assert!(
            self.usage(heap) <= self.budget(heap),
            "{}: a within-budget request took heap {heap} to {} bytes, past its budget of {}",
            self.ctx(),
            self.usage(heap),
            self.budget(heap)
        );
    }

    /// Every memory object made since `before` that left its heap over
    /// budget is of the request's own `size`, unless the request may only
    /// take a block (`never`).
    fn assert_past_budget_by_own_size(&self, before: &HashSet<u64>, size: u64, never: bool) {
        for memory in self.device.live_allocations() {
            let heap = memory.heap as usize;
            if before.contains(&memory.memory.as_raw()) || never {
                continue;
            }
            assert!(
                self.usage(heap) <= self.budget(heap) || memory.size == size,
                "{}: a {}-byte memory object of type {} took heap {heap} past its budget for a {size}-byte request",
                self.ctx(),
                memory.size,
                memory.memory_type
            );
        }
    }
}
