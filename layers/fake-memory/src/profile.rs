//! The memory architectures the layer can fake.
//!
//! A profile is the part of a GPU's description an allocator depends on: its
//! memory heaps (how much memory, device-local or not), its memory types (which
//! heap, which property flags, whether optimal images may live there: linear
//! ones may live wherever buffers may) and the
//! limits that govern placement: `bufferImageGranularity` (linear and optimal
//! resources must not share a page of that size), `nonCoherentAtomSize` (the
//! unit of flushes and invalidates on non-coherent memory),
//! `maxMemoryAllocationCount` and the minimum alignments of buffers and images.
//! The figures are modelled on real devices but rounded for tests.

use ash::vk;

const MIB: u64 = 1024 * 1024;
const GIB: u64 = 1024 * MIB;

/// One fake memory heap.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FakeHeap {
    /// Capacity; allocations past it fail with `ERROR_OUT_OF_DEVICE_MEMORY`.
    pub size: u64,
    /// `VkMemoryHeapFlags` reported for the heap.
    pub flags: vk::MemoryHeapFlags,
}

/// One fake memory type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FakeType {
    /// `VkMemoryPropertyFlags` reported for the type.
    pub flags: vk::MemoryPropertyFlags,
    /// Index into the profile's heaps.
    pub heap: u32,
    /// Whether the memory requirements of optimal images offer this type.
    /// Buffers and linear images always may use it unless it is lazily
    /// allocated; a lazily allocated type is offered to transient-attachment
    /// images only (`memory_type_map.rs`).
    pub images: bool,
}

/// A complete fake memory architecture.
#[derive(Debug, PartialEq, Eq)]
pub struct Profile {
    /// Name used in the configuration string (`discrete`, `integrated`,
    /// `mobile`, `amd`, `rebar`, `arc`, `apple`, `mali`).
    pub name: &'static str,
    /// `VkPhysicalDeviceProperties::deviceType` reported by the layer.
    pub device_type: vk::PhysicalDeviceType,
    /// Heaps, at most `VK_MAX_MEMORY_HEAPS`.
    pub heaps: &'static [FakeHeap],
    /// Types, at most `VK_MAX_MEMORY_TYPES`.
    pub types: &'static [FakeType],
    /// `VkPhysicalDeviceLimits::bufferImageGranularity`.
    pub buffer_image_granularity: u64,
    /// `VkPhysicalDeviceLimits::nonCoherentAtomSize`.
    pub non_coherent_atom_size: u64,
    /// `VkPhysicalDeviceLimits::maxMemoryAllocationCount`.
    pub max_memory_allocation_count: u32,
    /// Lowest alignment reported in buffer memory requirements (lavapipe's
    /// own 64 is the floor: the layer raises alignments, never lowers them).
    /// The driver's figure, as the crate's `FakeLayout` of the same name has
    /// it (`BufferRequirements` in `src/device/fake/layout/requirements.rs`
    /// lists the drivers' figures and their sources; `profile_mirrors.rs`
    /// compares).
    pub min_buffer_alignment: u64,
    /// Buffer requirement sizes are rounded up to a multiple of this, as
    /// real drivers do (NVIDIA: 16 bytes, RADV and Turnip: the alignment,
    /// ANV: 4 for uniform and storage buffers under robust buffer access;
    /// lavapipe reports the buffer's own size). An allocation can then be longer than its buffer, and code
    /// that copies or checks an allocation's size worth of a buffer's bytes
    /// is caught (`VUID-vkCmdCopyBuffer-size-00115`).
    pub buffer_size_granule: u64,
    /// The alignment image memory requirements report, by tiling, size and
    /// depth/stencil format, as the driver the profile models answers it
    /// (the crate's `ImageRequirements` in
    /// `src/device/fake/layout/requirements.rs` lists the drivers' figures
    /// and their sources; `profile_mirrors.rs` compares).
    /// Lavapipe's own answer (16 on Mesa 22.3, 64 on later Mesa) is the
    /// floor: the layer raises alignments, never lowers them.
    pub image_alignment: ImageAlignment,
    /// Whether the device offers `VK_EXT_memory_budget` (with the layer's
    /// own figures), as the GPU it models does; without it the layer
    /// hides the extension, the driver's too, so an allocator falls back
    /// to its own accounting. The `budget=on|off` option overrides it.
    pub memory_budget: bool,
    /// Whether the device offers `VK_EXT_memory_priority` and its
    /// `memoryPriority` feature (emulated by the layer, `memory_priority.rs`),
    /// as the GPU it models does (NVIDIA's and AMD's drivers). The
    /// `priority=on|off` option overrides it.
    pub memory_priority: bool,
}

