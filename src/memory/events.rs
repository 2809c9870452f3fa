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
    /// follows at once.) Also, as the callback is set, for each memory
    /// object that exists then
    /// ([`Allocator::set_memory_callback`](crate::Allocator::set_memory_callback)).
    Allocated,
    /// `vkFreeMemory` is about to be called: the handle is still valid
    /// during the callback, and never after. Also, as the callback is
    /// replaced, for each memory object that exists then, which stays
    /// valid: the callback hears of it no more.
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
    /// The debug name it was made with (`VK_EXT_debug_utils`): for
    /// dedicated memory the request's name, or, for a request without one,
    /// the name the allocator gives it (`vk-suballoc dedicated <type>/<n>`,
    /// with its custom pool's name in a custom pool, as its blocks); for a
    /// block, the block's debug name (with its custom pool's name). In the
    /// `Allocated` events of the replay as a callback is set, the name the
    /// memory has then, which for dedicated memory renamed since
    /// ([`Allocator::set_name`](crate::Allocator::set_name)) is the new one.
    /// Never `None` when made; `None` when freed. The whole string as
    /// given: the object name the device gets ends at its first NUL, if
    /// the name has one.
    pub name: Option<&'a str>,
}

/// The callback, boxed; `Debug` so that the allocator's context can be.
pub(crate) struct MemoryCallback(pub(crate) Box<dyn Fn(&MemoryEvent<'_>) + Send + Sync>);

impl fmt::Debug for MemoryCallback {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("MemoryCallback")
    }
}
