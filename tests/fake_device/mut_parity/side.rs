//! One side of the walk: an allocator over its own fake device, what the
//! walk holds of it, how it takes a [`Step`] and the snapshot of its state
//! compared after each step.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use ash::vk;
use vk_suballoc::device::fake::{FakeDevice, FakeLayout};
use vk_suballoc::device::{DedicatedHint, DedicatedTarget};
use vk_suballoc::{
    Allocation, AllocationDesc, Config, Pool, PoolDesc, Request, UploadRing, UploadRingDesc,
};

use super::Step;
use crate::walk_text::{low, normalise};
use crate::FakeAllocator;

/// One of the two allocators and what the walk holds of it.
pub(super) struct Side {
    pub(super) allocator: FakeAllocator,
    pub(super) device: FakeDevice,
    /// Through the `&mut self` twins.
    exclusive: bool,
    pub(super) live: Vec<Allocation>,
    pub(super) pools: Vec<Pool>,
    rings: Vec<UploadRing>,
    /// Where freed allocations lay: (memory, offset, size).
    freed: Vec<(vk::DeviceMemory, u64, u64)>,
    /// The memory events so far, normalised.
    pub(super) events: Arc<Mutex<Vec<String>>>,
    /// The number of the event the callback panics on (0: none).
    pub(super) panic_at: Arc<AtomicU64>,
    /// A fake buffer and image, dedicated targets of some requests.
    pub(super) targets: [u64; 2],
}

impl Side {
    pub(super) fn new(layout: &FakeLayout, config: &Config, exclusive: bool) -> Self {
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
    pub(super) fn take(&mut self, step: &Step) -> String {
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
                required,
                preferred,
                strategy,
            } => {
                let mut desc = AllocationDesc::new(usage)
                    .dedicated(dedicated)
                    .required_flags(required)
                    .preferred_flags(preferred)
                    .strategy(strategy);
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
    pub(super) fn finish(self) {
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
    pub(super) fn snapshot(&self) -> Vec<String> {
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
