//! The errors the docs promise for a request: those of the checks before
//! placement (predicted exactly), those any request for memory may meet
//! on the device as the operation found it (the faults injected and met,
//! the device's limits), and the rest that `allocate`'s docs name for the
//! request's description.

use super::*;

impl Walk {
    /// Whether `error` is one the docs promise for `built`'s request, in
    /// a call that found the device as `before` says.
    pub(in super::super) fn allocate_error_ok(
        &self,
        error: Error,
        built: &Built,
        before: &Before,
    ) -> bool {
        if let Some(checked) = self.checks_error(built) {
            // The checks before placement answer alone, in the docs'
            // order, whatever the device's state.
            return error == checked;
        }
        let desc = &built.request.desc;
        let request_size = built.request.requirements.size;
        // The heaps the request may take memory in.
        let heaps = match desc.pool {
            Some(pool) => 1 << self.layout.memory_types[pool.memory_type() as usize].heap,
            None => {
                let types = built.allowed & self.suiting_types(desc.usage, request_size);
                (self.layout.memory_types.iter().enumerate())
                    .filter(|(t, _)| types & (1 << t) != 0)
                    .fold(0u64, |mask, (_, ty)| mask | 1 << ty.heap)
            }
        };
        let pool = self.pools.iter().find(|p| Some(p.pool) == desc.pool);
        match error {
            // Predicted by `checks_error` where it is the answer.
            Error::NoSuitableMemoryType { .. } => false,
            // For a size past the limit predicted by `checks_error`; else
            // only the size a block would place (the request, its margin,
            // rounded up to its alignment (at most `MAX_TAIL_ROUNDING`),
            // the atom or a granularity page: `pool_request.rs`) past it,
            // for a request that may take only a block (one naming a
            // custom pool, one that may not be dedicated, one for existing
            // memory only: `check_placeable`).
            Error::SizeExceedsMaxAllocation { size, max } => {
                let with_margin = request_size.saturating_add(self.config.debug_margin);
                let rounding = 4096
                    .max(self.layout.buffer_image_granularity)
                    .max(self.layout.non_coherent_atom_size);
                let block_only = desc.pool.is_some()
                    || desc.existing_memory_only
                    || (desc.dedicated == DedicatedPolicy::Never
                        && !built.request.driver_dedicated.required);
                max == self.layout.max_memory_allocation_size
                    && request_size <= max
                    && size > max
                    && size >= with_margin
                    && size - with_margin < rounding
                    && block_only
            }
            _ if self.memory_error_ok(&error, before) => true,
            // A memory object of at least the request's size, in a heap it
            // may take, past that heap's budget.
            Error::OverBudget {
                heap,
                size,
                usage,
                budget,
            } => {
                desc.within_budget
                    && heap < 64
                    && heaps & (1 << heap) != 0
                    && size >= request_size
                    && !matches!(usage.checked_add(size), Some(total) if total <= budget)
            }
            Error::NoRoomInExistingMemory => desc.existing_memory_only,
            // Only a pool of fixed blocks, for a request larger than one
            // (its size and margin, rounded as placed: the bytes the error
            // names), or a pool at its `max_blocks`, none with room.
            Error::TooLargeForPool { size, block_size } => pool.is_some_and(|p| {
                p.block_size != 0
                    && block_size == p.block_size
                    && size > block_size
                    && request_size.saturating_add(self.config.debug_margin) > block_size
            }),
            Error::PoolFull { max_blocks } => pool.is_some_and(|p| {
                let blocks = self.allocator.pool_stats(&p.pool).map(|s| s.blocks);
                p.max_blocks.map(u64::from) == Some(max_blocks) && blocks == Ok(max_blocks)
            }),
            // Memory a pool exports as D3D11 textures or D3D12 resources
            // is dedicated to a named resource, never a block.
            Error::NotExportable { handle_types } => pool.is_some_and(|p| {
                !handle_types.is_empty() && handle_types == p.export & DEDICATED_ONLY
            }),
            _ => false,
        }
    }

