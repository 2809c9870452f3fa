//! The walk's allocations and frees: requests drawn at random, each result
//! checked against its request and everything counted; frees now or after
//! the frame; host access; `trim`. The requests' drawing is in
//! `allocations/drawn_requests.rs`.

use std::collections::HashSet;
use std::fmt::Debug;

use ash::vk::{self, Handle};
use vk_suballoc::device::fake::FakeCounters;
use vk_suballoc::device::{MemoryDeviceExt, MemoryPropertyFlags};
use vk_suballoc::report::{Stats, TypeStats};
use vk_suballoc::{Allocation, DedicatedPolicy, Error, Request, ResourceKind};

use super::{is_host_visible, is_non_coherent, Counted, Live, Place, Walk};

#[path = "allocations/drawn_requests.rs"]
mod drawn_requests;

impl Walk {
    pub(super) fn destroy_resource(&self, kind: ResourceKind, handle: u64) {
        // SAFETY: a fake resource of this device, created by the walk and
        // destroyed once.
        unsafe {
            match kind {
                ResourceKind::Buffer => self.device.destroy_buffer(vk::Buffer::from_raw(handle)),
                _ => self.device.destroy_image(vk::Image::from_raw(handle)),
            }
        }
    }

    pub(super) fn allocate(&mut self) {
        let (request, resource) = self.draw_request();
        let before = self.allocator.stats();
        // A live pool's figures; none for a stale or foreign one.
        let pool_before = request
            .desc
            .pool
            .and_then(|p| self.allocator.pool_stats(&p).ok());
        let counters = self.device.counters();
        // The memory objects an existing-memory-only request may land in.
        let existing: Option<HashSet<vk::DeviceMemory>> =
            request.desc.existing_memory_only.then(|| {
                let live = self.device.live_allocations();
                live.iter().map(|m| m.memory).collect()
            });
        let result = if self.rng.below(2) == 0 {
            self.allocator.allocate(&request)
        } else {
            self.allocator.allocate_mut(&request)
        };
        if let Some(existing) = &existing {
            self.check_existing_only(&request, &result, existing, &counters, &before);
        }
        let fired = self.faults_fired(&counters);
        match result {
            Ok(allocation) => self.accept(allocation, &request, resource),
            Err(error) => {
                self.check_driver_asked(error, &counters, &request);
                match (request.desc.pool, pool_before) {
                    (Some(pool), Some(pool_before)) => {
                        match error {
                            Error::PoolFull { .. } => self.pooled.full += 1,
                            Error::TooLargeForPool { .. } => self.pooled.too_large += 1,
                            _ => self.pooled.refused += 1,
                        }
                        let objects = before.memory_objects;
                        self.explain_in_pool(error, &request, pool, &pool_before, fired, objects);
                        // A request short of memory may have released the
                        // pool's kept empty block (but its `min_blocks`).
                        let pool_after = self.allocator.pool_stats(&pool);
                        let expected = match &pool_after {
                            Ok(after) => Ok(pool_unchanged_but_released_empty_blocks(
                                &pool_before,
                                after,
                            )),
                            Err(error) => Err(*error),
                        };
                        assert_eq!(
                            pool_after,
                            expected,
                            "{}: failed {request:?} ({error:?}) changed pool_stats() beyond empty blocks",
                            self.ctx()
                        );
                    }
                    _ => self.explain(error, &request, &before, fired),
                }
                let after = self.allocator.stats();
                assert_eq!(
                    after,
                    unchanged_but_released_empty_blocks(&before, &after),
                    "{}: failed {request:?} ({error:?}) changed stats() beyond empty blocks",
                    self.ctx()
                );
                assert_eq!(
                    self.device.live_allocations().len(),
                    after.memory_objects as usize
                );
                if let Some(handle) = resource {
                    self.destroy_resource(request.kind, handle);
                }
            }
        }
    }

    /// What an existing-memory-only request promises, whatever its
    /// outcome: no `vkAllocateMemory` or `vkMapMemory` call, no new memory
    /// object; and a success lies in a block that existed before it (so
    /// never in dedicated memory). Its failure is checked by `explain`.
    fn check_existing_only(
        &self,
        request: &Request<'_>,
        result: &Result<Allocation, Error>,
        existing: &HashSet<vk::DeviceMemory>,
        counters: &FakeCounters,
        before: &Stats,
    ) {
        let ctx = self.ctx();
        let now = self.device.counters();
        assert_eq!(
            (now.allocate_calls, now.allocations, now.maps),
            (counters.allocate_calls, counters.allocations, counters.maps),
            "{ctx}: {request:?} for existing memory only called the device: {result:?}"
        );
        let objects = before.memory_objects as usize;
        assert_eq!(
            (self.device.live_allocations().len(), existing.len()),
            (objects, objects),
            "{ctx}: {request:?} for existing memory only: {result:?}"
        );
        assert_eq!(
            self.allocator.stats().memory_objects,
            before.memory_objects,
            "{ctx}: {request:?} for existing memory only: {result:?}"
        );
        if let Ok(a) = result {
            assert!(
                !a.is_dedicated() && existing.contains(&a.memory()),
                "{ctx}: {a:?} for existing memory only, in memory that did not exist"
            );
        }
    }

