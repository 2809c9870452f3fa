//! One allocator of the walk of `entry_points.rs`: its fake device, the
//! allocations and pools the walk holds of it, how it makes a drawn
//! request, how it takes a [`Step`] (through `allocate` and `free`, or,
//! as the other side, through the entry point the step names) and the
//! snapshot of its state compared after each step.

use std::sync::{Arc, Mutex};

use ash::vk::{self, Handle, MemoryPropertyFlags};
use vk_suballoc::device::fake::{FakeDevice, FakeLayout};
use vk_suballoc::device::{DedicatedHint, DedicatedTarget};
use vk_suballoc::{
    Allocation, AllocationDesc, Config, DedicatedPolicy, Error, Pool, PoolDesc, Request,
};

use super::{FreeVia, Params, Step};
use crate::walk_text::{low, normalise};
use crate::FakeAllocator;

/// One allocator of the walk and what the walk holds of it.
pub(super) struct Side {
    pub(super) allocator: FakeAllocator,
    device: FakeDevice,
    live: Vec<Allocation>,
    pools: Vec<Pool>,
    dead_pools: Vec<Pool>,
    /// A pool of another allocator.
    foreign: Pool,
    events: Arc<Mutex<Vec<String>>>,
    /// A fake buffer and image, dedicated targets of some requests.
    targets: [u64; 2],
}

impl Side {
    pub(super) fn new(layout: &FakeLayout, config: &Config, foreign: Pool) -> Self {
        let device = FakeDevice::new(layout.clone());
        let mut allocator = FakeAllocator::new(device.clone(), *config).unwrap();
        let events = Arc::new(Mutex::new(Vec::new()));
        let seen = Arc::clone(&events);
        allocator.set_memory_callback(move |event| {
            seen.lock().unwrap().push(format!(
                "{:?} {} type {} size {}",
                event.kind,
                low(event.memory),
                event.memory_type,
                event.size
            ));
        });
        let targets = [device.create_resource(), device.create_resource()];
        Self {
            allocator,
            device,
            live: Vec::new(),
            pools: Vec::new(),
            dead_pools: Vec::new(),
            foreign,
            events,
            targets,
        }
    }

