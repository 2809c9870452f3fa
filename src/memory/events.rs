//! A callback on every `VkDeviceMemory` the allocator makes or frees
//! (VMA's `VmaDeviceMemoryCallbacks`), for profilers and an engine's own
//! memory tracking: [`Allocator::set_memory_callback`](crate::Allocator::set_memory_callback).

use std::fmt;

use ash::vk;

/// What happened to a memory object.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum MemoryEventKind {
    /// `vkAllocateMemory` succeeded. (When mapping the new memory then
    /// fails, or the callback panics on this event, a `Freed` event
    /// follows at once.)
    Allocated,
    /// `vkFreeMemory` is about to be called: the handle is still valid
    /// during the callback, and never after.
    Freed,
}

/// One `VkDeviceMemory` made or freed, as the callback sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MemoryEvent<'a> {
    /// Made or freed.
    pub kind: MemoryEventKind,
    /// The memory object.
    pub memory: vk::DeviceMemory,
    /// Its memory type.
    pub memory_type: u32,
    /// Its memory type's heap.
    pub heap: u32,
    /// Its size in bytes.
    pub size: u64,
    /// The name it was made with: the request's, for dedicated memory;
    /// the block's debug name (with its custom pool's name) for a block.
    /// `None` when freed.
    pub name: Option<&'a str>,
}

/// The callback, boxed; `Debug` so that the allocator's context can be.
pub(crate) struct MemoryCallback(pub(crate) Box<dyn Fn(&MemoryEvent<'_>) + Send + Sync>);

impl fmt::Debug for MemoryCallback {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("MemoryCallback")
    }
}

impl MemoryCallback {
    /// Calls the callback with `event`. In debug builds the thread is
    /// marked as inside the callback meanwhile, so that a call back into
    /// the allocator panics ([`assert_not_in_callback`]) instead of
    /// deadlocking on a lock its own thread holds.
    pub(crate) fn call(&self, event: &MemoryEvent<'_>) {
        #[cfg(debug_assertions)]
        let _inside = reentry::Inside::enter();
        (self.0)(event);
    }
}

/// Panics, in debug builds, when this thread is running the memory
/// callback: the allocator's lock helpers call it before they lock, since
/// the callback runs under the lock of the memory's pool (and sometimes
/// others), which the same thread would wait for forever. Release builds
/// check nothing.
#[inline]
pub(crate) fn assert_not_in_callback() {
    #[cfg(debug_assertions)]
    assert!(
        !reentry::inside(),
        "vk-suballoc: the memory callback (Allocator::set_memory_callback) called into \
         the allocator, which holds a lock for the call that runs it: it would deadlock"
    );
}

/// The debug builds' record of which threads are running the callback.
#[cfg(debug_assertions)]
mod reentry {
    use std::cell::Cell;

    thread_local! {
        static INSIDE: Cell<bool> = const { Cell::new(false) };
    }

    /// Whether this thread is running the memory callback.
    pub(super) fn inside() -> bool {
        INSIDE.with(Cell::get)
    }

    /// Marks the thread as inside the callback until dropped, also when
    /// the callback panics (the allocator catches that and carries on).
    pub(super) struct Inside(bool);

    impl Inside {
        pub(super) fn enter() -> Self {
            Self(INSIDE.with(|inside| inside.replace(true)))
        }
    }

    impl Drop for Inside {
        fn drop(&mut self) {
            INSIDE.with(|inside| inside.set(self.0));
        }
    }
}
