//! [`MemoryMap`]: a snapshot of every block, allocation and free range.
//!
//! [`Stats`](super::Stats) are running counters, cheap every frame. A memory
//! map is the full picture, for the moments a developer needs to see where
//! memory went: each `VkDeviceMemory` block with its allocations and free
//! ranges in address order, and each dedicated allocation, those of custom
//! pools ([`PoolMap`]) beside their memory type's default pool. It is what the
//! VMA-format JSON dump ([`MemoryMap::to_vma_json`]) and the SVG picture
//! ([`MemoryMap::to_svg`]) are drawn from, and it is plain data, so an engine
//! can also draw it in its own debug UI.
//!
//! How allocation kinds are derived: see the [`report`](super) module docs.

use ash::vk;
use gpu_alloc_types::MemoryPropertyFlags;

use super::detailed_stats::DetailedStats;
use crate::device::{GpuInfo, HeapBudget};
use crate::memory::ResourceKind;

/// The names of the flags set in `props`, in VMA's order.
pub(crate) fn property_flag_names(
    props: MemoryPropertyFlags,
) -> impl Iterator<Item = &'static str> {
    const NAMES: [(MemoryPropertyFlags, &str); 6] = [
        (MemoryPropertyFlags::DEVICE_LOCAL, "DEVICE_LOCAL"),
        (MemoryPropertyFlags::HOST_VISIBLE, "HOST_VISIBLE"),
        (MemoryPropertyFlags::HOST_COHERENT, "HOST_COHERENT"),
        (MemoryPropertyFlags::HOST_CACHED, "HOST_CACHED"),
        (MemoryPropertyFlags::LAZILY_ALLOCATED, "LAZILY_ALLOCATED"),
        (MemoryPropertyFlags::PROTECTED, "PROTECTED"),
    ];
    NAMES
        .into_iter()
        .filter(move |(flag, _)| props.contains(*flag))
        .map(|(_, name)| name)
}

/// What a range of a block holds: VMA's suballocation types, whose names
/// ([`vma_name`](Self::vma_name)) the JSON dump uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RangeKind {
    /// No allocation: free space of a block. Free slots of a run (see
    /// [`Config::small_buffer_limit`](crate::Config::small_buffer_limit))
    /// count as free space too, merged with free neighbours, although only
    /// buffers of the run's size class can take them.
    Free,
    /// An allocation made for a resource of
    /// [`ResourceKind::Unknown`] (VMA's
    /// name), `Request`'s default kind.
    Unknown,
    /// A buffer.
    Buffer,
    /// An image of unknown tiling (VMA's name; never produced here).
    ImageUnknown,
    /// A `VK_IMAGE_TILING_LINEAR` image.
    ImageLinear,
    /// A `VK_IMAGE_TILING_OPTIMAL` image.
    ImageOptimal,
}

impl RangeKind {
    /// The name VMA gives this suballocation type (`VMA_SUBALLOCATION_TYPE_NAMES`):
    /// `FREE`, `UNKNOWN`, `BUFFER`, `IMAGE_UNKNOWN`, `IMAGE_LINEAR`, `IMAGE_OPTIMAL`.
    pub const fn vma_name(self) -> &'static str {
        match self {
            Self::Free => "FREE",
            Self::Unknown => "UNKNOWN",
            Self::Buffer => "BUFFER",
            Self::ImageUnknown => "IMAGE_UNKNOWN",
            Self::ImageLinear => "IMAGE_LINEAR",
            Self::ImageOptimal => "IMAGE_OPTIMAL",
        }
    }

    /// The kind of an allocation made for a `kind` resource.
    pub(crate) const fn of_resource(kind: ResourceKind) -> Self {
        match kind {
            ResourceKind::Buffer => Self::Buffer,
            ResourceKind::LinearImage => Self::ImageLinear,
            ResourceKind::OptimalImage => Self::ImageOptimal,
            ResourceKind::Unknown => Self::Unknown,
        }
    }
}

/// The kind a map or dump shows for an allocation made for a resource of
/// that kind.
impl From<ResourceKind> for RangeKind {
    fn from(kind: ResourceKind) -> Self {
        Self::of_resource(kind)
    }
}