    fn request(&self, p: &Params) -> Request<'static> {
        let mut desc = AllocationDesc::new(p.usage).dedicated(p.dedicated);
        if p.named {
            desc = desc.name("entry points");
        }
        if p.within_budget {
            desc = desc.within_budget();
        }
        if p.existing_only {
            desc = desc.existing_memory_only();
        }
        if let Some(alignment) = p.min_alignment {
            desc = desc.min_alignment(alignment);
        }
        if let Some(bits) = p.desc_bits {
            desc = desc.memory_type_bits(bits);
        }
        if p.can_alias {
            desc = desc.can_alias();
        }
        if let Some(priority) = p.priority {
            desc = desc.priority(priority);
        }
        let pick = |pools: &[Pool], i: usize| pools.get(i % pools.len().max(1)).copied();
        let pool = match p.pool {
            (1, i) => pick(&self.pools, i),
            (2, i) => pick(&self.dead_pools, i),
            (3, _) => Some(self.foreign),
            _ => None,
        };
        if let Some(pool) = pool {
            desc = desc.pool(pool);
        }
        let requirements = vk::MemoryRequirements {
            size: p.size,
            alignment: p.alignment,
            memory_type_bits: p.bits,
        };
        let mut request =
            Request::with_desc(requirements, p.kind, desc).driver_dedicated(DedicatedHint {
                required: p.hint == 2,
                preferred: p.hint != 0,
            });
        if p.target != 0 {
            let raw = self.targets[usize::from(p.target - 1)];
            let target = if p.target == 1 {
                DedicatedTarget::Buffer(vk::Buffer::from_raw(raw))
            } else {
                DedicatedTarget::Image(vk::Image::from_raw(raw))
            };
            // SAFETY: a live resource of the side's fake device, destroyed
            // only after the allocator, and never bound.
            request = unsafe { request.dedicated_target(target) };
        }
        request
    }

    /// `allocate`'s answer to `p` on an allocator that keeps nothing: the
    /// probe's.
    pub(super) fn probe(&self, p: &Params) -> Result<(), Error> {
        let allocation = self.allocator.allocate(&self.request(p))?;
        // SAFETY: the fake device runs no GPU work.
        unsafe { self.allocator.free(allocation) }.unwrap();
        Ok(())
    }

    /// Whether `p`, a request for existing memory only that the probe
    /// refused with `NoRoomInExistingMemory`, needs dedicated memory
    /// wherever `allocate` may place it, so that no existing block could
    /// ever take it: by the caller's policy or the driver's requirement,
    /// in its custom pool's lazily allocated memory type, or, naming no
    /// pool, in every memory type it may take, each lazily allocated,
    /// unsuited to it, or one no block of could hold it (each asked alone).
    pub(super) fn needs_dedicated_memory(&self, p: &Params) -> bool {
        if p.dedicated == DedicatedPolicy::Always || p.hint == 2 {
            return true;
        }
        let flags = |t: u32| self.allocator.memory_type_properties(t);
        let lazily =
            |t: u32| flags(t).is_some_and(|f| f.contains(MemoryPropertyFlags::LAZILY_ALLOCATED));
        if let Some(pool) = self.request(p).desc.pool {
            return lazily(pool.memory_type());
        }
        let allowed = p.bits & p.desc_bits.unwrap_or(!0);
        (0..32u32)
            .filter(|&t| allowed & (1 << t) != 0 && flags(t).is_some())
            .all(|t| {
                let alone = Params {
                    bits: 1 << t,
                    desc_bits: None,
                    ..p.clone()
                };
                match self.probe(&alone) {
                    Err(Error::NoRoomInExistingMemory) => lazily(t),
                    Err(error) => matches!(
                        error,
                        Error::NoMemoryTypeBits(_)
                            | Error::NoSuitableMemoryType { .. }
                            | Error::DeviceAddressNotEnabled
                            | Error::SizeExceedsHeaps { .. }
                            | Error::SizeExceedsMaxAllocation { .. }
                    ),
                    Ok(()) => false,
                }
            })
    }

    fn keep(&mut self, result: Result<Allocation, Error>) -> String {
        match result {
            Ok(allocation) => {
                let shown = show(&allocation);
                self.live.push(allocation);
                shown
            }
            Err(error) => format!("{error:?}"),
        }
    }

    /// The batch `batch` as `allocate_many` is documented to place it,
    /// one request at a time; `bad` is the first bad request's error.
    fn batch_by_hand(&mut self, batch: &[Params], bad: Option<Error>) -> String {
        if let Some(error) = bad {
            return format!("{error:?}");
        }
        let mut made = Vec::new();
        for p in batch {
            match self.allocator.allocate(&self.request(p)) {
                Ok(allocation) => made.push(allocation),
                Err(error) => {
                    for allocation in made {
                        // SAFETY: the fake device runs no GPU work.
                        unsafe { self.allocator.free(allocation) }.unwrap();
                    }
                    return format!("{error:?}");
                }
            }
        }
        let shown: Vec<String> = made.iter().map(show).collect();
        self.live.extend(made);
        format!("{shown:?}")
    }

    /// Ends a frame on a fence signalled at once; `between`, after the
    /// frame is sealed, before `collect`.
    fn end_frame(&mut self, between: impl FnOnce(&mut Self) -> String) -> String {
        let fence = self.device.create_fence();
        // SAFETY: the fence is the fake device's, signalled at once.
        let ended = unsafe { self.allocator.end_frame(fence) };
        self.device.signal_fence(fence);
        let done = between(self);
        // What `collect` released differs (the other side's deferred
        // free): its frames only.
        let collected = self.allocator.collect().map(|c| c.frames);
        format!("{done} {ended:?} {collected:?}")
    }

    /// Takes `step`, the reference when `other` is `false`; returns what
    /// it gave. `bad`: for a batch, its first bad request's error.
    pub(super) fn take(&mut self, step: &Step, other: bool, bad: Option<Error>) -> String {
        match step {
            Step::Allocate(p, via_mut) => {
                let request = self.request(p);
                let result = match (other, via_mut) {
                    (false, _) => self.allocator.allocate(&request),
                    (true, true) => self.allocator.allocate_mut(&request),
                    (true, false) => self
                        .allocator
                        .allocate_many(&[request])
                        .map(|mut made| made.pop().unwrap()),
                };
                self.keep(result)
            }
            Step::Batch(batch) if other => {
                let requests: Vec<Request<'_>> = batch.iter().map(|p| self.request(p)).collect();
                match self.allocator.allocate_many(&requests) {
                    Ok(made) => {
                        let shown: Vec<String> = made.iter().map(show).collect();
                        self.live.extend(made);
                        format!("{shown:?}")
                    }
                    Err(error) => format!("{error:?}"),
                }
            }
            Step::Batch(batch) => self.batch_by_hand(batch, bad),
            &Step::Free(index, via) => {
                if self.live.is_empty() {
                    return "no live allocation".into();
                }
                let allocation = self.live.remove(index % self.live.len());
                let free = |allocator: &FakeAllocator, allocation| {
                    // SAFETY: the fake device runs no GPU work.
                    format!("{:?}", unsafe { allocator.free(allocation) })
                };
                match (other, via) {
                    (true, FreeVia::FreeMut) => {
                        // SAFETY: as `free`'s.
                        let freed = unsafe { self.allocator.free_mut(allocation) };
                        format!("{freed:?}")
                    }
                    (true, FreeVia::AfterFrame) => {
                        let freed = self.allocator.free_after_frame(allocation);
                        self.end_frame(|_| format!("{freed:?}"))
                    }
                    // The reference frees when `collect` would have: after
                    // the frame's end (which, before it, finds the heap
                    // with the allocation still in it).
                    (false, FreeVia::AfterFrame) => {
                        self.end_frame(|side| free(&side.allocator, allocation))
                    }
                    _ => free(&self.allocator, allocation),
                }
            }
            Step::FreeSeveral(indices) => {
                let mut taken = Vec::new();
                for &index in indices {
                    if !self.live.is_empty() {
                        taken.push(self.live.remove(index % self.live.len()));
                    }
                }
                if other {
                    let freed: Vec<_> = taken
                        .into_iter()
                        .map(|allocation| self.allocator.free_after_frame(allocation))
                        .collect();
                    self.end_frame(|_| format!("{freed:?}"))
                } else {
                    self.end_frame(|side| {
                        let freed: Vec<_> = taken
                            .into_iter()
                            // SAFETY: the fake device runs no GPU work.
                            .map(|allocation| unsafe { side.allocator.free(allocation) })
                            .collect();
                        format!("{freed:?}")
                    })
                }
            }
            Step::EndFrame => self.end_frame(|_| String::new()),
            Step::Trim => format!("{}", self.allocator.trim()),
            &Step::CreatePool {
                memory_type,
                block_size,
                min_blocks,
                max_blocks,
                min_alignment,
            } => {
                let mut desc = PoolDesc::new(memory_type)
                    .min_blocks(min_blocks)
                    .max_blocks(max_blocks)
                    .min_alignment(min_alignment);
                if block_size != 0 {
                    desc = desc.block_size(block_size);
                }
                let made = self.allocator.create_pool(&desc);
                self.pools.extend(made.as_ref().ok().copied());
                format!("{:?}", made.map(|_| ()))
            }
            &Step::DestroyPool(index) => {
                if self.pools.is_empty() {
                    return "no pool".into();
                }
                let pool = self.pools[index % self.pools.len()];
                let result = self.allocator.destroy_pool(pool);
                if result.is_ok() {
                    self.pools.retain(|p| *p != pool);
                    self.dead_pools.push(pool);
                }
                format!("{result:?}")
            }
            &Step::FailAllocation(nth, error) => {
                self.device.fail_allocation(nth, error);
                String::new()
            }
            &Step::CapHeap(heap, bytes) => {
                self.device.cap_heap(heap, bytes);
                String::new()
            }
            &Step::Budget(heap, budget) => {
                self.device.set_heap_budget(heap, budget, 0);
                String::new()
            }
        }
    }

    /// What the walk compares after each step.
    pub(super) fn snapshot(&self) -> Vec<String> {
        let pools: Vec<String> = self
            .pools
            .iter()
            .map(|pool| format!("{:?}", self.allocator.pool_stats(pool)))
            .collect();
        let mut objects: Vec<String> = self
            .device
            .live_allocations()
            .iter()
            .map(|m| {
                format!(
                    "{} {} type {} dedicated {} mapped {}",
                    low(m.memory),
                    m.size,
                    m.memory_type,
                    m.dedicated.is_some(),
                    m.mapped
                )
            })
            .collect();
        objects.sort();
        let c = self.device.counters();
        vec![
            format!("stats {:?}", self.allocator.stats()),
            normalise(&format!("map {:?}", self.allocator.memory_map())),
            format!("pools {pools:?}"),
            format!(
                "device: allocate calls {}, allocations {}, frees {}, maps {}, unmaps {}",
                c.allocate_calls, c.allocations, c.frees, c.maps, c.unmaps
            ),
            format!("objects {objects:?}"),
            format!("events {:?}", self.events.lock().unwrap()),
        ]
    }

    pub(super) fn finish(self) {
        drop(self.allocator);
        for target in self.targets {
            self.device.destroy_resource(target);
        }
        self.device.assert_clean();
    }
}

pub(super) fn show(a: &Allocation) -> String {
    format!(
        "memory {} at {}, {} bytes, type {}, dedicated {}, pool {}, mapped {}",
        low(a.memory()),
        a.offset(),
        a.size(),
        a.memory_type(),
        a.is_dedicated(),
        a.is_in_custom_pool(),
        a.mapped_ptr().is_some()
    )
}