/// How a driver aligns images: optimal-tiling images by their size (the
/// driver's tiled layouts grow with the image), linear ones alike.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ImageAlignment {
    /// Optimal images smaller than [`large_from`](Self::large_from) bytes.
    pub optimal: u64,
    /// Optimal images of at least [`large_from`](Self::large_from) bytes.
    pub large: u64,
    /// The size (the driver's) from which optimal images take
    /// [`large`](Self::large); `u64::MAX`: none do.
    pub large_from: u64,
    /// Optimal depth/stencil images (a format with a depth or stencil
    /// aspect) at any size, where the driver lays them out apart from
    /// colour images; `None`: as colour images of their size.
    pub depth_stencil: Option<u64>,
    /// Linear-tiling images.
    pub linear: u64,
}

impl ImageAlignment {
    /// Every image aligned to `alignment` (the `image-alignment=N`
    /// option's).
    pub const fn flat(alignment: u64) -> Self {
        Self {
            optimal: alignment,
            large: alignment,
            large_from: u64::MAX,
            depth_stencil: None,
            linear: alignment,
        }
    }

    /// Optimal images aligned to `optimal`, linear ones to `linear`.
    pub const fn tiled(optimal: u64, linear: u64) -> Self {
        Self {
            optimal,
            large: optimal,
            large_from: u64::MAX,
            depth_stencil: None,
            linear,
        }
    }

    /// The same alignments with optimal images of at least `from` bytes
    /// aligned to `large`.
    pub const fn large(mut self, large: u64, from: u64) -> Self {
        self.large = large;
        self.large_from = from;
        self
    }

    /// The same alignments with optimal depth/stencil images aligned to
    /// `alignment` at any size.
    pub const fn depth_stencil(mut self, alignment: u64) -> Self {
        self.depth_stencil = Some(alignment);
        self
    }

    /// The alignment of an image of `size` bytes (the driver's size),
    /// linear or not, of a depth/stencil format or not.
    pub fn of(&self, size: u64, linear: bool, depth_stencil: bool) -> u64 {
        if linear {
            self.linear
        } else if let (Some(alignment), true) = (self.depth_stencil, depth_stencil) {
            alignment
        } else if size >= self.large_from {
            self.large.max(self.optimal)
        } else {
            self.optimal
        }
    }
}

/// NVIDIA's (NVK's figures; the proprietary driver's are unverified): 16 KiB
/// tiles from 128 KiB of image on.
const NVIDIA_IMAGES: ImageAlignment = ImageAlignment::flat(4096).large(16 * 1024, 128 * 1024);
/// ANV's on Xe-HPG (`arc`): the 4 KiB Tile4 tile, 64 for linear images.
const ANV_IMAGES: ImageAlignment = ImageAlignment::tiled(4096, 64);
/// ANV's on a Gen12 iGPU with an aux map (`integrated`): the aux map's
/// 64 KiB granularity for CCS-capable tiled surfaces, 64 for linear images.
const ANV_GEN12_IMAGES: ImageAlignment = ImageAlignment::tiled(64 * 1024, 64);
/// RADV's: 64 KiB swizzle blocks from 32 KiB of image on and for every
/// depth/stencil image, 256 for linear images.
const RADV_IMAGES: ImageAlignment = ImageAlignment::tiled(4096, 256)
    .large(64 * 1024, 32 * 1024)
    .depth_stencil(64 * 1024);
/// Turnip's: 4096 for UBWC and depth layouts, 64 for linear images.
const TURNIP_IMAGES: ImageAlignment = ImageAlignment::tiled(4096, 64);

const DEVICE_LOCAL: vk::MemoryPropertyFlags = vk::MemoryPropertyFlags::DEVICE_LOCAL;
const HOST_VISIBLE: vk::MemoryPropertyFlags = vk::MemoryPropertyFlags::HOST_VISIBLE;
const HOST_COHERENT: vk::MemoryPropertyFlags = vk::MemoryPropertyFlags::HOST_COHERENT;
const HOST_CACHED: vk::MemoryPropertyFlags = vk::MemoryPropertyFlags::HOST_CACHED;
const LAZILY_ALLOCATED: vk::MemoryPropertyFlags = vk::MemoryPropertyFlags::LAZILY_ALLOCATED;
const HEAP_DEVICE_LOCAL: vk::MemoryHeapFlags = vk::MemoryHeapFlags::DEVICE_LOCAL;