/// One range of a block: an allocation or free space.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RangeMap {
    /// First byte in the block.
    pub offset: u64,
    /// Length in bytes (never zero): for an allocation, the bytes it holds
    /// in the block, which can exceed its requested size: that size plus
    /// [`Config::debug_margin`](crate::Config::debug_margin), rounded up to
    /// its alignment (at most to a multiple of 4 KiB), or to whole
    /// granularity pages for an optimal image sharing blocks with linear
    /// resources and for a resource of unknown kind; a small buffer in a run
    /// holds its whole slot, the size of its class; a request whose
    /// rounding alone passes the end of a custom pool's fixed-size block
    /// holds the whole block. So ranges tile the block as in a VMA dump.
    pub size: u64,
    /// What it holds; [`RangeKind::Free`] for free space.
    pub kind: RangeKind,
    /// The allocation's name, when it was given one.
    pub name: Option<String>,
}

impl RangeMap {
    /// One past the last byte.
    pub const fn end(&self) -> u64 {
        self.offset.saturating_add(self.size)
    }

    /// Whether this is an allocation (not free space).
    pub fn is_allocation(&self) -> bool {
        self.kind != RangeKind::Free
    }
}

/// One block: a `VkDeviceMemory` shared by many allocations.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BlockMap {
    /// The block's number within its pool (its memory type's default pool,
    /// or a custom pool, whose numbers start again: [`PoolMap::blocks`]),
    /// as in its debug name `vk-suballoc block <type>/<id>` (a custom
    /// pool's blocks are named after the pool); the key of the block in the
    /// dump.
    pub id: u32,
    /// The memory object.
    pub memory: vk::DeviceMemory,
    /// Size in bytes.
    pub size: u64,
    /// Whether it is persistently mapped (host-visible).
    pub mapped: bool,
    /// Whether a defragmentation plan is emptying it
    /// ([`Allocator::plan_defragmentation`](crate::Allocator::plan_defragmentation)):
    /// it takes no moves and comes last for new requests (after a kept
    /// empty block of the other granularity class too), and is released
    /// when its last allocation is freed (a custom pool at its `min_blocks`
    /// keeps it, no longer retiring). A move out of it given up
    /// ([`Allocator::give_up_move`](crate::Allocator::give_up_move)) ends
    /// that: it can no longer empty. Freeing a destination directly leaves
    /// it retiring.
    pub retiring: bool,
    /// Allocations and free ranges in address order: they tile `[0, size)`
    /// without gap or overlap, and no two free ranges touch.
    pub ranges: Vec<RangeMap>,
}

impl BlockMap {
    /// The allocations, in address order.
    pub fn allocations(&self) -> impl Iterator<Item = &RangeMap> + '_ {
        self.ranges.iter().filter(|r| r.is_allocation())
    }

    /// The free ranges, in address order.
    pub fn free_ranges(&self) -> impl Iterator<Item = &RangeMap> + '_ {
        self.ranges.iter().filter(|r| !r.is_allocation())
    }

    /// VMA's detailed statistics of this block alone.
    pub fn detailed_stats(&self) -> DetailedStats {
        let mut stats = DetailedStats::default();
        stats.add_block(self.size);
        for range in &self.ranges {
            if range.is_allocation() {
                stats.add_allocation(range.size);
            } else {
                stats.add_unused_range(range.size);
            }
        }
        stats
    }
}

/// One dedicated allocation: a `VkDeviceMemory` of its own.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DedicatedMap {
    /// The memory object.
    pub memory: vk::DeviceMemory,
    /// Size in bytes.
    pub size: u64,
    /// Whether it is persistently mapped (host-visible), as the memory
    /// object is: with
    /// [`Config::strict_host_access`](crate::Config::strict_host_access)
    /// the allocation's handle may have no pointer all the same.
    pub mapped: bool,
    /// What it holds.
    pub kind: RangeKind,
    /// The allocation's name, when it was given one.
    pub name: Option<String>,
}

