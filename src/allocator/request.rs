//! What an allocation request carries.

use ash::vk;

use super::Pool;
use crate::device::{DedicatedHint, DedicatedTarget};
use crate::memory::type_pool::DedicatedChoice;
use crate::memory::{ResourceKind, Usage};
use crate::offset::Strategy;

/// The caller's say on dedicated memory (one `VkDeviceMemory` per resource).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum DedicatedPolicy {
    /// Dedicated memory first when the driver requires or prefers it, or
    /// when the request is larger than half a block (or its placement's
    /// alignment is, [`AllocationDesc::min_alignment`]); else blocks first, and
    /// dedicated memory only when no new block can be made. Past 3/4 of
    /// `maxMemoryAllocationCount`, dedicated memory comes first only when the
    /// driver requires it (as in VMA). The right choice almost always. In
    /// a custom pool ([`AllocationDesc::pool`]) requests take blocks, and
    /// dedicated memory only when it is required.
    #[default]
    Auto,
    /// Always dedicated, with no fallback to blocks (render targets you
    /// want to alias, with [`AllocationDesc::can_alias`], or export).
    /// The validation layer's best practices advise against it for a
    /// resource under 1 MiB (`vkBindMemory-small-dedicated-allocation`,
    /// at the bind of [`Allocator::create_image`](crate::Allocator::create_image)
    /// or [`create_buffer`](crate::Allocator::create_buffer); and
    /// `vkAllocateMemory-small-allocation` under 256 KiB).
    Always,
    /// Never dedicated unless the driver requires it, the memory type is
    /// lazily allocated (always dedicated, as in VMA), or the request is of
    /// [`ResourceKind::Unknown`] on a device whose `bufferImageGranularity`
    /// is not a power of two (no driver reports one), which no block can
    /// place apart from its neighbours.
    Never,
}