    /// The error of the checks `allocate` makes of `built`'s request
    /// before it places it (`place/candidates.rs`), in their order, when
    /// one fails: a request naming a custom pool, live or destroyed, gets
    /// `PoolTypeNotAllowed` (its bits refuse the pool's type), then
    /// `DeviceAddressNotEnabled`, `SizeExceedsHeaps` (the pool's heap),
    /// `NoSuitableMemoryType` (host access in a type the host cannot see,
    /// naming that type), `SizeExceedsMaxAllocation`, then `StalePool`
    /// for a destroyed one; a request naming none, `NoMemoryTypeBits`
    /// (no usable type allowed), `DeviceAddressNotEnabled`, then, when no
    /// allowed type that suits its usage has a heap of its size,
    /// `SizeExceedsHeaps` naming the largest heap of those types (when
    /// one suits) or of all the allowed ones, else `NoSuitableMemoryType`
    /// naming its bits; when one has, `SizeExceedsMaxAllocation` for a
    /// size past `maxMemoryAllocationSize`. (Flaws come before all:
    /// `Built::flaw`.)
    pub(in super::super) fn checks_error(&self, built: &Built) -> Option<Error> {
        let request = &built.request;
        let desc = &request.desc;
        let (size, usage) = (request.requirements.size, desc.usage);
        let type_bits = request.requirements.memory_type_bits & !desc.excluded_memory_types;
        let no_address =
            usage.contains(Usage::DEVICE_ADDRESS) && !self.layout.buffer_device_address;
        let heap_of = |t: usize| {
            let heap = self.layout.memory_types[t].heap as usize;
            self.layout.memory_heaps.get(heap).map_or(0, |h| h.size)
        };
        let max = self.layout.max_memory_allocation_size;
        if let Some(pool) = desc.pool {
            let t = pool.memory_type();
            let heap = heap_of(t as usize);
            let props = self.layout.memory_types[t as usize].props;
            return if type_bits & (1 << t) == 0 {
                Some(Error::PoolTypeNotAllowed {
                    memory_type: t,
                    memory_type_bits: type_bits,
                })
            } else if no_address {
                Some(Error::DeviceAddressNotEnabled)
            } else if size > heap {
                Some(Error::SizeExceedsHeaps {
                    size,
                    largest_heap: heap,
                })
            } else if usage.needs_host_access() && !props.contains(Props::HOST_VISIBLE) {
                Some(Error::NoSuitableMemoryType {
                    memory_type_bits: 1 << t,
                    usage,
                })
            } else if size > max {
                Some(Error::SizeExceedsMaxAllocation { size, max })
            } else if built.stale_pool {
                Some(Error::StalePool)
            } else {
                None
            };
        }
        let bits = built.allowed & self.usable_types();
        if bits == 0 {
            return Some(Error::NoMemoryTypeBits(type_bits));
        }
        if no_address {
            return Some(Error::DeviceAddressNotEnabled);
        }
        if bits & self.suiting_types(usage, size) != 0 {
            // A type holds it: then no memory object may be larger.
            return (size > max).then_some(Error::SizeExceedsMaxAllocation { size, max });
        }
        let largest = |types: u32| {
            (0..self.layout.memory_types.len())
                .filter(|t| types & (1 << t) != 0)
                .map(heap_of)
                .max()
        };
        Some(match largest(bits & self.suiting_types(usage, 0)) {
            Some(largest_heap) => Error::SizeExceedsHeaps { size, largest_heap },
            None => match largest(bits).unwrap_or(0) {
                largest_heap if size > largest_heap => {
                    Error::SizeExceedsHeaps { size, largest_heap }
                }
                _ => Error::NoSuitableMemoryType {
                    memory_type_bits: type_bits,
                    usage,
                },
            },
        })
    }

    /// The device as an operation about to run finds it.
    pub(in super::super) fn before(&self) -> Before {
        Before {
            counters: self.device.counters(),
            objects: self.device.live_allocations().len(),
        }
    }

    /// Whether an injected `vkAllocateMemory` fault of `error` was due at
    /// a call made since `before`.
    fn allocation_fault_met(&self, before: &Before, error: DeviceError) -> bool {
        let calls = before.counters.allocate_calls + 1..=self.device.counters().allocate_calls;
        self.injected.iter().any(|f| {
            matches!(*f, Injected::Allocate { at, error: e } if e == error && calls.contains(&at))
        })
    }

    /// Whether an injected `vkMapMemory` fault was due at a call made
    /// since `before`.
    fn map_fault_met(&self, before: &Before) -> bool {
        let maps = before.counters.maps + 1..=self.device.counters().maps;
        let due = |f: &Injected| matches!(*f, Injected::Map { at } if maps.contains(&at));
        self.injected.iter().any(due)
    }

    /// Whether `error` is one that any request for memory (or a block a
    /// custom pool makes) may meet, whatever it asked for, in a call that
    /// found the device as `before` says: no heap large enough (`size`
    /// past the heap `largest_heap` names, as `Config::heap_size_limits`
    /// limits it) or past `maxMemoryAllocationSize` (the device's), the
    /// device out of memory (`check_driver_asked`
    /// checks that the driver was asked), `maxMemoryAllocationCount`
    /// objects (the device's limit, reached by the objects there and
    /// those made since, or an injected `TOO_MANY_OBJECTS`), the host out
    /// of memory or a failed map (each only from a fault injected and due
    /// since: the fake device never fails otherwise), a lost device. Not
    /// `Error::Device`: the fake device answers other results only for a
    /// broken Vulkan rule. Not `Error::NoSuitableMemoryType` either: its
    /// callers predict it where it can occur (`checks_error`,
    /// `ring_no_suitable_type`).
    pub(in super::super) fn memory_error_ok(&self, error: &Error, before: &Before) -> bool {
        match *error {
            Error::SizeExceedsHeaps { size, largest_heap } => {
                size > largest_heap
                    && self
                        .layout
                        .memory_heaps
                        .iter()
                        .any(|h| h.size == largest_heap)
            }
            Error::SizeExceedsMaxAllocation { size, max } => {
                max == self.layout.max_memory_allocation_size && size > max
            }
            Error::OutOfDeviceMemory => true,
            Error::TooManyObjects(limit) => {
                let made = self.device.counters().allocations - before.counters.allocations;
                limit == self.layout.max_memory_allocation_count
                    && (before.objects as u64 + made >= u64::from(limit)
                        || self.allocation_fault_met(before, DeviceError::TooManyObjects))
            }
            Error::OutOfHostMemory => {
                self.allocation_fault_met(before, DeviceError::OutOfHostMemory)
            }
            Error::MapFailed => self.map_fault_met(before),
            Error::DeviceLost => self.lost,
            _ => false,
        }
    }
}