/// One custom pool ([`Allocator::create_pool`](crate::Allocator::create_pool)):
/// its blocks and dedicated allocations, and what it fixes about its blocks.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PoolMap {
    /// The pool's name ([`PoolDesc::name`](crate::PoolDesc::name)), when it
    /// was given one.
    pub name: Option<String>,
    /// The memory type of its blocks.
    pub memory_type: u32,
    /// That type's heap.
    pub heap: u32,
    /// The size of every block, when the pool fixes it
    /// ([`PoolDesc::block_size`](crate::PoolDesc::block_size)); `None`: its
    /// blocks grow as the default pool's do.
    pub block_size: Option<u64>,
    /// The size of its full-grown blocks: `block_size` when fixed, else the
    /// memory type's preferred size (VMA's `PreferredBlockSize`).
    pub preferred_block_size: u64,
    /// Blocks made with the pool, and the fewest it holds through emptying
    /// and [`Allocator::trim`](crate::Allocator::trim): a number, not
    /// those blocks ([`PoolDesc::min_blocks`](crate::PoolDesc::min_blocks)).
    pub min_blocks: u32,
    /// The most blocks it may hold
    /// ([`PoolDesc::max_blocks`](crate::PoolDesc::max_blocks)); `None`: no
    /// limit.
    pub max_blocks: Option<u32>,
    /// The handle types its memory objects can be exported as
    /// ([`PoolDesc::export`](crate::PoolDesc::export)); empty: none.
    pub export_handle_types: vk::ExternalMemoryHandleTypeFlags,
    /// Blocks, oldest first. Their ids are numbered within the pool, so a
    /// block of the default pool of the same type may have the same id.
    pub blocks: Vec<BlockMap>,
    /// Dedicated allocations.
    pub dedicated: Vec<DedicatedMap>,
}

impl PoolMap {
    /// VMA's detailed statistics of this pool: dedicated allocations count
    /// as a block and an allocation each, as in VMA.
    pub fn detailed_stats(&self) -> DetailedStats {
        stats_of(&self.blocks, &self.dedicated)
    }
}

/// VMA's detailed statistics of `blocks` and `dedicated` allocations.
fn stats_of(blocks: &[BlockMap], dedicated: &[DedicatedMap]) -> DetailedStats {
    let mut stats = blocks
        .iter()
        .map(BlockMap::detailed_stats)
        .fold(DetailedStats::default(), DetailedStats::merged);
    for dedicated in dedicated {
        stats.add_block(dedicated.size);
        stats.add_allocation(dedicated.size);
    }
    stats
}

/// One memory type: the blocks and dedicated allocations of its default
/// pool, and its custom pools.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemoryTypeMap {
    /// Memory type index.
    pub memory_type: u32,
    /// Its heap.
    pub heap: u32,
    /// Its property flags.
    pub props: MemoryPropertyFlags,
    /// AMD's device-coherent memory (`VK_MEMORY_PROPERTY_DEVICE_COHERENT_BIT_AMD`,
    /// which `gpu-alloc-types`' flags cannot carry): dumps name it
    /// `DEVICE_COHERENT_AMD` ([`flag_names`](Self::flag_names)).
    pub amd_device_coherent: bool,
    /// The size of full-grown blocks of this type (first blocks are smaller).
    pub preferred_block_size: u64,
    /// Blocks of the default pool, oldest first.
    pub blocks: Vec<BlockMap>,
    /// Dedicated allocations of the default pool.
    pub dedicated: Vec<DedicatedMap>,
    /// The custom pools of this type, in the order of their slots in the
    /// allocator (creation order, but that a new pool takes the slot of a
    /// destroyed one).
    pub custom_pools: Vec<PoolMap>,
}

impl MemoryTypeMap {
    /// The names of its property flags, as Vulkan spells them without the
    /// `VK_MEMORY_PROPERTY_` prefix and `_BIT`: `props`, then
    /// `DEVICE_COHERENT_AMD` for AMD's device-coherent types. (Whether such
    /// a type is also `DEVICE_UNCACHED_AMD` is not known here: the backend
    /// reports either flag as one.)
    pub fn flag_names(&self) -> impl Iterator<Item = &'static str> {
        let amd = self.amd_device_coherent.then_some("DEVICE_COHERENT_AMD");
        property_flag_names(self.props).chain(amd)
    }

    /// VMA's detailed statistics of this type, custom pools included (as
    /// [`Allocator::stats`](crate::Allocator::stats) counts them):
    /// dedicated allocations count as a block and an allocation each, as
    /// in VMA.
    pub fn detailed_stats(&self) -> DetailedStats {
        self.custom_pools.iter().map(PoolMap::detailed_stats).fold(
            stats_of(&self.blocks, &self.dedicated),
            DetailedStats::merged,
        )
    }

    /// Live allocations, blocks and dedicated, custom pools included.
    pub fn allocation_count(&self) -> usize {
        let count = |blocks: &[BlockMap], dedicated: &[DedicatedMap]| {
            blocks
                .iter()
                .map(|b| b.allocations().count())
                .sum::<usize>()
                + dedicated.len()
        };
        self.custom_pools
            .iter()
            .map(|pool| count(&pool.blocks, &pool.dedicated))
            .sum::<usize>()
            + count(&self.blocks, &self.dedicated)
    }
}