/// How an allocation will be used, beyond its memory requirements: the part
/// of a request that the ash helpers take from the caller.
///
/// ```
/// use vk_suballoc::{AllocationDesc, Usage};
/// let desc = AllocationDesc::new(Usage::UPLOAD).name("staging");
/// assert_eq!(desc.name, Some("staging"));
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct AllocationDesc<'a> {
    /// What the memory is for; picks the memory type.
    pub usage: Usage,
    /// A name for leak reports, statistics dumps, and the debug name of
    /// dedicated memory.
    pub name: Option<&'a str>,
    /// Dedicated memory or not.
    pub dedicated: DedicatedPolicy,
    /// Fail rather than exceed a heap's budget (after trying the other
    /// memory types): with [`Error::OverBudget`](crate::Error::OverBudget)
    /// when a budget stopped the last candidate type, else with that type's
    /// error (its heap full: [`Error::OutOfDeviceMemory`](crate::Error::OutOfDeviceMemory)).
    /// Without it, a request that every memory type refuses within its
    /// heap's budget passes one by its own size: existing blocks or
    /// dedicated memory, not a new block (but with
    /// [`DedicatedPolicy::Never`] or past 3/4 of
    /// `maxMemoryAllocationCount`).
    pub within_budget: bool,
    /// `VK_EXT_memory_priority` priority in `[0, 1]` for dedicated memory;
    /// ignored when the extension is not enabled. Values outside the range
    /// are clamped to it, and NaN means Vulkan's default, 0.5.
    pub priority: Option<f32>,
    /// The memory will have other resources bound into it
    /// ([`Allocator::create_aliasing_buffer`](crate::Allocator::create_aliasing_buffer)):
    /// the helpers then make dedicated memory for no one resource (no
    /// `VkMemoryDedicatedAllocateInfo`), unless the driver requires it
    /// (VMA's `CAN_ALIAS`). Blocks take aliases anyway.
    pub can_alias: bool,
    /// The custom pool to allocate from ([`Allocator::create_pool`](crate::Allocator::create_pool));
    /// `None`: the memory types `usage` ranks. In a pool, `usage` picks no
    /// memory type (host access still needs the pool's type to be
    /// host-visible), and dedicated memory is made only when required
    /// ([`DedicatedPolicy::Always`], or by the driver, the memory type or
    /// the resource's kind, as under [`DedicatedPolicy::Never`]), counted
    /// in the pool.
    pub pool: Option<Pool>,
    /// Only the memory objects that exist already: no new block, no
    /// dedicated memory, so never a `vkAllocateMemory` call and its stall
    /// (VMA's `NEVER_ALLOCATE`). When no existing block of a suitable
    /// memory type has room, the request fails with
    /// [`Error::NoRoomInExistingMemory`](crate::Error::NoRoomInExistingMemory),
    /// and so does one whose resource needs dedicated memory (the driver's
    /// requirement, [`DedicatedPolicy::Always`], a lazily allocated type,
    /// a kind no block can place: [`DedicatedPolicy::Never`]).
    /// A request larger than its custom pool's fixed block size is still
    /// refused with [`Error::TooLargeForPool`](crate::Error::TooLargeForPool),
    /// which no freeing mends. For opportunistic allocations: a cache that
    /// grows only into memory already reserved, or a frame that must not
    /// hitch.
    pub existing_memory_only: bool,
    /// An alignment of the offset in the memory object beyond the
    /// resource's own, a power of two; 0 (the default): none (VMA's
    /// `vmaCreateBufferWithAlignment`). For offsets that another API or
    /// the engine's own suballocation needs aligned more than Vulkan's
    /// requirements say (interop with OpenGL; ray-tracing scratch buffers,
    /// whose device address must be a multiple of
    /// `minAccelerationStructureScratchOffsetAlignment`: an address is the
    /// memory object's address plus the offset, and the memory object's
    /// alignment is the driver's: lavapipe's start on 4 KiB host pages).
    /// Dedicated memory starts at offset 0. The allocator does not remember
    /// it: list such an allocation as a [`Movable`](crate::Movable) whose
    /// `requirements.alignment` is raised to it, or its defragmentation
    /// move may land at an offset aligned only to the resource's own
    /// requirement.
    pub min_alignment: u64,
    /// The memory types the caller rules out, one bit per type index:
    /// the request may take only the types of the resource's
    /// `memoryTypeBits` not set here; none (0) by default. Set it with
    /// [`memory_type_bits`](Self::memory_type_bits) (VMA's
    /// `VmaAllocationCreateInfo::memoryTypeBits`, the types allowed, but
    /// for 0, which there allows every type and here none), to
    /// keep an allocation out of a type `usage` would rank (a heap the
    /// engine reserves for something else), or to pin it to one
    /// ([`Allocator::memory_type_for`](crate::Allocator::memory_type_for)
    /// finds it) without a custom pool. Errors name the narrowed
    /// `memoryTypeBits`. (Kept as the types ruled out so that the default
    /// is 0, as every other field's.)
    pub excluded_memory_types: u32,
    /// Property flags the memory type must have (VMA's `requiredFlags`):
    /// the request takes only types with every one of them, besides what
    /// `usage` requires, and fails with
    /// [`Error::MissingRequiredFlags`](crate::Error::MissingRequiredFlags)
    /// when none of the types it may take has them. Empty by default. For
    /// the flags the engine's code depends on: `HOST_COHERENT` where it
    /// never [`flush`](crate::Allocator::flush)es, `HOST_CACHED` where it
    /// reads a lot on the host, `DEVICE_LOCAL | HOST_VISIBLE` where it
    /// writes GPU data in place or not at all (it finds out from the
    /// error, and takes another path). AMD's device-coherent types have
    /// `DEVICE_COHERENT_AMD` here, as
    /// [`Allocator::memory_type_properties`](crate::Allocator::memory_type_properties)
    /// reports them; requiring it is how a request takes one when its
    /// feature is on. `DEVICE_UNCACHED_AMD`, which the allocator is not
    /// told of, no type has here: requiring it always fails (require
    /// `DEVICE_COHERENT_AMD`). Flags that only types no request of the
    /// usage takes have fail with
    /// [`Error::NoSuitableMemoryType`](crate::Error::NoSuitableMemoryType)
    /// instead: `PROTECTED` with its feature on (protected memory comes
    /// from a custom pool of such a type) and `LAZILY_ALLOCATED` without
    /// [`Usage::TRANSIENT`](crate::Usage::TRANSIENT). In a custom pool the
    /// pool's type must have them.
    pub required_flags: vk::MemoryPropertyFlags,
    /// Property flags the memory type should have (VMA's `preferredFlags`):
    /// of the types the request may take, those missing fewer of these
    /// flags come first, and types missing as many keep the order `usage`
    /// gives them; so `usage` decides between types that have the same
    /// preferred flags, and the request still falls back to the types
    /// missing some when the first ones refuse it. AMD's device-coherent
    /// types stay after every other type whatever their flags, as with
    /// `usage` alone. Empty by default; ignored in a custom pool (its one
    /// type is the only choice).
    pub preferred_flags: vk::MemoryPropertyFlags,
    /// How a block chooses among its free ranges that hold the request
    /// (VMA's `STRATEGY_MIN_TIME`, `STRATEGY_MIN_MEMORY`,
    /// `STRATEGY_MIN_OFFSET` and `UPPER_ADDRESS`; see [`Strategy`]): [`Strategy::MinTime`] by
    /// default; [`Strategy::MinMemory`] looks at up to 8 ranges that fit
    /// more tightly first, in each block the request tries, for memory that
    /// must last in a custom pool of few fixed blocks;
    /// [`Strategy::MinOffset`] takes the lowest offset where the request
    /// fits in each block it tries, by a walk of the block's allocations
    /// (O(allocations in the block)), for placements made rarely that should
    /// leave a block's free space in one piece at its end;
    /// [`Strategy::MaxOffset`] the highest, by a walk from the block's end,
    /// for allocations of another lifetime kept at the other end (VMA's
    /// double stack, in a custom pool of one block). Blocks are tried
    /// in the same order whatever the strategy. Small buffers take run
    /// slots with `MinTime` and `MinMemory` (their slots are of the
    /// request's size class already), and ranges of their own with
    /// `MinOffset` and `MaxOffset` (a run's slots lie wherever the run was carved), or,
    /// where no block's free range holds them, a free slot of an existing
    /// run before any new memory.
    /// An allocation does not keep its strategy: a defragmentation plan
    /// places its moves itself (with `MinTime` in the blocks it fills, at
    /// the lowest offset when it compacts a block).
    pub strategy: Strategy,
}

