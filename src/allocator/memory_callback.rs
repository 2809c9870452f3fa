//! The memory callback ([`Allocator::set_memory_callback`], VMA's
//! `pDeviceMemoryCallbacks`): a hook called on every `VkDeviceMemory` the
//! allocator makes or frees, for a profiler's GPU memory view or an
//! engine's own accounting. Its events and their delivery are the memory
//! layer's (`memory/events.rs`, `MemoryContext::tell`); this is the
//! setter, which replays the memory that exists to the callback it sets
//! (and to the one it replaces, as freed), so that every callback hears
//! each memory object made before it hears it freed. Apart from the facade
//! because its docs are the rules a callback must keep, run as it is
//! under a pool's lock (the allocator module's "Locks" says which).

use super::place::{exclusive, lock};
use super::pool::read;
use super::Allocator;
use crate::device::MemoryDeviceExt;
use crate::memory::events::{MemoryCallback, MemoryEvent, MemoryEventKind};
use crate::memory::first_panic::FirstPanic;
use crate::memory::type_pool::TypePool;

impl<D: MemoryDeviceExt<M>, M: Send> Allocator<D, M> {
    /// Calls `callback` on every `VkDeviceMemory` the allocator makes or
    /// frees from now on, blocks and dedicated memory alike (VMA's
    /// `pDeviceMemoryCallbacks`): for a profiler's GPU memory view (Tracy's
    /// `TracyAllocN` / `TracyFreeN` on the memory handle) or an engine's
    /// own accounting. Each `Allocated` event is followed by one `Freed`
    /// event for the same handle, at the latest when the allocator is
    /// dropped.
    ///
    /// The memory the allocator holds already is replayed to `callback`
    /// first, an `Allocated` event for each object (its blocks, then its
    /// dedicated memory, memory type by memory type, then custom pool by
    /// custom pool), with its debug name as the device has it now: so a
    /// callback set at any time hears of every object it will later hear
    /// freed. An earlier callback is replaced: it first gets a `Freed`
    /// event for each of those objects (their memory is not freed), so
    /// that its events balance too, and is dropped.
    ///
    /// The callback runs on the thread that made or freed the memory,
    /// while the allocator holds the lock of the memory's pool (and, in
    /// [`collect`](Self::collect), [`collect_idle`](Self::collect_idle) and
    /// [`wait_and_collect`](Self::wait_and_collect), the lock those calls
    /// carry out their frees under, which other threads' calls to them wait
    /// for), but none of the memory's heap (made memory is counted in the
    /// heap's usage before its `Allocated` event, freed memory taken out
    /// after its `Freed` one: other memory types of the heap make and free
    /// theirs meanwhile): it must not call into the allocator (it would
    /// deadlock on a lock its own thread holds; debug builds panic
    /// instead, with a message that says so; a call into another
    /// allocator is fine), must not wait for a lock of the
    /// application's that a thread calling into this allocator may hold
    /// (that thread may be waiting for a lock the callback's thread
    /// holds), and should be quick.
    ///
    /// A panic in the callback reaches the caller of the method that made
    /// or freed the memory, once that memory object is made and freed
    /// again (a `Freed` event follows the panicking `Allocated` one), or
    /// freed: no memory object, usage or object count is left behind, and
    /// the allocator carries on from every thread. [`collect`](Self::collect),
    /// [`collect_idle`](Self::collect_idle) and
    /// [`wait_and_collect`](Self::wait_and_collect) carry out the other
    /// frees they took out of the frame queue first, and the allocator's
    /// drop the other queued frees, upload-ring chunks and pools' memory
    /// (the panic is dropped when the drop runs while its thread unwinds
    /// already: a second panic would abort); [`create_pool`](Self::create_pool)
    /// frees the blocks it made before, and [`destroy_pool`](Self::destroy_pool)
    /// the pool's other blocks (the pool is gone, its slot free), and
    /// [`end_frame`](Self::end_frame) has sealed its frame. Other calls
    /// that were to make or free more objects stop at that one: the blocks
    /// they had not released stay in their pools. A logger (the `log`
    /// crate's) that panics on one of the allocator's lines leaves nothing
    /// behind either. A panic in the replay (of `callback`, or of the
    /// callback it replaces) reaches the caller of this method once the
    /// replay is over: each callback has heard of every object, `callback`
    /// is set, and the allocator carries on.
    ///
    /// ```
    /// # #[cfg(feature = "fake-device")] {
    /// use std::sync::atomic::{AtomicU64, Ordering};
    /// use std::sync::Arc;
    /// use vk_suballoc::device::fake::{FakeDevice, FakeLayout};
    /// use vk_suballoc::{Allocator, Config, MemoryEventKind, Request, ResourceKind, Usage};
    ///
    /// let mut allocator = Allocator::new(FakeDevice::new(FakeLayout::discrete()), Config::default())?;
    /// let reserved = Arc::new(AtomicU64::new(0));
    /// let counter = Arc::clone(&reserved);
    /// allocator.set_memory_callback(move |event| {
    ///     match event.kind {
    ///         MemoryEventKind::Allocated => counter.fetch_add(event.size, Ordering::Relaxed),
    ///         MemoryEventKind::Freed => counter.fetch_sub(event.size, Ordering::Relaxed),
    ///     };
    /// });
    /// let requirements = ash::vk::MemoryRequirements { size: 4096, alignment: 256, memory_type_bits: !0 };
    /// let vertices = allocator.allocate(&Request::new(requirements, Usage::DEVICE_LOCAL, ResourceKind::Buffer))?;
    /// assert_eq!(reserved.load(Ordering::Relaxed), allocator.stats().reserved_bytes());
    /// // SAFETY: the fake device runs no GPU work.
    /// unsafe { allocator.free(vertices)? };
    /// drop(allocator);
    /// assert_eq!(reserved.load(Ordering::Relaxed), 0);
    /// # }
    /// # Ok::<(), vk_suballoc::Error>(())
    /// ```
    ///
    /// # Time complexity
    /// A walk over every memory object, once for the callback replaced and
    /// once for `callback`; the allocation and free paths pay nothing.
    pub fn set_memory_callback(
        &mut self,
        callback: impl Fn(&MemoryEvent<'_>) + Send + Sync + 'static,
    ) {
        let mut panics = FirstPanic::default();
        self.tell_every_memory_object(MemoryEventKind::Freed, &mut panics);
        self.context
            .set_callback(MemoryCallback(Box::new(callback)));
        self.tell_every_memory_object(MemoryEventKind::Allocated, &mut panics);
        panics.resume();
    }

    /// Tells the callback, if any, of `kind` on every memory object the
    /// allocator holds (an `Allocated` event with the object's debug name,
    /// a `Freed` one without, as the events of memory made and freed
    /// have). A panic of the callback is kept in `panics` (the first), and
    /// the other objects are told of still. `&mut self`: no other thread
    /// makes or frees memory meanwhile, so the callback hears of each
    /// object once, and no event of another thread comes between.
    fn tell_every_memory_object(&mut self, kind: MemoryEventKind, panics: &mut FirstPanic) {
        let context = &self.context;
        let mut tell_pool = |pool: &TypePool<M>| {
            for (memory, size, name) in pool.memory_objects() {
                let name = (kind == MemoryEventKind::Allocated).then_some(&*name);
                panics.keep(context.tell(kind, memory, pool.memory_type(), size, name));
            }
        };
        for pool in self.pools.iter_mut() {
            tell_pool(exclusive(pool));
        }
        // The table's read guard goes before any pool's lock is taken (the
        // module's "Locks": never held with a pool's).
        let cells = read(&self.custom).snapshot();
        for (_, cell) in cells {
            let pool = lock(&cell);
            if !pool.is_destroyed() {
                tell_pool(&pool);
            }
        }
    }
}