/// The union of property flags, usable in constants (ash's `|` is not `const`).
const fn all(flags: &[vk::MemoryPropertyFlags]) -> vk::MemoryPropertyFlags {
    let mut bits = 0;
    let mut i = 0;
    while i < flags.len() {
        bits |= flags[i].as_raw();
        i += 1;
    }
    vk::MemoryPropertyFlags::from_raw(bits)
}

/// A discrete GPU: 1 GiB of VRAM, 2 GiB of system memory and a 256 MiB
/// device-local, host-visible BAR window. Host memory types do not take
/// optimal images.
pub const DISCRETE: Profile = Profile {
    name: "discrete",
    device_type: vk::PhysicalDeviceType::DISCRETE_GPU,
    heaps: &[
        FakeHeap {
            size: GIB,
            flags: HEAP_DEVICE_LOCAL,
        },
        FakeHeap {
            size: 2 * GIB,
            flags: vk::MemoryHeapFlags::empty(),
        },
        FakeHeap {
            size: 256 * MIB,
            flags: HEAP_DEVICE_LOCAL,
        },
    ],
    types: &[
        FakeType {
            flags: DEVICE_LOCAL,
            heap: 0,
            images: true,
        },
        FakeType {
            flags: all(&[HOST_VISIBLE, HOST_COHERENT]),
            heap: 1,
            images: false,
        },
        FakeType {
            flags: all(&[HOST_VISIBLE, HOST_CACHED]),
            heap: 1,
            images: false,
        },
        FakeType {
            flags: all(&[DEVICE_LOCAL, HOST_VISIBLE, HOST_COHERENT]),
            heap: 2,
            images: true,
        },
    ],
    buffer_image_granularity: 1024,
    non_coherent_atom_size: 256,
    max_memory_allocation_count: 4096,
    min_buffer_alignment: 256,
    buffer_size_granule: 16,
    image_alignment: NVIDIA_IMAGES,
    memory_budget: true,
    memory_priority: true,
};

/// An integrated GPU: one 2 GiB device-local heap shared with the host; every
/// type is device-local, the host-visible ones coherent.
pub const INTEGRATED: Profile = Profile {
    name: "integrated",
    device_type: vk::PhysicalDeviceType::INTEGRATED_GPU,
    heaps: &[FakeHeap {
        size: 2 * GIB,
        flags: HEAP_DEVICE_LOCAL,
    }],
    types: &[
        FakeType {
            flags: DEVICE_LOCAL,
            heap: 0,
            images: true,
        },
        FakeType {
            flags: all(&[DEVICE_LOCAL, HOST_VISIBLE, HOST_COHERENT]),
            heap: 0,
            images: true,
        },
        FakeType {
            flags: all(&[DEVICE_LOCAL, HOST_VISIBLE, HOST_COHERENT, HOST_CACHED]),
            heap: 0,
            images: true,
        },
    ],
    buffer_image_granularity: 64,
    non_coherent_atom_size: 64,
    max_memory_allocation_count: 4096,
    min_buffer_alignment: 64,
    buffer_size_granule: 1,
    image_alignment: ANV_GEN12_IMAGES,
    memory_budget: false,
    memory_priority: false,
};