/// A description with `usage` and defaults for the rest
/// ([`AllocationDesc::new`]): where a call takes `impl Into<AllocationDesc>`,
/// a [`Usage`] alone will do.
impl From<Usage> for AllocationDesc<'_> {
    fn from(usage: Usage) -> Self {
        Self::new(usage)
    }
}

impl<'a> AllocationDesc<'a> {
    /// Whether every memory type the request may take is host-visible, so
    /// that it is mapped on every device: its usage needs host access, or
    /// it requires `HOST_VISIBLE` (`Config::strict_host_access` withholds
    /// the mapping of the others).
    pub(crate) fn asks_for_host_access(&self) -> bool {
        self.usage.needs_host_access()
            || self
                .required_flags
                .contains(vk::MemoryPropertyFlags::HOST_VISIBLE)
    }

    /// A description with `usage` and defaults for the rest.
    pub const fn new(usage: Usage) -> Self {
        Self {
            usage,
            name: None,
            dedicated: DedicatedPolicy::Auto,
            within_budget: false,
            priority: None,
            can_alias: false,
            pool: None,
            existing_memory_only: false,
            min_alignment: 0,
            excluded_memory_types: 0,
            required_flags: vk::MemoryPropertyFlags::empty(),
            preferred_flags: vk::MemoryPropertyFlags::empty(),
            strategy: Strategy::MinTime,
        }
    }

    /// Sets the name.
    pub const fn name(mut self, name: &'a str) -> Self {
        self.name = Some(name);
        self
    }

    /// Sets the dedicated-memory policy.
    pub const fn dedicated(mut self, policy: DedicatedPolicy) -> Self {
        self.dedicated = policy;
        self
    }

    /// Asks for within-budget allocation.
    pub const fn within_budget(mut self) -> Self {
        self.within_budget = true;
        self
    }

    /// Lets other resources be bound into the memory (see the field).
    pub const fn can_alias(mut self) -> Self {
        self.can_alias = true;
        self
    }

    /// Allocates from a custom pool.
    pub const fn pool(mut self, pool: Pool) -> Self {
        self.pool = Some(pool);
        self
    }

    /// Sets the memory priority.
    pub const fn priority(mut self, priority: f32) -> Self {
        self.priority = Some(priority);
        self
    }

    /// Takes only memory that exists already (see the field).
    pub const fn existing_memory_only(mut self) -> Self {
        self.existing_memory_only = true;
        self
    }

    /// Sets an alignment beyond the resource's own (see the field).
    pub const fn min_alignment(mut self, alignment: u64) -> Self {
        self.min_alignment = alignment;
        self
    }