    /// Checks a new allocation against its request and everything counted.
    pub(super) fn accept(
        &mut self,
        mut allocation: Allocation,
        request: &Request<'static>,
        resource: Option<u64>,
    ) {
        let ctx = self.ctx();
        let r = &request.requirements;
        let a = &allocation;
        assert_eq!(
            self.rejection(request),
            None,
            "{ctx}: {request:?} succeeded"
        );
        let t = a.memory_type();
        assert_eq!(a.is_in_custom_pool(), request.desc.pool.is_some(), "{ctx}");
        if let Some(pool) = request.desc.pool {
            self.pooled.allocations += 1;
            // Its pool's memory type, dedicated exactly when required.
            assert_eq!(t, pool.memory_type(), "{ctx}: {request:?}");
            let dedicated = self.pool_dedicated(t, request);
            assert_eq!(a.is_dedicated(), dedicated, "{ctx}: {request:?}");
        } else {
            let candidates = self.candidates(r.memory_type_bits, request.desc.usage, r.size);
            assert!(candidates.contains(&t), "{ctx}: type {t} for {request:?}");
        }
        assert_eq!(a.size(), r.size, "{ctx}");
        let props = self.layout.memory_types[t as usize].props;
        // Lazily allocated memory is always dedicated, as in VMA.
        // So is a resource of unknown kind where pages are not a power of two.
        let lazy = props.contains(MemoryPropertyFlags::LAZILY_ALLOCATED)
            || self.unknown_on_odd_pages(request);
        if request.driver_dedicated.required
            || request.desc.dedicated == DedicatedPolicy::Always
            || lazy
        {
            assert!(a.is_dedicated(), "{ctx}: {request:?} not dedicated");
        }
        if request.desc.dedicated == DedicatedPolicy::Never
            && !request.driver_dedicated.required
            && !lazy
        {
            assert!(!a.is_dedicated(), "{ctx}: {request:?} dedicated");
        }
        // The placement's alignment: the resource's, or `min_alignment`
        // when larger. A movable of the allocation carries it (below), but
        // not its pool's, which the allocator applies itself.
        let alignment = r.alignment.max(request.desc.min_alignment);
        if a.is_dedicated() {
            assert_eq!(a.offset(), 0, "{ctx}");
        } else {
            let placed = alignment.max(self.pool_min_alignment(request.desc.pool));
            self.check_placement(a, placed, request.kind, request);
        }
        let mapped = self.is_mapped(props, request.desc.usage);
        assert_eq!(a.mapped_ptr().is_some(), mapped, "{ctx}");
        assert!(self.allocator.owns(a), "{ctx}");
        let place = Place {
            memory: a.memory(),
            offset: a.offset(),
            kind: request.kind,
        };
        self.assert_disjoint(place, a.size(), "a new allocation");
        self.check_new_fill(&allocation, props);
        let tag = mapped.then(|| {
            self.next_tag = self.next_tag.wrapping_add(1).max(1);
            let bytes = self.allocator.mapped_slice_mut(&mut allocation).unwrap();
            let last = bytes.len() - 1;
            (bytes[0], bytes[last]) = (self.next_tag, self.next_tag);
            // Flushed, so that a later invalidate (which discards unflushed
            // host writes on non-coherent memory) keeps the tag.
            let size = allocation.size();
            self.allocator.flush(&allocation, 0..size).unwrap();
            self.next_tag
        });
        self.live.push(Live {
            allocation,
            requirements: vk::MemoryRequirements {
                alignment,
                ..request.requirements
            },
            kind: request.kind,
            name: request.desc.name,
            resource,
            tag,
            pool: request.desc.pool,
        });
    }

    /// With debug fills, a new allocation in a host-visible type reads
    /// `0xDC` (its first and last 4 KiB), as the host sees it and, the
    /// fill flushed in a non-coherent type, as the GPU does.
    pub(super) fn check_new_fill(&self, a: &Allocation, props: MemoryPropertyFlags) {
        if !self.config.debug_fill || !is_host_visible(props) {
            return;
        }
        let ctx = self.ctx();
        let size = a.size();
        let len = size.min(4096);
        for offset in [0, size - len] {
            // SAFETY: no slice over the fake memory is alive across the read.
            let gpu = unsafe {
                self.device
                    .read(a.memory(), a.offset() + offset, len as usize)
            };
            let gpu = gpu.unwrap_or_else(|| panic!("{ctx}: {a:?} not readable"));
            assert!(
                gpu.iter().all(|&b| b == 0xDC),
                "{ctx}: {a:?} not filled (GPU)"
            );
        }
        // Without a mapping (`Config::strict_host_access`), the GPU's view.
        let Ok(bytes) = self.allocator.mapped_slice(a) else {
            assert_eq!(a.mapped_ptr(), None, "{ctx}");
            return;
        };
        let len = len as usize;
        let ends = bytes[..len].iter().chain(&bytes[bytes.len() - len..]);
        assert!(ends.copied().all(|b| b == 0xDC), "{ctx}: {a:?} not filled");
    }