/// A mobile GPU: one small (256 MiB) unified heap; the first host-visible type
/// is cached and not coherent, so a missing flush or invalidate is caught.
/// The last type is lazily allocated, as on tile-based GPUs (Mali, Adreno):
/// device-local, never host-visible, and offered only to images created with
/// `VK_IMAGE_USAGE_TRANSIENT_ATTACHMENT_BIT`, whose contents may live in tile
/// memory alone.
pub const MOBILE: Profile = Profile {
    name: "mobile",
    device_type: vk::PhysicalDeviceType::INTEGRATED_GPU,
    heaps: &[FakeHeap {
        size: 256 * MIB,
        flags: HEAP_DEVICE_LOCAL,
    }],
    types: &[
        FakeType {
            flags: DEVICE_LOCAL,
            heap: 0,
            images: true,
        },
        FakeType {
            flags: all(&[DEVICE_LOCAL, HOST_VISIBLE, HOST_CACHED]),
            heap: 0,
            images: true,
        },
        FakeType {
            flags: all(&[DEVICE_LOCAL, HOST_VISIBLE, HOST_COHERENT]),
            heap: 0,
            images: true,
        },
        FakeType {
            flags: all(&[DEVICE_LOCAL, LAZILY_ALLOCATED]),
            heap: 0,
            images: true,
        },
    ],
    buffer_image_granularity: 4096,
    non_coherent_atom_size: 128,
    max_memory_allocation_count: 1024,
    min_buffer_alignment: 64,
    buffer_size_granule: 64,
    image_alignment: TURNIP_IMAGES,
    memory_budget: false,
    memory_priority: false,
};

/// `VK_MEMORY_PROPERTY_DEVICE_COHERENT_BIT_AMD | DEVICE_UNCACHED_BIT_AMD`.
const AMD_COHERENT: vk::MemoryPropertyFlags = all(&[
    vk::MemoryPropertyFlags::DEVICE_COHERENT_AMD,
    vk::MemoryPropertyFlags::DEVICE_UNCACHED_AMD,
]);

/// A discrete AMD GPU as RADV reports it where `VK_AMD_device_coherent_memory`
/// is supported: the heaps of [`DISCRETE`], four memory types (device-local,
/// host coherent, the BAR, host cached), then the same four again with
/// `DEVICE_COHERENT_BIT_AMD | DEVICE_UNCACHED_BIT_AMD`. The device never
/// enables `deviceCoherentMemory` here, so the validation layer reports any
/// allocation from types 4–7 (VUID-vkAllocateMemory-deviceCoherentMemory-02790).
pub const AMD: Profile = Profile {
    name: "amd",
    device_type: vk::PhysicalDeviceType::DISCRETE_GPU,
    heaps: DISCRETE.heaps,
    types: &[
        FakeType {
            flags: DEVICE_LOCAL,
            heap: 0,
            images: true,
        },
        FakeType {
            flags: all(&[HOST_VISIBLE, HOST_COHERENT]),
            heap: 1,
            images: false,
        },
        FakeType {
            flags: all(&[DEVICE_LOCAL, HOST_VISIBLE, HOST_COHERENT]),
            heap: 2,
            images: true,
        },
        FakeType {
            flags: all(&[HOST_VISIBLE, HOST_COHERENT, HOST_CACHED]),
            heap: 1,
            images: false,
        },
        FakeType {
            flags: all(&[DEVICE_LOCAL, AMD_COHERENT]),
            heap: 0,
            images: true,
        },
        FakeType {
            flags: all(&[HOST_VISIBLE, HOST_COHERENT, AMD_COHERENT]),
            heap: 1,
            images: false,
        },
        FakeType {
            flags: all(&[DEVICE_LOCAL, HOST_VISIBLE, HOST_COHERENT, AMD_COHERENT]),
            heap: 2,
            images: true,
        },
        FakeType {
            flags: all(&[HOST_VISIBLE, HOST_COHERENT, HOST_CACHED, AMD_COHERENT]),
            heap: 1,
            images: false,
        },
    ],
    buffer_image_granularity: 64,
    non_coherent_atom_size: 64,
    max_memory_allocation_count: 4096,
    min_buffer_alignment: 16,
    // RADV rounds a buffer's size to its alignment (`align64(size, 16)`).
    buffer_size_granule: 16,
    image_alignment: RADV_IMAGES,
    memory_budget: true,
    memory_priority: true,
};

