//! [`PoolDesc`]: how to make a custom pool (its memory type, block size,
//! limits on its blocks, name, priority, and the handle types its memory
//! can be exported as), with a builder method for each. Apart from the
//! pools' table and their making because it is the part of custom pools an
//! engine writes itself, and the longest: it documents Vulkan's rules for
//! exported memory, which are the caller's to keep.

use ash::vk;

/// How to make a custom pool
/// ([`Allocator::create_pool`](crate::Allocator::create_pool)).
///
/// ```
/// use vk_suballoc::PoolDesc;
/// // Four 64 MiB blocks, made at once and never more: a fixed budget for
/// // streamed textures.
/// let desc = PoolDesc::new(0)
///     .block_size(64 << 20)
///     .min_blocks(4)
///     .max_blocks(4)
///     .name("textures");
/// assert_eq!(desc.max_blocks, Some(4));
/// ```
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PoolDesc<'a> {
    /// The memory type of every block:
    /// [`Allocator::memory_type_for`](crate::Allocator::memory_type_for)
    /// picks one for a usage, as for any request.
    pub memory_type: u32,
    /// The size of every block in bytes; 0 (the default): blocks grow as
    /// the default pools' do, from smaller first blocks to the memory
    /// type's preferred size (`min_blocks` are made at the preferred
    /// size). A fixed size is never retried smaller when the driver is out
    /// of memory. An optimal-tiling image in blocks shared with linear
    /// resources takes whole `bufferImageGranularity` pages, so in blocks
    /// smaller than one page each such image takes a block of its own. A
    /// request larger than a block (its size plus
    /// [`Config::debug_margin`](crate::Config::debug_margin)) is refused
    /// ([`Error::TooLargeForPool`](crate::Error::TooLargeForPool)), unless
    /// it takes dedicated memory of its own size, which the driver or
    /// [`DedicatedPolicy::Always`](crate::DedicatedPolicy::Always)
    /// requires.
    pub block_size: u64,
    /// Blocks made with the pool: it never holds fewer, when they empty,
    /// through [`Allocator::trim`](crate::Allocator::trim) or
    /// defragmentation. A number of blocks, not those blocks: while it
    /// holds more, any empty one may be released, one made with the pool
    /// included (VMA's `minBlockCount`).
    pub min_blocks: u32,
    /// No block is made past this many: requests then fail with
    /// [`Error::PoolFull`](crate::Error::PoolFull). `None`: no limit
    /// (VMA's `maxBlockCount` of 0; `Some(0)` is refused by
    /// [`Allocator::create_pool`](crate::Allocator::create_pool) with
    /// [`Error::InvalidConfig`](crate::Error::InvalidConfig)).
    /// Dedicated memory a request requires (`DedicatedPolicy::Always`, the
    /// driver, a lazily allocated type) is not a block and is made past it,
    /// as under VMA's `maxBlockCount`. With growing blocks (`block_size`
    /// 0) the first ones are smaller than the preferred size and keep
    /// their size, so a cap of a few blocks may refuse a request the
    /// preferred size would hold (as in VMA): give a capped pool a fixed
    /// `block_size`, or `min_blocks`.
    pub max_blocks: Option<u32>,
    /// The pool's name, in the debug names of its blocks and unnamed
    /// dedicated memory, memory maps and dumps.
    pub name: Option<&'a str>,
    /// `VK_EXT_memory_priority` priority in `[0, 1]` of its blocks, and of
    /// its dedicated allocations whose request names none; ignored when
    /// the extension is not enabled. As
    /// [`AllocationDesc::priority`](crate::AllocationDesc::priority): clamped
    /// to the range, NaN means 0.5.
    pub priority: Option<f32>,
    /// The handle types every memory object of the pool can be exported as
    /// (`VkExportMemoryAllocateInfo`, VMA's `pMemoryAllocateNext`); empty
    /// (the default): none. See [`export`](Self::export).
    pub export_handle_types: vk::ExternalMemoryHandleTypeFlags,
    /// The least alignment of every allocation of the pool, on top of each
    /// request's own (its requirements' and
    /// [`AllocationDesc::min_alignment`](crate::AllocationDesc::min_alignment),
    /// the largest of the three applies), in its blocks and in the moves
    /// defragmentation plans for it: for memory shared with an API whose
    /// alignment Vulkan does not report (OpenGL or CUDA interop), as VMA's
    /// `VmaPoolCreateInfo::minAllocationAlignment`. 0 (the default): none;
    /// otherwise a power of two
    /// ([`Error::AlignmentNotPowerOfTwo`](crate::Error::AlignmentNotPowerOfTwo)
    /// from [`Allocator::create_pool`](crate::Allocator::create_pool)).
    /// Dedicated memory starts at offset 0, which meets any alignment.
    pub min_alignment: u64,
}