    /// Checks where `a`, of `kind` in a block, lies: at a multiple of
    /// `alignment`, of the non-coherent atom on non-coherent memory, and of
    /// `bufferImageGranularity` for an optimal image when pages are padded
    /// (in a custom pool, whenever the page is a power of two). `what`
    /// asked for it.
    pub(super) fn check_placement(
        &self,
        a: &Allocation,
        alignment: u64,
        kind: ResourceKind,
        what: &dyn Debug,
    ) {
        let ctx = self.ctx();
        assert_eq!(a.offset() % alignment, 0, "{ctx}: {what:?}");
        let props = self.layout.memory_types[a.memory_type() as usize].props;
        if is_non_coherent(props) {
            let atom = self.layout.non_coherent_atom_size;
            assert_eq!(a.offset() % atom, 0, "{ctx}: {what:?}");
        }
        let granularity = self.layout.buffer_image_granularity.max(1);
        let padded = granularity.is_power_of_two()
            && (granularity <= self.config.max_padded_granularity || a.is_in_custom_pool());
        // Unknown kinds take whole pages in every pool (dedicated memory
        // where the page is not a power of two).
        if (kind == ResourceKind::OptimalImage && padded)
            || (kind == ResourceKind::Unknown && granularity.is_power_of_two())
        {
            assert_eq!(
                a.offset() % granularity,
                0,
                "{ctx}: {what:?}: image off its page"
            );
        }
    }

    /// Queues `counted` in the current frame.
    pub(super) fn defer(&mut self, mut counted: Counted) {
        counted.deferred = true;
        self.current.freed.push(counted);
        self.current.items += 1;
    }

    /// Frees `live` after the current frame; its resource, if any, goes
    /// with its memory.
    pub(super) fn free_after_frame(&mut self, live: Live) {
        let counted = live.counted();
        let result = match (live.resource, live.kind) {
            (None, _) => self.allocator.free_after_frame(live.allocation),
            // SAFETY: the walk's resources come from the fake device and
            // only the allocator destroys them.
            (Some(h), ResourceKind::Buffer) => unsafe {
                self.allocator
                    .destroy_buffer_after_frame(vk::Buffer::from_raw(h), live.allocation)
            },
            // SAFETY: as above.
            (Some(h), _) => unsafe {
                self.allocator
                    .destroy_image_after_frame(vk::Image::from_raw(h), live.allocation)
            },
        };
        assert_eq!(result, Ok(()), "{}", self.ctx());
        self.defer(counted);
    }

    /// Frees a random live allocation: now (`free` or `free_mut`), or after
    /// the frame.
    pub(super) fn free(&mut self) {
        if self.live.is_empty() {
            return;
        }
        let index = self.rng.below(self.live.len() as u64) as usize;
        let live = self.live.swap_remove(index);
        if self.rng.below(3) > 0 {
            self.free_after_frame(live);
        } else {
            self.free_now(live);
        }
    }

    /// Frees `live` now, with `free` or `free_mut`, and its resource, if
    /// any; its type's figures drop by exactly its allocation.
    pub(super) fn free_now(&mut self, live: Live) {
        let counted = live.counted();
        let before = self.allocator.stats();
        let result = if self.rng.below(2) == 0 {
            // SAFETY: the fake device runs no GPU work.
            unsafe { self.allocator.free(live.allocation) }
        } else {
            // SAFETY: as above.
            unsafe { self.allocator.free_mut(live.allocation) }
        };
        assert_eq!(result, Ok(()), "{}", self.ctx());
        if let Some(handle) = live.resource {
            self.destroy_resource(live.kind, handle);
        }
        let t = counted.memory_type as usize;
        let (was, now) = (
            &before.memory_types[t],
            &self.allocator.stats().memory_types[t],
        );
        assert_eq!(now.allocations() + 1, was.allocations(), "{}", self.ctx());
        assert_eq!(
            now.live_bytes() + counted.size,
            was.live_bytes(),
            "{}",
            self.ctx()
        );
    }