/// A discrete GPU with resizable BAR (NVIDIA's ReBAR, AMD's Smart Access
/// Memory): the host can map all of VRAM, so the device-local, host-visible
/// type lives in the VRAM heap itself rather than in a 256 MiB window heap of
/// its own, and host-visible VRAM competes with device-only VRAM for one heap
/// and one budget. Types as NVIDIA lists them with ReBAR on: device-local,
/// host coherent, host coherent cached, then device-local host-visible in
/// heap 0.
pub const REBAR: Profile = Profile {
    name: "rebar",
    device_type: vk::PhysicalDeviceType::DISCRETE_GPU,
    heaps: &[
        FakeHeap {
            size: GIB,
            flags: HEAP_DEVICE_LOCAL,
        },
        FakeHeap {
            size: 2 * GIB,
            flags: vk::MemoryHeapFlags::empty(),
        },
    ],
    types: &[
        FakeType {
            flags: DEVICE_LOCAL,
            heap: 0,
            images: true,
        },
        FakeType {
            flags: all(&[HOST_VISIBLE, HOST_COHERENT]),
            heap: 1,
            images: false,
        },
        FakeType {
            flags: all(&[HOST_VISIBLE, HOST_COHERENT, HOST_CACHED]),
            heap: 1,
            images: false,
        },
        FakeType {
            flags: all(&[DEVICE_LOCAL, HOST_VISIBLE, HOST_COHERENT]),
            heap: 0,
            images: true,
        },
    ],
    buffer_image_granularity: 1024,
    non_coherent_atom_size: 64,
    max_memory_allocation_count: 4096,
    min_buffer_alignment: 256,
    buffer_size_granule: 16,
    image_alignment: NVIDIA_IMAGES,
    memory_budget: true,
    memory_priority: true,
};

/// An Intel Arc discrete GPU without resizable BAR, as Mesa's ANV reports it
/// (`FakeLayout::intel_arc` in the crate's fake device): VRAM split into a
/// heap the host cannot map and the 256 MiB it can (a heap of its own), and a
/// system-memory heap whose only type is host-visible, coherent *and cached*:
/// there is no write-combined system-memory type, so the only uncached
/// host-visible memory is the small BAR. Types: device-local, host
/// coherent cached (no optimal images, as [`DISCRETE`]'s host types), then
/// device-local host-visible coherent in the BAR heap. `bufferImageGranularity`
/// 1 and no allocation-count limit to speak of, as ANV reports them. The VRAM
/// and system heaps are scaled down for tests (ANV: 15.75 GiB and the
/// system's RAM) but stay above 1 GiB, where allocators size blocks as for a
/// large heap; the BAR heap is the real 256 MiB.
pub const ARC: Profile = Profile {
    name: "arc",
    device_type: vk::PhysicalDeviceType::DISCRETE_GPU,
    heaps: &[
        FakeHeap {
            size: 2 * GIB - 256 * MIB,
            flags: HEAP_DEVICE_LOCAL,
        },
        FakeHeap {
            size: 2 * GIB,
            flags: vk::MemoryHeapFlags::empty(),
        },
        FakeHeap {
            size: 256 * MIB,
            flags: HEAP_DEVICE_LOCAL,
        },
    ],
    types: &[
        FakeType {
            flags: DEVICE_LOCAL,
            heap: 0,
            images: true,
        },
        FakeType {
            flags: all(&[HOST_VISIBLE, HOST_COHERENT, HOST_CACHED]),
            heap: 1,
            images: false,
        },
        FakeType {
            flags: all(&[DEVICE_LOCAL, HOST_VISIBLE, HOST_COHERENT]),
            heap: 2,
            images: true,
        },
    ],
    buffer_image_granularity: 1,
    non_coherent_atom_size: 64,
    max_memory_allocation_count: u32::MAX,
    min_buffer_alignment: 64,
    buffer_size_granule: 4,
    image_alignment: ANV_IMAGES,
    memory_budget: true,
    memory_priority: false,
};

/// An Apple-silicon Mac through MoltenVK (`FakeLayout::apple`): one unified
/// heap, every type device-local; Metal's private storage, then *managed*
/// storage (host-visible, cached, not coherent), listed before *shared*
/// storage (host-visible, coherent, cached). An allocator that takes the
/// first host-visible type for uploads or readback gets the non-coherent
/// one, and the layer's host cache then shows any missing flush or
/// invalidate. `bufferImageGranularity` and `nonCoherentAtomSize` are 16,
/// Metal's buffer alignment on Apple GPUs. The heap is scaled down for tests
/// (the Mac's RAM) but stays above 1 GiB.
pub const APPLE: Profile = Profile {
    name: "apple",
    device_type: vk::PhysicalDeviceType::INTEGRATED_GPU,
    heaps: &[FakeHeap {
        size: 2 * GIB,
        flags: HEAP_DEVICE_LOCAL,
    }],
    types: &[
        FakeType {
            flags: DEVICE_LOCAL,
            heap: 0,
            images: true,
        },
        FakeType {
            flags: all(&[DEVICE_LOCAL, HOST_VISIBLE, HOST_CACHED]),
            heap: 0,
            images: true,
        },
        FakeType {
            flags: all(&[DEVICE_LOCAL, HOST_VISIBLE, HOST_COHERENT, HOST_CACHED]),
            heap: 0,
            images: true,
        },
    ],
    buffer_image_granularity: 16,
    non_coherent_atom_size: 16,
    max_memory_allocation_count: 4096,
    min_buffer_alignment: 16,
    buffer_size_granule: 1,
    image_alignment: ImageAlignment::flat(4096),
    memory_budget: false,
    memory_priority: false,
};