impl<'a> PoolDesc<'a> {
    /// A pool of `memory_type` with default blocks and no limit.
    pub const fn new(memory_type: u32) -> Self {
        Self {
            memory_type,
            block_size: 0,
            min_blocks: 0,
            max_blocks: None,
            name: None,
            priority: None,
            export_handle_types: vk::ExternalMemoryHandleTypeFlags::empty(),
            min_alignment: 0,
        }
    }

    /// Sets a fixed block size.
    pub const fn block_size(mut self, bytes: u64) -> Self {
        self.block_size = bytes;
        self
    }

    /// Sets the blocks made at once and kept.
    pub const fn min_blocks(mut self, blocks: u32) -> Self {
        self.min_blocks = blocks;
        self
    }

    /// Sets the most blocks the pool may hold.
    pub const fn max_blocks(mut self, blocks: u32) -> Self {
        self.max_blocks = Some(blocks);
        self
    }

    /// Sets the name.
    pub const fn name(mut self, name: &'a str) -> Self {
        self.name = Some(name);
        self
    }

    /// Sets the memory priority of its memory objects.
    pub const fn priority(mut self, priority: f32) -> Self {
        self.priority = Some(priority);
        self
    }

    /// Sets the least alignment of its allocations (a power of two; 0:
    /// none): see the field.
    pub const fn min_alignment(mut self, bytes: u64) -> Self {
        self.min_alignment = bytes;
        self
    }