    pub(super) fn host_access(&mut self) {
        if self.live.is_empty() {
            return;
        }
        let index = self.rng.below(self.live.len() as u64) as usize;
        let ctx = self.ctx();
        let live = &mut self.live[index];
        let a = &mut live.allocation;
        // Mapped as checked when it was made (or moved).
        let host = a.mapped_ptr().is_some();
        let size = a.size();
        let start = self.rng.below(size + 1);
        let mut end = start + self.rng.below(size - start + 1);
        if self.rng.below(20) == 0 {
            end = size + 1;
        }
        let access = if host {
            Ok(())
        } else {
            Err(Error::NotHostVisible)
        };
        let (result, expected) = match self.rng.below(3) {
            op @ (0 | 1) => {
                let expected = if end > size {
                    Err(Error::RangeOutOfBounds { start, end, size })
                } else {
                    access
                };
                let result = if op == 0 {
                    self.allocator.flush(a, start..end)
                } else {
                    self.allocator.invalidate(a, start..end)
                };
                (result, expected)
            }
            _ => {
                let result = self.allocator.mapped_slice(a).map(|bytes| {
                    assert_eq!(bytes.len() as u64, size);
                    let tag = live.tag.unwrap_or(0);
                    assert_eq!((bytes[0], bytes[bytes.len() - 1]), (tag, tag));
                });
                (result, access)
            }
        };
        assert_eq!(result, expected, "{ctx}: {a:?} {start}..{end}");
    }

    /// `trim` releases every empty block but the `min_blocks` of custom
    /// pools, and no allocation.
    pub(super) fn trim(&mut self) {
        let before = self.allocator.stats();
        let pools_before = self.pool_figures();
        let released = self.allocator.trim();
        let after = self.allocator.stats();
        let pools_after = self.pool_figures();
        let ctx = self.ctx();
        assert_eq!(
            before.reserved_bytes() - after.reserved_bytes(),
            released,
            "{ctx}"
        );
        let mut kept = vec![0; after.memory_types.len()];
        for ((p, was), now) in self.pools.iter().zip(&pools_before).zip(&pools_after) {
            let min = u64::from(p.min_blocks);
            assert!(
                now.blocks >= min && (now.empty_blocks == 0 || now.blocks == min),
                "{ctx}: pool {:?} (min_blocks {min}) after trim: {now:?}",
                p.pool
            );
            let releasable = was.empty_blocks.min(was.blocks.saturating_sub(min));
            assert_eq!(now.blocks, was.blocks - releasable, "{ctx}: {was:?}");
            assert_eq!(now.allocations(), was.allocations(), "{ctx}");
            kept[now.memory_type as usize] += now.empty_blocks;
        }
        let empty: Vec<u64> = after.memory_types.iter().map(|t| t.empty_blocks).collect();
        assert_eq!(empty, kept, "{ctx}: empty blocks after trim");
        assert_eq!(after.allocations(), before.allocations(), "{ctx}");
        assert_eq!(after.live_bytes(), before.live_bytes(), "{ctx}");
    }
}

/// `before`, one pool's figures, with the empty blocks that `after` no
/// longer has taken out: what a failed request leaves of a pool, whose
/// kept empty block a request short of memory may release.
fn pool_unchanged_but_released_empty_blocks(before: &TypeStats, after: &TypeStats) -> TypeStats {
    let mut expected = *before;
    let released = before.blocks.saturating_sub(after.blocks);
    if released > 0 && released <= before.empty_blocks {
        expected.blocks = after.blocks;
        expected.empty_blocks -= released;
        expected.block_bytes = after.block_bytes.min(before.block_bytes);
    }
    expected
}

/// `before`, but for the empty blocks `after` shows released: a request
/// short of memory releases the empty blocks each default pool keeps beyond
/// its largest (`Config::empty_block_reserve`) before it is tried again,
/// then, still short, the largest too, and may still fail. Nothing else
/// may change.
pub(super) fn unchanged_but_released_empty_blocks(before: &Stats, after: &Stats) -> Stats {
    let mut expected = before.clone();
    let mut released_objects = 0;
    for (e, a) in expected.memory_types.iter_mut().zip(&after.memory_types) {
        let released = e.blocks.saturating_sub(a.blocks);
        if released == 0 || released > e.empty_blocks {
            continue; // unchanged, or more than the empty blocks: left to differ
        }
        e.blocks = a.blocks;
        e.empty_blocks -= released;
        e.block_bytes = a.block_bytes.min(e.block_bytes);
        released_objects += released as u32;
    }
    for heap in &mut expected.heaps {
        let in_heap = expected.memory_types.iter().filter(|t| t.heap == heap.heap);
        let reserved: u64 = in_heap.map(|t| t.reserved_bytes()).sum();
        if reserved != heap.reserved_bytes {
            heap.reserved_bytes = reserved;
            heap.budget = after.heaps[heap.heap as usize].budget;
        }
    }
    expected.memory_objects -= released_objects;
    expected
}