/// A Mali GPU as Arm's driver reports it (`FakeLayout::mali`): one heap and
/// no device-local type the host cannot map, so GPU-only data lives in a
/// host-visible type; types device-local host-visible coherent, the same
/// and cached, then a lazily allocated type that, as on [`MOBILE`], only
/// transient-attachment images are offered. `bufferImageGranularity` 4096,
/// `nonCoherentAtomSize` 64. The heap is scaled down for tests (2 GiB, the
/// device's 4 GiB halved) but stays above 1 GiB.
pub const MALI: Profile = Profile {
    name: "mali",
    device_type: vk::PhysicalDeviceType::INTEGRATED_GPU,
    heaps: &[FakeHeap {
        size: 2 * GIB,
        flags: HEAP_DEVICE_LOCAL,
    }],
    types: &[
        FakeType {
            flags: all(&[DEVICE_LOCAL, HOST_VISIBLE, HOST_COHERENT]),
            heap: 0,
            images: true,
        },
        FakeType {
            flags: all(&[DEVICE_LOCAL, HOST_VISIBLE, HOST_COHERENT, HOST_CACHED]),
            heap: 0,
            images: true,
        },
        FakeType {
            flags: all(&[DEVICE_LOCAL, LAZILY_ALLOCATED]),
            heap: 0,
            images: true,
        },
    ],
    buffer_image_granularity: 4096,
    non_coherent_atom_size: 64,
    max_memory_allocation_count: 4096,
    min_buffer_alignment: 64,
    buffer_size_granule: 1,
    image_alignment: ImageAlignment::flat(4096),
    memory_budget: false,
    memory_priority: false,
};

/// Every profile, for lookup by name.
pub const ALL: [&Profile; 8] = [
    &DISCRETE,
    &INTEGRATED,
    &MOBILE,
    &AMD,
    &REBAR,
    &ARC,
    &APPLE,
    &MALI,
];

/// Checked at compile time: every profile fits Vulkan's fixed-size arrays,
/// points its types at existing heaps, follows the specification's rules for
/// memory types ([`valid_memory_types`]) and uses power-of-two limits.
const _VALID_PROFILES: () = {
    let mut p = 0;
    while p < ALL.len() {
        let profile = ALL[p];
        assert!(profile.heaps.len() <= vk::MAX_MEMORY_HEAPS);
        assert!(profile.types.len() <= vk::MAX_MEMORY_TYPES);
        let mut t = 0;
        while t < profile.types.len() {
            assert!((profile.types[t].heap as usize) < profile.heaps.len());
            t += 1;
        }
        if let Err(rule) = valid_memory_types(profile.heaps, profile.types) {
            panic!("{}", rule);
        }
        assert!(profile.buffer_image_granularity.is_power_of_two());
        assert!(profile.non_coherent_atom_size.is_power_of_two());
        assert!(profile.min_buffer_alignment.is_power_of_two());
        let images = profile.image_alignment;
        assert!(images.optimal.is_power_of_two());
        assert!(images.large.is_power_of_two() && images.large >= images.optimal);
        assert!(images.linear.is_power_of_two());
        if let Some(depth_stencil) = images.depth_stencil {
            assert!(depth_stencil.is_power_of_two());
        }
        p += 1;
    }
};