/// One memory heap.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HeapMap {
    /// Heap index.
    pub heap: u32,
    /// Size in bytes.
    pub size: u64,
    /// `VK_MEMORY_HEAP_DEVICE_LOCAL_BIT`, derived from its memory types: the
    /// spec sets `DEVICE_LOCAL` on a memory type exactly when its heap is
    /// device-local (the device seam does not carry heap flags).
    pub device_local: bool,
    /// Budget and usage, as [`Stats`](super::Stats) report them.
    pub budget: HeapBudget,
}

/// A snapshot of all device memory an allocator holds, from
/// [`Allocator::memory_map`](crate::Allocator::memory_map).
///
/// Each pool (a memory type's default pool, each custom pool) is read under
/// its own lock, one after another, so each pool's part is consistent;
/// figures across pools may straddle concurrent allocations on other
/// threads.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemoryMap {
    /// One entry per memory type, by index.
    pub memory_types: Vec<MemoryTypeMap>,
    /// One entry per heap, by index.
    pub heaps: Vec<HeapMap>,
    /// `bufferImageGranularity`.
    pub buffer_image_granularity: u64,
    /// `nonCoherentAtomSize`.
    pub non_coherent_atom_size: u64,
    /// `maxMemoryAllocationCount`.
    pub max_memory_allocation_count: u32,
    /// Name, API version and type of the GPU, when known.
    pub gpu: Option<GpuInfo>,
}

impl MemoryMap {
    /// The same map, with `gpu` for the dump's `General` section. The
    /// [`AshMemoryDevice`](crate::device::AshMemoryDevice) backend names the
    /// GPU itself; this is for other backends, whose maps leave it `None`
    /// unless their [`MemoryProperties::gpu`](crate::device::MemoryProperties::gpu)
    /// says it, or to name it differently.
    ///
    /// ```no_run
    /// # fn f(instance: &ash::Instance, physical_device: ash::vk::PhysicalDevice,
    /// #      allocator: &vk_suballoc::Allocator<vk_suballoc::device::AshMemoryDevice>) {
    /// use vk_suballoc::report::GpuInfo;
    /// // SAFETY: `physical_device` belongs to `instance`.
    /// let properties = unsafe { instance.get_physical_device_properties(physical_device) };
    /// let json = allocator.memory_map().with_gpu(GpuInfo::from(&properties)).to_vma_json(true);
    /// # }
    /// ```
    #[must_use]
    pub fn with_gpu(mut self, gpu: GpuInfo) -> Self {
        self.gpu = Some(gpu);
        self
    }

    /// Every custom pool, by memory type.
    pub fn custom_pools(&self) -> impl Iterator<Item = &PoolMap> + '_ {
        self.memory_types.iter().flat_map(|t| &t.custom_pools)
    }

    /// VMA's detailed statistics over every memory type, custom pools
    /// included.
    pub fn total_stats(&self) -> DetailedStats {
        self.memory_types
            .iter()
            .map(MemoryTypeMap::detailed_stats)
            .fold(DetailedStats::default(), DetailedStats::merged)
    }

    /// VMA's detailed statistics over the memory types of `heap`, custom
    /// pools included.
    pub fn heap_stats(&self, heap: u32) -> DetailedStats {
        self.memory_types
            .iter()
            .filter(|t| t.heap == heap)
            .map(MemoryTypeMap::detailed_stats)
            .fold(DetailedStats::default(), DetailedStats::merged)
    }

    /// Live allocations, blocks and dedicated, custom pools included.
    pub fn allocation_count(&self) -> usize {
        self.memory_types
            .iter()
            .map(MemoryTypeMap::allocation_count)
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_follow_the_resource() {
        use RangeKind::*;
        assert_eq!(RangeKind::of_resource(ResourceKind::Buffer), Buffer);
        assert_eq!(
            RangeKind::of_resource(ResourceKind::LinearImage),
            ImageLinear
        );
        assert_eq!(
            RangeKind::of_resource(ResourceKind::OptimalImage),
            ImageOptimal
        );
        assert_eq!(RangeKind::from(ResourceKind::Unknown), Unknown);
    }
}
