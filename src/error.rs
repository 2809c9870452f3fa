//! The allocator's error type.

use crate::device::DeviceError;
use crate::memory::Usage;

/// What went wrong in an [`Allocator`](crate::Allocator) call. Each variant
/// says what the caller can do; after any error the allocator is consistent
/// and nothing has leaked.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A size of zero was requested. Every Vulkan resource has a non-zero size;
    /// check the `VkMemoryRequirements` you passed.
    #[error("allocation size must not be zero")]
    ZeroSize,
    /// The alignment is not a power of two (Vulkan's always are; for
    /// [`Allocator::ring_allocate`](crate::Allocator::ring_allocate), its
    /// `align`), or
    /// [`AllocationDesc::min_alignment`](crate::AllocationDesc::min_alignment)
    /// (or, from [`Allocator::create_pool`](crate::Allocator::create_pool),
    /// [`PoolDesc::min_alignment`](crate::PoolDesc::min_alignment)) is
    /// neither a power of two nor 0.
    #[error("alignment {0} is not a power of two")]
    AlignmentNotPowerOfTwo(u64),
    /// `memoryTypeBits` is 0, or names no memory type of this device that the
    /// allocator may use: AMD's device-coherent types need the device's
    /// `deviceCoherentMemory` feature, enabled and reported through
    /// [`DeviceFeatures::amd_device_coherent_memory`](crate::device::DeviceFeatures::amd_device_coherent_memory),
    /// and protected types its `protectedMemory` feature
    /// ([`DeviceFeatures::protected_memory`](crate::device::DeviceFeatures::protected_memory);
    /// even then, only a custom pool of one uses them).
    #[error("memoryTypeBits {0:#x} names no memory type of this device the allocator may use")]
    NoMemoryTypeBits(u32),
    /// No memory type the request may take has every flag of
    /// [`AllocationDesc::required_flags`](crate::AllocationDesc::required_flags):
    /// none of the types `memory_type_bits` names (the resource's
    /// `memoryTypeBits` less the types the description rules out and those
    /// the allocator may not use; for a request naming a custom pool, the
    /// pool's type alone). [`Allocator::memory_type_properties`](crate::Allocator::memory_type_properties)
    /// lists each type's flags; require fewer, or prefer them
    /// ([`AllocationDesc::preferred_flags`](crate::AllocationDesc::preferred_flags)).
    #[error("no memory type in {memory_type_bits:#x} has every required flag ({required:?})")]
    MissingRequiredFlags {
        /// The memory types the request could otherwise take, one bit per
        /// type index.
        memory_type_bits: u32,
        /// The flags required.
        required: ash::vk::MemoryPropertyFlags,
    },
    /// No memory type allowed by `memoryTypeBits` has the properties the usage
    /// needs (host access needs `HOST_VISIBLE`). Pick another usage or
    /// resource layout. With
    /// [`AllocationDesc::required_flags`](crate::AllocationDesc::required_flags),
    /// also when types with those flags exist but none of them suits the
    /// usage (`READBACK` requiring `DEVICE_LOCAL` where no device-local type
    /// is host-visible; `PROTECTED`, which only a custom pool takes;
    /// `LAZILY_ALLOCATED` without [`Usage::TRANSIENT`](crate::Usage::TRANSIENT)):
    /// `memory_type_bits` then names the types with the required flags
    /// (those the request could take, none of which suits the usage).
    /// [`Usage::DEVICE_ADDRESS`](crate::Usage::DEVICE_ADDRESS)
    /// never causes it: it restricts no memory type, and without buffer
    /// device address such a request gets
    /// [`DeviceAddressNotEnabled`](Self::DeviceAddressNotEnabled) first.
    #[error(
        "no memory type in {memory_type_bits:#x} suits {usage:?}{}",
        what_the_usage_needs(*.usage)
    )]
    NoSuitableMemoryType {
        /// The resource's `memoryTypeBits`, less the types the description
        /// rules out; with required flags, only the usable types that have
        /// them; for a custom pool's request, the pool's type.
        memory_type_bits: u32,
        /// The requested usage.
        usage: Usage,
    },
    /// The request asks for device addresses ([`Usage::DEVICE_ADDRESS`](crate::Usage::DEVICE_ADDRESS),
    /// which a buffer's `SHADER_DEVICE_ADDRESS` usage adds), and the
    /// allocator was not told of buffer device address: its memory would
    /// lack `VK_MEMORY_ALLOCATE_DEVICE_ADDRESS_BIT`
    /// (VUID-vkBindBufferMemory-bufferDeviceAddress-03339). Enable the
    /// device's `bufferDeviceAddress` feature (Vulkan 1.2, or
    /// `VK_KHR_buffer_device_address`) and set
    /// [`DeviceFeatures::buffer_device_address`](crate::device::DeviceFeatures::buffer_device_address),
    /// or drop the usage. Checked before the memory types are ranked, so
    /// it comes whatever the types `memoryTypeBits` allows suit; but after
    /// [`NoMemoryTypeBits`](Self::NoMemoryTypeBits) (or, in a custom pool,
    /// [`PoolTypeNotAllowed`](Self::PoolTypeNotAllowed)) and
    /// [`MissingRequiredFlags`](Self::MissingRequiredFlags), which a
    /// request allowing no type, or none with its required flags, gets
    /// first.
    #[error(
        "DEVICE_ADDRESS (a buffer's SHADER_DEVICE_ADDRESS usage) needs bufferDeviceAddress \
         enabled on the device and DeviceFeatures::buffer_device_address set"
    )]
    DeviceAddressNotEnabled,
    /// The request is larger than every heap it could live in: it can never
    /// succeed on this device.
    ///
    /// Or the request may only be placed in a block (it names a custom
    /// pool, or has [`DedicatedPolicy::Never`](crate::DedicatedPolicy::Never))
    /// and takes more in one than its memory type's heap holds: its size
    /// plus [`Config::debug_margin`](crate::Config::debug_margin), rounded
    /// up to its alignment (up to 4096 bytes), `nonCoherentAtomSize` or
    /// granularity page, where the heap's size is no multiple of that.
    /// `size` and `largest_heap` are then those bytes and that heap (of
    /// the last memory type tried). No block can ever hold it, so no
    /// memory was released for it: allow it dedicated memory (in a custom
    /// pool, [`DedicatedPolicy::Always`](crate::DedicatedPolicy::Always)).
    #[error("{size} bytes exceed every heap the resource can use (largest {largest_heap})")]
    SizeExceedsHeaps {
        /// Requested size (for a request that may only be placed in a
        /// block, the bytes it takes in one).
        size: u64,
        /// The largest heap among the allowed memory types that suit the
        /// usage, or, when none does, among all the allowed ones (for an
        /// upload ring's chunk refused before its buffer is made, the
        /// device's largest heap); a heap's size as
        /// [`Config::heap_size_limits`](crate::Config::heap_size_limits)
        /// limits it.
        largest_heap: u64,
    },
    /// The request is larger than the device's `maxMemoryAllocationSize`:
    /// no `VkDeviceMemory` of this device can hold it (drivers refuse, or may
    /// refuse, larger allocations). Split the resource.
    ///
    /// Or the request may only be placed in a block and the bytes it takes
    /// in one (as for [`SizeExceedsHeaps`](Self::SizeExceedsHeaps)) are
    /// more than that: `size` is then those bytes. No memory was released
    /// for it: allow it dedicated memory.
    #[error("{size} bytes exceed maxMemoryAllocationSize ({max})")]
    SizeExceedsMaxAllocation {
        /// Requested size (for a request that may only be placed in a
        /// block, the bytes it takes in one).
        size: u64,
        /// The device's `maxMemoryAllocationSize`.
        max: u64,
    },
    /// An upload ring's chunk, or a buffer given to
    /// [`create_buffer`](crate::Allocator::create_buffer) or
    /// [`create_aliasing_buffer`](crate::Allocator::create_aliasing_buffer),
    /// is larger than the device's `maxBufferSize`
    /// (`VkPhysicalDeviceMaintenance4Properties`): no `VkBuffer` of this
    /// device may be that large (VUID-VkBufferCreateInfo-size-06409), so
    /// nothing was created. Make the ring smaller (a growing ring adds
    /// chunks of its size), ask a growing ring for less at once, or split
    /// the buffer.
    #[error("{size} bytes exceed maxBufferSize ({max})")]
    SizeExceedsMaxBuffer {
        /// The chunk's or buffer's size.
        size: u64,
        /// The device's `maxBufferSize`.
        max: u64,
    },
    /// The driver requires dedicated memory for the resource
    /// (`VkMemoryDedicatedRequirements::requiresDedicatedAllocation`), and the
    /// request names no [`dedicated_target`](crate::Request::dedicated_target):
    /// memory made without `VkMemoryDedicatedAllocateInfo` could never be
    /// bound to it (VUID-vkBindBufferMemory-buffer-01444,
    /// VUID-vkBindImageMemory-image-01445). Name the buffer or image.
    #[error("the driver requires dedicated memory, and the request names no dedicated target")]
    MissingDedicatedTarget,
    /// The request's [`dedicated_target`](crate::Request::dedicated_target)
    /// is a buffer and its [`kind`](crate::Request::kind) an image, or the
    /// target an image and the kind [`ResourceKind::Buffer`](crate::ResourceKind::Buffer):
    /// the kind places the memory for `bufferImageGranularity`, so one of
    /// the two is wrong. Say the resource's kind, or
    /// [`ResourceKind::Unknown`](crate::ResourceKind::Unknown).
    ///
    /// Or the request's `requirements.size` changed after the target was
    /// set: dedicated memory takes that size, which must be the target's
    /// (VUID-VkMemoryDedicatedAllocateInfo-buffer-02965, -image-02964).
    /// Set the target last.
    #[error(
        "the request's dedicated target and its resource kind (buffer against image) or size disagree"
    )]
    DedicatedTargetMismatch,
    /// Every allowed memory type is out of device memory, or its heap holds
    /// as much of this allocator's memory as
    /// [`Config::heap_size_limits`](crate::Config::heap_size_limits) allows
    /// (refused without asking the driver). Free memory and
    /// retry: memory this allocator frees in a heap is asked for again at
    /// once; memory other processes free serves the least a request can
    /// take at once, every size after the next
    /// [`end_frame`](crate::Allocator::end_frame) (a heap remembers what
    /// its driver refused until then: the crate docs, "How it is built").
    /// The empty blocks kept in the failing heap (by the default pools,
    /// and by custom pools beyond their `min_blocks`) were released before
    /// this error.
    ///
    /// From the create-and-bind helpers
    /// ([`create_buffer`](crate::Allocator::create_buffer),
    /// [`create_image`](crate::Allocator::create_image), the aliasing
    /// ones) and an upload ring's new chunk, also the driver's
    /// `VK_ERROR_OUT_OF_DEVICE_MEMORY` from `vkCreateBuffer`,
    /// `vkCreateImage` or the bind: the resource was destroyed and the
    /// memory allocated for it freed (a block made for it stays, empty, as
    /// any), and no memory type was tried after it nor empty block
    /// released for it; the next call tries again as if it had not
    /// happened. From the memory-type queries that make their resource
    /// to read its requirements
    /// ([`memory_type_for_buffer`](crate::Allocator::memory_type_for_buffer),
    /// [`memory_type_for_image`](crate::Allocator::memory_type_for_image)
    /// without maintenance4), that resource's `vkCreateBuffer` or
    /// `vkCreateImage` refused: nothing was made or allocated.
    #[error("out of device memory")]
    OutOfDeviceMemory,
    /// A request for existing memory only
    /// ([`AllocationDesc::existing_memory_only`](crate::AllocationDesc::existing_memory_only))
    /// found no room in the blocks of any suitable memory type, or needs
    /// dedicated memory. Nothing was allocated; retry without the flag
    /// when a new memory object is acceptable.
    #[error("no room in existing memory, and the request may not allocate more")]
    NoRoomInExistingMemory,
    /// The driver ran out of host memory, or the host could not allocate a
    /// new block's slot table ([`Config::initial_block_slots`](crate::Config::initial_block_slots)
    /// slots of 32 bytes: lower it).
    ///
    /// From a new memory object's `vkAllocateMemory`, or a new block's
    /// `vkMapMemory` (the block is freed then), no other memory object is
    /// asked for, but existing blocks of the memory types still to try
    /// may take the request. From the create-and-bind helpers and an
    /// upload ring's new chunk, also the driver's
    /// `VK_ERROR_OUT_OF_HOST_MEMORY` from `vkCreateBuffer`,
    /// `vkCreateImage` or the bind, cleaned up as
    /// [`OutOfDeviceMemory`](Self::OutOfDeviceMemory) says.
    #[error("out of host memory")]
    OutOfHostMemory,
    /// `maxMemoryAllocationCount` `VkDeviceMemory` objects exist (the
    /// allocator's count, or the driver's `VK_ERROR_TOO_MANY_OBJECTS` from
    /// `vkAllocateMemory`); the payload is that limit. Free dedicated
    /// allocations or raise the block size. The driver's
    /// `VK_ERROR_TOO_MANY_OBJECTS` from another call is
    /// [`Device`](Self::Device)`(`[`DeviceError::TooManyObjects`]`)`.
    #[error("maxMemoryAllocationCount ({0}) memory objects exist")]
    TooManyObjects(u32),
    /// The request would exceed a heap's budget and within-budget allocation
    /// was asked for. Free memory, or allow over-budget allocation. Where
    /// the request could go to several memory types, the figures are
    /// those of the last one refused.
    #[error("heap {heap} budget exceeded: {usage} + {size} > {budget}")]
    OverBudget {
        /// Heap index.
        heap: u32,
        /// Bytes of the `VkDeviceMemory` the budget refused: a new block's
        /// (at least the request's size, often more), or the dedicated
        /// allocation's.
        size: u64,
        /// The heap's usage.
        usage: u64,
        /// The heap's budget.
        budget: u64,
    },
    /// The allocation (or ring allocation, from
    /// [`Allocator::ring_write`](crate::Allocator::ring_write) and
    /// [`Allocator::ring_flush`](crate::Allocator::ring_flush)) is not in
    /// host-visible memory, so it has no pointer. Use an `UPLOAD` or
    /// `READBACK` usage for memory the host touches; with
    /// `UPLOAD | ALLOW_TRANSFER_INSTEAD`, no pointer means "upload through a
    /// staging buffer".
    #[error("allocation is not host-visible")]
    NotHostVisible,
    /// Mapping the memory failed (`VK_ERROR_MEMORY_MAP_FAILED`); or, from
    /// [`Allocator::mapped_slice`](crate::Allocator::mapped_slice), its
    /// `_mut` twin and the copies, the allocation is larger than a slice
    /// may be, `isize::MAX` bytes (more than 2 GiB, on 32-bit hosts).
    #[error("vkMapMemory failed")]
    MapFailed,
    /// A byte range reaches past the end of the allocation, or is
    /// reversed.
    #[error("range {start}..{end} exceeds the allocation's {size} bytes")]
    RangeOutOfBounds {
        /// Range start.
        start: u64,
        /// Range end.
        end: u64,
        /// Allocation size.
        size: u64,
    },
    /// The allocation (or upload ring, or defragmentation move) was made
    /// by another allocator; nothing changed.
    #[error("allocation belongs to another allocator")]
    ForeignAllocation,
    /// The allocation is not live in this allocator (already freed), the
    /// upload ring was destroyed, or the ring allocation's frame was
    /// collected (its bytes belong to later frames); nothing changed.
    #[error("allocation, upload ring or ring allocation is not live (freed, destroyed, or its frame collected)")]
    StaleAllocation,
    /// The device was lost (`VK_ERROR_DEVICE_LOST`). Stop submitting;
    /// once `vkDeviceWaitIdle` has returned (this error included),
    /// [`Allocator::collect_idle`](crate::Allocator::collect_idle) releases
    /// the frames that will now never complete, and dropping the allocator
    /// still frees everything.
    #[error("device lost")]
    DeviceLost,
    /// An upload ring has no room: frames in flight hold it. Collect finished
    /// frames, or make the ring larger or growing.
    #[error("upload ring full: {size} bytes requested, {free} free")]
    UploadRingFull {
        /// Requested size.
        size: u64,
        /// Free bytes in the ring (which does not grow: a growing ring adds
        /// a chunk instead).
        free: u64,
    },
    /// A request larger than an upload ring that does not grow: no collect
    /// can make room for it. Make the ring larger, or growing.
    #[error("upload ring too small: {size} bytes requested, the ring holds {capacity}")]
    UploadRingTooSmall {
        /// Requested size.
        size: u64,
        /// The ring's size in bytes.
        capacity: u64,
    },
    /// An upload ring cannot track another sealed frame (it tracks 64):
    /// `collect` has not been called for that many frames, or has released
    /// none of them because the oldest one's signal has not been reached
    /// (after a lost device, where `collect` fails with
    /// [`DeviceLost`](Self::DeviceLost), it never will), or a `ring_write`
    /// on another thread has been copying into the ring for as many (a
    /// collected frame's ring space waits for its write), or a `collect` on
    /// another thread has been polling a fence for as many (a slow driver
    /// call: the frames sealed meanwhile are the next `collect`'s). Call
    /// `collect` every frame; after a loss, once `vkDeviceWaitIdle` has
    /// returned, [`Allocator::collect_idle`](crate::Allocator::collect_idle)
    /// releases every frame, and frames seal again.
    #[error("too many frames in flight; call collect")]
    TooManyFramesInFlight,
    /// Waiting for a frame timed out.
    #[error("timed out waiting for a frame")]
    Timeout,
    /// A frame was sealed with a null fence or semaphore, or with a
    /// timeline value of 0 (which the semaphore has reached from its
    /// creation: no submission signals it).
    #[error("a frame must be sealed with a non-null fence, or a non-null timeline semaphore and a value above 0")]
    NullFrameSignal,
    /// A frame was sealed with a timeline value at or below the one a frame
    /// still in flight waits for on the same semaphore. A timeline
    /// semaphore's value only rises, so it reaches such a value no later
    /// than the earlier frame's: no submission after that frame's can
    /// signal it, the frame would count as done while its own work may
    /// still run, and its frees be released under the GPU. Nothing was
    /// sealed: seal each frame with the value its own last submission
    /// signals.
    #[error("timeline value {value} is not above {in_flight}, which an earlier frame in flight waits for on the same semaphore")]
    TimelineValueNotAbove {
        /// The value the frame was to be sealed with.
        value: u64,
        /// The highest value a frame in flight waits for on the semaphore.
        in_flight: u64,
    },
    /// A figure of a [`Config`](crate::Config), a
    /// [`PoolDesc`](crate::PoolDesc) or an
    /// [`UploadRingDesc`](crate::UploadRingDesc) is out of range or not
    /// allowed there; the text names it.
    #[error("invalid configuration: {0}")]
    InvalidConfig(&'static str),
    /// A resource the create-and-bind helpers cannot bind with one
    /// `vkBind*Memory` call of one range (sparse or disjoint ones), an
    /// alias that needs memory allocated for capture and replay, which the
    /// allocator never makes, an image for Android hardware buffers or
    /// QNX screen buffers, whose memory is imported, or one to be bound to
    /// a swapchain's memory; the text names the flag or structure. Nothing
    /// was created.
    #[error("unsupported resource: {0}")]
    UnsupportedResource(&'static str),
    /// The device reports a property this allocator cannot work with; the
    /// text names it. No Vulkan driver we know of does, but a
    /// `maxMemoryAllocationSize` of 0 (whose text names this cause) is what
    /// an [`AshMemoryDevice`](crate::device::AshMemoryDevice) read over an
    /// instance made for Vulkan 1.0 (`VkApplicationInfo::apiVersion` left
    /// at its default, 0, which means 1.0), against the safety contract of
    /// `AshMemoryDevice::new`: the loader (1.3.239, with lavapipe) answered
    /// `vkGetPhysicalDeviceProperties2` by emulation and ignored the 1.1
    /// structure chained for that limit (the validation layer reports
    /// `UNASSIGNED-API-Version-Violation`). Create the instance with
    /// `apiVersion` 1.1 or later.
    #[error("unsupported device: {0}")]
    UnsupportedDevice(&'static str),
    /// This process has made 2^32 - 2 allocators, as many as allocations can
    /// tell apart: a handle of a dropped allocator would pass for a new
    /// one's. Keep allocators alive instead of making new ones.
    #[error("too many allocators made in this process")]
    TooManyAllocators,
    /// A custom pool holds `max_blocks` blocks, none with room for the
    /// request: free some of its allocations (a free through the frame
    /// queue makes room only once its frame is collected), or use a larger
    /// pool. When the pool's free bytes would hold the request but no free
    /// range does (its blocks are full of holes:
    /// [`Allocator::memory_map`](crate::Allocator::memory_map) shows them),
    /// a defragmentation plan with
    /// [`DefragmentationLimits::compact_blocks`](crate::DefragmentationLimits::compact_blocks)
    /// joins them.
    #[error("custom pool full: its {max_blocks} blocks have no room for the request")]
    PoolFull {
        /// The pool's `max_blocks`.
        max_blocks: u64,
    },
    /// A request larger than a custom pool's fixed block size: no block of
    /// the pool can hold it.
    #[error("{size} bytes do not fit the custom pool's {block_size}-byte blocks")]
    TooLargeForPool {
        /// The bytes the request takes in a block (its size plus
        /// [`Config::debug_margin`](crate::Config::debug_margin), rounded
        /// up to its alignment or to 4 KiB, whichever is less, or to its granularity
        /// page; unrounded, they are more than a block too).
        size: u64,
        /// The pool's block size.
        block_size: u64,
    },
    /// The request's `memoryTypeBits` exclude the memory type of the
    /// custom pool it names.
    #[error(
        "memoryTypeBits {memory_type_bits:#x} exclude the custom pool's memory type {memory_type}"
    )]
    PoolTypeNotAllowed {
        /// The pool's memory type.
        memory_type: u32,
        /// The request's `memoryTypeBits`.
        memory_type_bits: u32,
    },
    /// A custom pool still holds allocations, frees waiting for their frame
    /// included: free them, and release the queued ones (seal the frame
    /// with `end_frame`, then `wait_and_collect`, or `collect_idle` after
    /// `vkDeviceWaitIdle`) before destroying it. Nothing changed.
    #[error("custom pool still holds {allocations} allocations")]
    PoolNotEmpty {
        /// Its allocations, those whose frees wait for their frame
        /// included.
        allocations: u64,
    },
    /// A custom pool's [`PoolDesc::export`](crate::PoolDesc::export) names
    /// handle types its memory cannot be exported as: bits that are no
    /// handle type Vulkan defines (as ash 0.38 knows them;
    /// VUID-VkExportMemoryAllocateInfo-handleTypes-parameter), host
    /// pointers and QNX Screen buffers, which are import-only, or types
    /// the backend reports the
    /// device cannot export ([`MemoryProperties::exportable_handle_types`](crate::device::MemoryProperties::exportable_handle_types)).
    /// No pool was made: export only the supported types (what
    /// `vkGetPhysicalDeviceExternalBufferProperties` reports `EXPORTABLE`).
    ///
    /// Or a request of a pool exporting Android hardware buffers needs
    /// memory dedicated to an image (`ANDROID_HARDWARE_BUFFER_BIT_ANDROID`
    /// is then `handle_types`): the driver sizes such memory itself
    /// (`allocationSize` 0, VUID-VkMemoryAllocateInfo-pNext-01874), and the
    /// allocator cannot count or map memory of a size it does not know.
    /// Nothing was allocated: allocate that image's memory yourself.
    ///
    /// Or a pool exporting D3D11 textures or D3D12 resources (those types
    /// are then `handle_types`) was asked for memory not dedicated to a
    /// named image or buffer: a block (`min_blocks` at
    /// [`Allocator::create_pool`](crate::Allocator::create_pool), or a
    /// request not dedicated), or dedicated memory for no one resource.
    /// Vulkan requires every driver to report `DEDICATED_ONLY` for these
    /// types, so such memory must name its resource
    /// (VUID-VkMemoryAllocateInfo-pNext-00639). Nothing was allocated:
    /// allocate with [`DedicatedPolicy::Always`](crate::DedicatedPolicy::Always)
    /// through the create-and-bind helpers (or a request with a dedicated
    /// target), without `can_alias`.
    #[error("memory cannot be exported as {handle_types:?}")]
    NotExportable {
        /// The refused bits of the requested handle types, undefined ones
        /// included.
        handle_types: ash::vk::ExternalMemoryHandleTypeFlags,
    },
    /// The custom pool was destroyed already; nothing changed.
    #[error("custom pool was destroyed")]
    StalePool,
    /// The custom pool was made by another allocator; nothing changed.
    #[error("custom pool belongs to another allocator")]
    ForeignPool,
    /// 2047 custom pools exist in this allocator, as many as allocations
    /// can name. Destroy some, or share them. (A slot is retired after
    /// 65 535 pools were made and destroyed in it, so about 134 million
    /// pool lifetimes fit in one allocator.)
    #[error("too many custom pools")]
    TooManyPools,
    /// A resource cannot be bound into an allocation as an alias; the text
    /// says why. Nothing was bound.
    #[error("cannot alias: {0}")]
    CannotAlias(&'static str),
    /// [`Allocator::check_corruption`](crate::Allocator::check_corruption)
    /// was asked about memory types none of which has corruption detection
    /// or debug fills on: set [`Config::debug_margin`](crate::Config::debug_margin) and
    /// [`Config::detect_corruption`](crate::Config::detect_corruption)
    /// and name `HOST_VISIBLE | HOST_COHERENT` types the allocator uses,
    /// or set [`Config::debug_fill`](crate::Config::debug_fill) and name
    /// `HOST_VISIBLE` ones, coherent or not (VMA's
    /// `VK_ERROR_FEATURE_NOT_PRESENT`).
    #[error("neither corruption detection nor debug fills are on for any memory type in {memory_type_bits:#x}")]
    CorruptionDetectionOff {
        /// The memory types asked about.
        memory_type_bits: u32,
    },
    /// Another device error, passed on.
    #[error("device error: {0}")]
    Device(DeviceError),
}

impl Error {
    /// Whether trying another memory type may succeed. At
    /// `maxMemoryAllocationCount` one may: an existing block of another
    /// type can take the request without a new memory object. So may one
    /// whose heap is larger than a request that, rounded as a block places
    /// it, passes the block limits of the type that refused it with
    /// [`SizeExceedsHeaps`](Self::SizeExceedsHeaps) or
    /// [`SizeExceedsMaxAllocation`](Self::SizeExceedsMaxAllocation) (a
    /// request that may not take dedicated memory of its own size; those
    /// larger unrounded never reach a memory type).
    pub(crate) fn try_next_type(self) -> bool {
        self.is_want_of_memory()
            || self.is_past_every_block()
            || matches!(self, Self::NoRoomInExistingMemory | Self::MapFailed)
    }

    /// Whether the request is larger than any memory object of the memory
    /// type can be (its heap, or `maxMemoryAllocationSize`): no memory
    /// freed would change it (`type_pool::too_large_for_any_block`).
    pub(crate) fn is_past_every_block(self) -> bool {
        matches!(
            self,
            Self::SizeExceedsHeaps { .. } | Self::SizeExceedsMaxAllocation { .. }
        )
    }

    /// Whether memory ran short: the device's, the heap's budget, or
    /// `maxMemoryAllocationCount`'s objects. Memory the allocator keeps
    /// empty for reuse may make the difference.
    pub(crate) fn is_want_of_memory(self) -> bool {
        matches!(
            self,
            Self::OutOfDeviceMemory | Self::OverBudget { .. } | Self::TooManyObjects(_)
        )
    }
}

/// The part of [`Error::NoSuitableMemoryType`]'s message that says what
/// its usage needs, so that the message alone points at the fix. Not
/// device addresses: they restrict no memory type, and without buffer
/// device address a request for them gets
/// [`Error::DeviceAddressNotEnabled`] instead.
fn what_the_usage_needs(usage: Usage) -> &'static str {
    if usage.needs_host_access() {
        " (host access needs a HOST_VISIBLE type)"
    } else {
        ""
    }
}

/// A device call's error as the allocator returns it. Not
/// `VK_ERROR_TOO_MANY_OBJECTS`, which only `vkAllocateMemory` returns for
/// `maxMemoryAllocationCount`: that call's is
/// [`Error::TooManyObjects`] with the device's limit
/// (`MemoryContext::allocate_memory`), and another call's
/// (`vkCreateBuffer`, `vkCreateImage`, a bind, a flush, a fence poll) is
/// passed on as [`Error::Device`], with no count it could not know.
impl From<DeviceError> for Error {
    fn from(error: DeviceError) -> Self {
        match error {
            DeviceError::OutOfDeviceMemory => Self::OutOfDeviceMemory,
            DeviceError::OutOfHostMemory => Self::OutOfHostMemory,
            DeviceError::MapFailed => Self::MapFailed,
            DeviceError::DeviceLost => Self::DeviceLost,
            other => Self::Device(other),
        }
    }
}