    /// Requires the memory type to have every flag of `flags` (see
    /// [`required_flags`](Self::required_flags)).
    ///
    /// ```
    /// # #[cfg(feature = "fake-device")] {
    /// use ash::vk;
    /// use vk_suballoc::device::fake::{FakeDevice, FakeLayout};
    /// use vk_suballoc::{AllocationDesc, Allocator, Config, Request, ResourceKind, Usage};
    ///
    /// // A mobile GPU whose cached memory is not coherent: code that never
    /// // flushes requires coherent memory, and gets it (uncached here).
    /// let allocator = Allocator::new(FakeDevice::new(FakeLayout::mobile()), Config::default())?;
    /// let requirements = vk::MemoryRequirements { size: 4096, alignment: 64, memory_type_bits: !0 };
    /// let desc = AllocationDesc::new(Usage::READBACK).required_flags(vk::MemoryPropertyFlags::HOST_COHERENT);
    /// let readback = allocator.allocate(&Request::with_desc(requirements, ResourceKind::Buffer, desc))?;
    /// let flags = allocator.memory_type_properties(readback.memory_type()).unwrap();
    /// assert!(flags.contains(vk::MemoryPropertyFlags::HOST_VISIBLE | vk::MemoryPropertyFlags::HOST_COHERENT));
    /// // SAFETY: the fake device runs no GPU work.
    /// unsafe { allocator.free(readback)? };
    /// # }
    /// # Ok::<(), vk_suballoc::Error>(())
    /// ```
    pub const fn required_flags(mut self, flags: vk::MemoryPropertyFlags) -> Self {
        self.required_flags = flags;
        self
    }

    /// Prefers memory types with the flags of `flags` (see
    /// [`preferred_flags`](Self::preferred_flags)).
    pub const fn preferred_flags(mut self, flags: vk::MemoryPropertyFlags) -> Self {
        self.preferred_flags = flags;
        self
    }

    /// Sets how blocks choose among their free ranges (see
    /// [`strategy`](Self::strategy)).
    pub const fn strategy(mut self, strategy: Strategy) -> Self {
        self.strategy = strategy;
        self
    }

    /// Allows only the memory types in `bits`: rules out the others (see
    /// [`excluded_memory_types`](Self::excluded_memory_types)). So 0
    /// allows none, and the request fails with
    /// [`Error::NoMemoryTypeBits`](crate::Error::NoMemoryTypeBits) (in a
    /// custom pool, [`Error::PoolTypeNotAllowed`](crate::Error::PoolTypeNotAllowed)), where
    /// VMA reads a `memoryTypeBits` of 0 as every type: leave it unset for
    /// that.
    pub const fn memory_type_bits(mut self, bits: u32) -> Self {
        self.excluded_memory_types = !bits;
        self
    }
}

/// A complete allocation request: the resource's memory requirements, its
/// kind, and the [`AllocationDesc`].
///
/// ```
/// use ash::vk;
/// use vk_suballoc::{Request, ResourceKind, Usage};
/// let requirements = vk::MemoryRequirements { size: 4096, alignment: 256, memory_type_bits: !0 };
/// let request = Request::new(requirements, Usage::DEVICE_LOCAL, ResourceKind::Buffer).name("vertices");
/// assert_eq!(request.desc.name, Some("vertices"));
/// ```
#[derive(Clone, Copy, Debug, Default)]
pub struct Request<'a> {
    /// Size, alignment and `memoryTypeBits` from `vkGet*MemoryRequirements`.
    pub requirements: vk::MemoryRequirements,
    /// Buffer or image tiling, for `bufferImageGranularity`;
    /// [`ResourceKind::Unknown`] by default, which pads the allocation to
    /// whole pages: say the kind when you know it.
    pub kind: ResourceKind,
    /// Usage, name, policies.
    pub desc: AllocationDesc<'a>,
    /// The driver's dedicated-allocation requirements.
    pub driver_dedicated: DedicatedHint,
    /// The resource, for `VkMemoryDedicatedAllocateInfo` when the memory ends
    /// up dedicated: set by the unsafe
    /// [`dedicated_target`](Self::dedicated_target), since the driver takes
    /// the handle on trust; read by [`target`](Self::target).
    pub(crate) dedicated_target: Option<DedicatedTarget>,
    /// `requirements.size` when the target was set: the target's size, as
    /// its setter vouched. The requirements are public, so safe code may
    /// change them afterwards; `allocate` refuses the target then
    /// ([`Error::DedicatedTargetMismatch`](crate::Error::DedicatedTargetMismatch)),
    /// rather than give the driver dedicated memory of another size than
    /// its resource's.
    pub(crate) target_size: u64,
}

impl<'a> Request<'a> {
    /// A request for `requirements` with `usage`, for a resource of `kind`.
    pub const fn new(
        requirements: vk::MemoryRequirements,
        usage: Usage,
        kind: ResourceKind,
    ) -> Self {
        Self::with_desc(requirements, kind, AllocationDesc::new(usage))
    }

