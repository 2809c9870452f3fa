//! The eight fake memory architectures, modelled on real devices (a
//! discrete GPU with and without resizable BAR, AMD's device-coherent types,
//! Intel Arc, integrated and mobile GPUs, Apple silicon, Mali), the image
//! alignments of their drivers, and [`ALL`] of them for lookup by name.

use ash::vk;

use super::LAZILY_ALLOCATED;
use super::{all, FakeHeap, FakeType, ImageAlignment, Profile, GIB, MIB};
use super::{DEVICE_LOCAL, HEAP_DEVICE_LOCAL, HOST_CACHED, HOST_COHERENT, HOST_VISIBLE};

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