    /// Makes every memory object of the pool exportable as `handle_types`,
    /// for interop with CUDA, OpenGL, a video API or another process: its
    /// blocks (`min_blocks` included) and its dedicated memory are
    /// allocated with `VkExportMemoryAllocateInfo { handleTypes }` chained,
    /// as VMA's `VmaPoolCreateInfo::pMemoryAllocateNext` does. The default
    /// pools never export. Empty `handle_types` (the default): none.
    /// Each bit must be a handle type Vulkan defines:
    /// [`Allocator::create_pool`](crate::Allocator::create_pool) refuses a
    /// pool with any other (as with `from_raw` on a bit from a newer header
    /// than ash 0.38's) with
    /// [`Error::NotExportable`](crate::Error::NotExportable) naming those
    /// bits, and makes nothing.
    ///
    /// An allocation's [`memory`](crate::Allocation::memory) is its
    /// block's (or its dedicated) `VkDeviceMemory`: export that
    /// (`vkGetMemoryFdKHR`, `vkGetMemoryWin32HandleKHR`), and the resource
    /// lives at [`offset`](crate::Allocation::offset) in it. The importer
    /// imports the whole memory object, of
    /// [`Allocator::memory_size`](crate::Allocator::memory_size) bytes (for
    /// an opaque handle, import with that size and the pool's memory
    /// type), and so sees every other allocation in that block as well:
    /// give data another process must not read a pool of its own, or
    /// dedicated memory.
    ///
    /// Vulkan's rules, the caller's to keep:
    /// - Every buffer or image bound to the pool's memory is created with
    ///   `VkExternalMemoryBufferCreateInfo` / `VkExternalMemoryImageCreateInfo`
    ///   naming a handle type the memory was allocated with
    ///   (VUID-vkBindBufferMemory-memory-02726,
    ///   VUID-vkBindImageMemory-memory-02728), aliases included
    ///   ([`create_aliasing_buffer`](crate::Allocator::create_aliasing_buffer)
    ///   takes the caller's create info, so chain it there too).
    /// - The handle types are supported and compatible for those resources
    ///   (VUID-VkExportMemoryAllocateInfo-handleTypes-00656): check
    ///   `vkGetPhysicalDeviceExternalBufferProperties` or
    ///   `vkGetPhysicalDeviceImageFormatProperties2` with
    ///   `VkPhysicalDeviceExternalImageFormatInfo` for `EXPORTABLE`.
    ///   [`Allocator::create_pool`](crate::Allocator::create_pool) refuses
    ///   only what it can tell without a resource (see there).
    /// - A handle type those queries report `DEDICATED_ONLY` for needs
    ///   memory of its own per resource: allocate in such a pool with
    ///   [`DedicatedPolicy::Always`](crate::DedicatedPolicy::Always) and a
    ///   dedicated target (the create-and-bind helpers name it, unless
    ///   [`AllocationDesc::can_alias`](crate::AllocationDesc::can_alias)
    ///   is set: leave it unset here, VUID-VkMemoryAllocateInfo-pNext-00639),
    ///   so that the memory carries `VkMemoryDedicatedAllocateInfo`. But not for
    ///   an image exported as an Android hardware buffer: the driver sizes
    ///   that memory itself (`allocationSize` 0,
    ///   VUID-VkMemoryAllocateInfo-pNext-01874), so a pool exporting
    ///   `ANDROID_HARDWARE_BUFFER_BIT_ANDROID` refuses a request for memory
    ///   dedicated to an image with
    ///   [`Error::NotExportable`](crate::Error::NotExportable); its blocks
    ///   and buffers' memory export as AHB blobs. For the D3D11 texture
    ///   and D3D12 resource types, which Vulkan requires every driver to
    ///   report `DEDICATED_ONLY` for, the allocator enforces the rule:
    ///   such a pool takes no `min_blocks` and makes no memory but that
    ///   dedicated to a named resource
    ///   ([`Error::NotExportable`](crate::Error::NotExportable)).
    /// - The importer names the same `allocationSize` and memory type for
    ///   an opaque handle, and imports with `VkMemoryDedicatedAllocateInfo`
    ///   only memory the pool dedicated to an identical resource
    ///   (VUID-VkMemoryDedicatedAllocateInfo-buffer-01879, -image-01878 for
    ///   `OPAQUE_FD`): a block is imported without it.
    /// - The extension of the handle type is enabled where exporting needs
    ///   one (`VK_KHR_external_memory_fd` for `vkGetMemoryFdKHR`).
    ///
    /// A [defragmentation plan](crate::Allocator::plan_defragmentation)
    /// moves what the engine lists, exporting pools' allocations too:
    /// **an importer keeps seeing the old block**, not the moved contents.
    /// List an exported allocation as [`Movable`](crate::Movable) only
    /// when the importer imports it again. Likewise, a block the pool
    /// releases (when it empties, or through [`trim`](crate::Allocator::trim))
    /// lives on in an importer that holds it, but new allocations never
    /// land there again: export and import per allocation, not once per
    /// pool (the pool keeps `min_blocks` blocks, but not necessarily those
    /// it was made with: see the `min_blocks` field).
    ///
    /// ```
    /// use ash::vk;
    /// use vk_suballoc::PoolDesc;
    /// let desc = PoolDesc::new(0)
    ///     .block_size(64 << 20)
    ///     .export(vk::ExternalMemoryHandleTypeFlags::OPAQUE_FD);
    /// assert_eq!(desc.export_handle_types, vk::ExternalMemoryHandleTypeFlags::OPAQUE_FD);
    /// ```
    pub const fn export(mut self, handle_types: vk::ExternalMemoryHandleTypeFlags) -> Self {
        self.export_handle_types = handle_types;
        self
    }
}