/// The specification's rules for `VkPhysicalDeviceMemoryProperties` that a
/// profile's heaps and types could break (chapter "Device Memory"), or the
/// first one broken. `types` point at existing heaps (checked before).
///
/// - A type is `DEVICE_LOCAL` if and only if its heap is
///   (`VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT`'s description).
/// - Its flags are one of the combinations the specification lists: host
///   visible with coherent and/or cached, never coherent or cached without
///   host visible; lazily allocated or protected never host-visible (nor
///   lazily allocated without device-local); AMD's device-uncached only with
///   device-coherent.
/// - Order: a type whose flags are a strict subset of another's, or that
///   lacks AMD's device-coherent or device-uncached bits another has, comes
///   first.
/// - Some type is host-visible and host-coherent, and some is device-local.
// Used by `_VALID_PROFILES`, which the dead-code lint does not count.
#[allow(dead_code)]
const fn valid_memory_types(heaps: &[FakeHeap], types: &[FakeType]) -> Result<(), &'static str> {
    const fn has(flags: u32, bit: vk::MemoryPropertyFlags) -> bool {
        flags & bit.as_raw() != 0
    }
    let amd = vk::MemoryPropertyFlags::DEVICE_COHERENT_AMD.as_raw()
        | vk::MemoryPropertyFlags::DEVICE_UNCACHED_AMD.as_raw();
    let host_access = HOST_VISIBLE.as_raw() | HOST_COHERENT.as_raw() | HOST_CACHED.as_raw();
    let device_only = LAZILY_ALLOCATED.as_raw() | vk::MemoryPropertyFlags::PROTECTED.as_raw();
    let mut host_coherent = false;
    let mut device_local = false;
    let mut x = 0;
    while x < types.len() {
        let flags = types[x].flags.as_raw();
        let heap_flags = heaps[types[x].heap as usize].flags.as_raw();
        if has(flags, DEVICE_LOCAL) != (heap_flags & HEAP_DEVICE_LOCAL.as_raw() != 0) {
            return Err("a type is DEVICE_LOCAL if and only if its heap is");
        }
        if has(flags, HOST_VISIBLE) != (has(flags, HOST_COHERENT) || has(flags, HOST_CACHED)) {
            return Err("host-visible types are coherent or cached, and only they");
        }
        if flags & device_only != 0 && flags & host_access != 0 {
            return Err("a lazily allocated or protected type is not host-visible");
        }
        if has(flags, LAZILY_ALLOCATED) && !has(flags, DEVICE_LOCAL) {
            return Err("a lazily allocated type is device-local");
        }
        if has(flags, vk::MemoryPropertyFlags::DEVICE_UNCACHED_AMD)
            && !has(flags, vk::MemoryPropertyFlags::DEVICE_COHERENT_AMD)
        {
            return Err("a device-uncached type is device-coherent");
        }
        host_coherent |= has(flags, HOST_VISIBLE) && has(flags, HOST_COHERENT);
        device_local |= has(flags, DEVICE_LOCAL);
        let mut y = 0;
        while y < x {
            // `y` comes before `x`: wrong if `x`'s flags are a strict subset
            // of `y`'s, or `y` has AMD bits `x` lacks.
            let earlier = types[y].flags.as_raw();
            if (flags & earlier == flags && flags != earlier)
                || (earlier & amd != 0 && flags & amd == 0)
            {
                return Err(
                    "types are ordered: subsets of flags first, AMD's device-coherent last",
                );
            }
            y += 1;
        }
        x += 1;
    }
    if !host_coherent {
        return Err("some type is host-visible and host-coherent");
    }
    if !device_local {
        return Err("some type is device-local");
    }
    Ok(())
}

impl Profile {
    /// Looks a profile up by its configuration name.
    pub fn by_name(name: &str) -> Option<&'static Profile> {
        ALL.into_iter().find(|profile| profile.name == name)
    }

    /// The fake `VkPhysicalDeviceMemoryProperties`.
    pub fn memory_properties(&self) -> vk::PhysicalDeviceMemoryProperties {
        let mut properties = vk::PhysicalDeviceMemoryProperties::default();
        for (slot, heap) in properties.memory_heaps.iter_mut().zip(self.heaps) {
            *slot = vk::MemoryHeap {
                size: heap.size,
                flags: heap.flags,
            };
        }
        for (slot, memory_type) in properties.memory_types.iter_mut().zip(self.types) {
            *slot = vk::MemoryType {
                property_flags: memory_type.flags,
                heap_index: memory_type.heap,
            };
        }
        // Both lengths are checked against the array sizes at compile time.
        properties.memory_heap_count = self.heaps.len() as u32;
        properties.memory_type_count = self.types.len() as u32;
        properties
    }
}

#[cfg(test)]
mod tests;