    /// A request with a full description.
    pub const fn with_desc(
        requirements: vk::MemoryRequirements,
        kind: ResourceKind,
        desc: AllocationDesc<'a>,
    ) -> Self {
        Self {
            requirements,
            kind,
            desc,
            driver_dedicated: DedicatedHint {
                required: false,
                preferred: false,
            },
            dedicated_target: None,
            target_size: 0,
        }
    }

    /// Sets the name.
    pub const fn name(mut self, name: &'a str) -> Self {
        self.desc.name = Some(name);
        self
    }

    /// Sets the driver's dedicated-allocation requirements.
    pub const fn driver_dedicated(mut self, hint: DedicatedHint) -> Self {
        self.driver_dedicated = hint;
        self
    }

    /// Sets the resource that dedicated memory is for: when the allocation
    /// ends up in dedicated memory, `vkAllocateMemory` gets
    /// `VkMemoryDedicatedAllocateInfo` naming it. The create-and-bind
    /// helpers ([`Allocator::create_buffer`](crate::Allocator::create_buffer),
    /// [`create_image`](crate::Allocator::create_image)) set it for you.
    ///
    /// # Safety
    /// The driver takes the handle on trust
    /// (VUID-VkMemoryDedicatedAllocateInfo-buffer-parameter, -image-parameter):
    /// `target` is a live buffer or image of the allocator's device, not
    /// bound to memory, created without `SPARSE_BINDING`
    /// (VUID-VkMemoryDedicatedAllocateInfo-buffer-01436, -image-01434) and,
    /// an image, without `DISJOINT` (-image-01797: as the create-and-bind
    /// helpers refuse both), whose memory requirements are this request's
    /// (the memory's size is theirs: VUID-VkMemoryDedicatedAllocateInfo-buffer-02965,
    /// -image-02964), and it stays alive, unbound, until the allocation is
    /// made. Should the allocation be dedicated
    /// ([`Allocation::is_dedicated`](crate::Allocation::is_dedicated)), only
    /// `target` may be bound to its memory, at offset 0
    /// (VUID-vkBindBufferMemory-memory-01508, VUID-vkBindImageMemory-memory-01509).
    /// The size the requirements have now is the one vouched for: should
    /// it change before the allocation, the request is refused with
    /// [`Error::DedicatedTargetMismatch`](crate::Error::DedicatedTargetMismatch)
    /// (set the requirements first, the target last).
    ///
    /// Safe code cannot name a handle:
    /// ```compile_fail,E0133
    /// use ash::vk;
    /// use vk_suballoc::{DedicatedTarget, Request};
    /// let _ = Request::default().dedicated_target(DedicatedTarget::Buffer(vk::Buffer::null()));
    /// ```
    pub const unsafe fn dedicated_target(mut self, target: DedicatedTarget) -> Self {
        self.dedicated_target = Some(target);
        self.target_size = self.requirements.size;
        self
    }

    /// The resource set by [`dedicated_target`](Self::dedicated_target),
    /// if any.
    pub const fn target(&self) -> Option<DedicatedTarget> {
        self.dedicated_target
    }

    /// Sets the dedicated-memory policy.
    pub const fn dedicated(mut self, policy: DedicatedPolicy) -> Self {
        self.desc.dedicated = policy;
        self
    }

    /// Asks for within-budget allocation.
    pub const fn within_budget(mut self) -> Self {
        self.desc.within_budget = true;
        self
    }

    /// Takes only memory that exists already
    /// ([`AllocationDesc::existing_memory_only`]).
    pub const fn existing_memory_only(mut self) -> Self {
        self.desc.existing_memory_only = true;
        self
    }

    /// Sets an alignment beyond the requirements'
    /// ([`AllocationDesc::min_alignment`]).
    pub const fn min_alignment(mut self, alignment: u64) -> Self {
        self.desc.min_alignment = alignment;
        self
    }

    /// The memory types the request may take: the resource's
    /// `memoryTypeBits` less those its description rules out.
    #[inline]
    pub(crate) fn type_bits(&self) -> u32 {
        self.requirements.memory_type_bits & !self.desc.excluded_memory_types
    }

    pub(crate) fn dedicated_choice(&self) -> DedicatedChoice {
        if self.driver_dedicated.required || self.desc.dedicated == DedicatedPolicy::Always {
            DedicatedChoice::Require
        } else if self.desc.dedicated == DedicatedPolicy::Never {
            DedicatedChoice::Never
        } else if self.driver_dedicated.preferred {
            DedicatedChoice::Prefer
        } else {
            DedicatedChoice::Auto
        }
    }
}
