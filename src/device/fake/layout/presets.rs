//! The preset layouts, one per kind of GPU ([`FakeLayout::discrete`],
//! [`FakeLayout::amd`], ...): memory types, heaps and limits as each kind's
//! drivers report them, and the drivers' buffer and image requirements they
//! take.

use ash::vk;
use gpu_alloc_types::{MemoryHeap, MemoryPropertyFlags as Props, MemoryType};

use super::{BufferRequirements, FakeLayout, ImageRequirements};

const MIB: u64 = 1 << 20;
const GIB: u64 = 1 << 30;

/// RADV's answer (`amd`): 64 KiB swizzle blocks from about 32 KiB on, and
/// for every depth/stencil image.
const RADV_IMAGES: ImageRequirements = ImageRequirements::tiled(4096, 256)
    .large(1 << 16, 32 << 10)
    .depth_stencil(1 << 16);
/// NVK's answer, for the NVIDIA presets: 16 KiB tiles for tall images.
const NVIDIA_IMAGES: ImageRequirements = ImageRequirements::flat(4096).large(16 << 10, 128 << 10);
/// ANV's answer on Xe-HPG (`intel_arc`): the 4 KiB tile.
const ANV_IMAGES: ImageRequirements = ImageRequirements::tiled(4096, 64);
/// ANV's answer on a Gen12 iGPU with an aux map (`integrated`): 64 KiB
/// for CCS-capable tiled surfaces.
const ANV_GEN12_IMAGES: ImageRequirements = ImageRequirements::tiled(64 << 10, 64);

/// NVIDIA's answer (`discrete`, `rebar`).
const NVIDIA_BUFFERS: BufferRequirements = BufferRequirements::new(256, 16);
/// ANV's answer (`integrated`, `intel_arc`).
const ANV_BUFFERS: BufferRequirements = BufferRequirements {
    alignment: 64,
    usage_alignment: (vk::BufferUsageFlags::empty(), 1),
    size_granule: 1,
    usage_size_granule: (
        vk::BufferUsageFlags::from_raw(
            vk::BufferUsageFlags::UNIFORM_BUFFER.as_raw()
                | vk::BufferUsageFlags::STORAGE_BUFFER.as_raw(),
        ),
        4,
    ),
    memory_type_bits: !0,
};
/// RADV's answer (`amd`): the size is rounded to the alignment, 64 for
/// acceleration-structure storage.
const RADV_BUFFERS: BufferRequirements = BufferRequirements {
    alignment: 16,
    usage_alignment: (vk::BufferUsageFlags::ACCELERATION_STRUCTURE_STORAGE_KHR, 64),
    size_granule: 16,
    usage_size_granule: (vk::BufferUsageFlags::ACCELERATION_STRUCTURE_STORAGE_KHR, 64),
    memory_type_bits: !0,
};

fn ty(heap: u32, props: Props) -> MemoryType {
    MemoryType { heap, props }
}

impl FakeLayout {
    /// A discrete GPU as NVIDIA drivers report it without resizable BAR: an
    /// 8 GiB device-local heap, a 16 GiB system heap, and a 256 MiB heap of
    /// device-local memory the host can write through the PCIe BAR (the
    /// usual BAR window; with resizable BAR it spans the whole VRAM).
    /// Types: 0 plain system memory (no flags), 1 device-local, 2 host-visible
    /// coherent, 3 host-visible coherent cached, 4 device-local host-visible
    /// coherent (the BAR). `bufferImageGranularity` 1024.
    pub fn discrete() -> Self {
        Self {
            name: "discrete",
            memory_types: vec![
                ty(1, Props::empty()),
                ty(0, Props::DEVICE_LOCAL),
                ty(1, Props::HOST_VISIBLE | Props::HOST_COHERENT),
                ty(
                    1,
                    Props::HOST_VISIBLE | Props::HOST_COHERENT | Props::HOST_CACHED,
                ),
                ty(
                    2,
                    Props::DEVICE_LOCAL | Props::HOST_VISIBLE | Props::HOST_COHERENT,
                ),
            ],
            memory_heaps: vec![
                MemoryHeap { size: 8 * GIB },
                MemoryHeap { size: 16 * GIB },
                MemoryHeap { size: 256 * MIB },
            ],
            buffer_image_granularity: 1024,
            non_coherent_atom_size: 64,
            max_memory_allocation_count: 4096,
            max_memory_allocation_size: 4 * GIB,
            // NVIDIA reports 2^40 (1 TiB): seen in a published
            // vulkaninfo of an RTX 3050 on Windows; unverified on other
            // drivers and on Linux.
            max_buffer_size: 1 << 40,
            memory_budget: true,
            buffer_device_address: true,
            amd_device_coherent_types: 0,
            amd_device_coherent_memory: false,
            protected_memory: false,
            exportable_handle_types: None,
            buffer_requirements: NVIDIA_BUFFERS,
            image_requirements: NVIDIA_IMAGES,
        }
    }

    /// An integrated GPU sharing system memory: one 4 GiB device-local heap;
    /// types 0 device-local, 1 device-local host-visible coherent, 2 the same
    /// and cached. No budget extension.
    pub fn integrated() -> Self {
        let all = Props::DEVICE_LOCAL | Props::HOST_VISIBLE | Props::HOST_COHERENT;
        Self {
            name: "integrated",
            memory_types: vec![
                ty(0, Props::DEVICE_LOCAL),
                ty(0, all),
                ty(0, all | Props::HOST_CACHED),
            ],
            memory_heaps: vec![MemoryHeap { size: 4 * GIB }],
            buffer_image_granularity: 1,
            non_coherent_atom_size: 64,
            max_memory_allocation_count: 4096,
            max_memory_allocation_size: 2 * GIB,
            // Intel's ANV: `isl_dev.max_buffer_size`, 2^32 on gen9 and
            // later (Mesa's isl.c).
            max_buffer_size: 4 * GIB,
            memory_budget: false,
            buffer_device_address: true,
            amd_device_coherent_types: 0,
            amd_device_coherent_memory: false,
            protected_memory: false,
            exportable_handle_types: None,
            buffer_requirements: ANV_BUFFERS,
            image_requirements: ANV_GEN12_IMAGES,
        }
    }

    /// A mobile GPU: one 2 GiB heap; types 0 device-local, 1 device-local
    /// host-visible coherent (write-combined), 2 device-local host-visible
    /// *cached, non-coherent* (readback needs invalidation, uploads need
    /// flushes at 256-byte atoms), 3 lazily allocated (transient attachments).
    /// `bufferImageGranularity` 4096.
    pub fn mobile() -> Self {
        Self {
            name: "mobile",
            memory_types: vec![
                ty(0, Props::DEVICE_LOCAL),
                ty(
                    0,
                    Props::DEVICE_LOCAL | Props::HOST_VISIBLE | Props::HOST_COHERENT,
                ),
                ty(
                    0,
                    Props::DEVICE_LOCAL | Props::HOST_VISIBLE | Props::HOST_CACHED,
                ),
                ty(0, Props::DEVICE_LOCAL | Props::LAZILY_ALLOCATED),
            ],
            memory_heaps: vec![MemoryHeap { size: 2 * GIB }],
            buffer_image_granularity: 4096,
            non_coherent_atom_size: 256,
            max_memory_allocation_count: 4096,
            max_memory_allocation_size: GIB,
            // Vulkan's required minimum (2^30), as maxMemoryAllocationSize
            // here; not taken from a driver.
            max_buffer_size: GIB,
            memory_budget: false,
            buffer_device_address: false,
            amd_device_coherent_types: 0,
            amd_device_coherent_memory: false,
            protected_memory: false,
            exportable_handle_types: None,
            buffer_requirements: BufferRequirements::new(64, 64),
            image_requirements: ImageRequirements::tiled(4096, 64),
        }
    }

    /// A discrete GPU with resizable BAR (NVIDIA's ReBAR, AMD's Smart Access
    /// Memory): the host can map all of VRAM, so the device-local
    /// host-visible type is in the 8 GiB VRAM heap (no 256 MiB BAR heap), and
    /// blocks of it compete with device-only blocks for that heap's budget.
    /// Types as [`discrete`](Self::discrete) with the BAR type (4) moved to
    /// heap 0. `bufferImageGranularity` 1024.
    pub fn rebar() -> Self {
        let mut layout = Self::discrete();
        layout.name = "rebar";
        layout.memory_types[4].heap = 0;
        layout.memory_heaps.truncate(2);
        layout
    }

    /// A discrete AMD GPU as RADV reports it when `VK_AMD_device_coherent_memory`
    /// is supported: an 8 GiB device-local heap, a 16 GiB system heap and a
    /// 256 MiB BAR heap; types 0 device-local, 1 host-visible coherent, 2
    /// device-local host-visible coherent (the BAR), 3 host-visible coherent
    /// cached, then 4–7 the same four with `DEVICE_COHERENT_BIT_AMD |
    /// DEVICE_UNCACHED_BIT_AMD` (which `gpu-alloc-types` cannot express: the
    /// `amd_device_coherent_types` mask says which they are). The feature is
    /// off, as in most engines. `bufferImageGranularity` 64.
    pub fn amd() -> Self {
        let normal = [
            ty(0, Props::DEVICE_LOCAL),
            ty(1, Props::HOST_VISIBLE | Props::HOST_COHERENT),
            ty(
                2,
                Props::DEVICE_LOCAL | Props::HOST_VISIBLE | Props::HOST_COHERENT,
            ),
            ty(
                1,
                Props::HOST_VISIBLE | Props::HOST_COHERENT | Props::HOST_CACHED,
            ),
        ];
        Self {
            name: "amd",
            memory_types: normal.iter().chain(normal.iter()).copied().collect(),
            memory_heaps: vec![
                MemoryHeap { size: 8 * GIB },
                MemoryHeap { size: 16 * GIB },
                MemoryHeap { size: 256 * MIB },
            ],
            buffer_image_granularity: 64,
            non_coherent_atom_size: 64,
            max_memory_allocation_count: 4096,
            max_memory_allocation_size: 4 * GIB,
            // RADV's RADV_MAX_MEMORY_ALLOCATION_SIZE (Mesa's
            // radv_constants.h): 2^32 - 1 rounded down to 4 bytes. AMDVLK's
            // value unverified.
            max_buffer_size: 0xFFFF_FFFC,
            memory_budget: true,
            buffer_device_address: true,
            amd_device_coherent_types: 0b1111_0000,
            amd_device_coherent_memory: false,
            protected_memory: false,
            exportable_handle_types: None,
            buffer_requirements: RADV_BUFFERS,
            image_requirements: RADV_IMAGES,
        }
    }

    /// Lavapipe (Mesa's CPU driver): one 2 GiB heap, one type that is
    /// everything at once. `bufferImageGranularity` 64.
    pub fn lavapipe() -> Self {
        Self {
            name: "lavapipe",
            memory_types: vec![ty(
                0,
                Props::DEVICE_LOCAL
                    | Props::HOST_VISIBLE
                    | Props::HOST_COHERENT
                    | Props::HOST_CACHED,
            )],
            memory_heaps: vec![MemoryHeap { size: 2 * GIB }],
            buffer_image_granularity: 64,
            non_coherent_atom_size: 64,
            max_memory_allocation_count: 4096,
            max_memory_allocation_size: 2 * GIB,
            // What vulkaninfo shows for lavapipe (Mesa 22.3.6, API 1.3.230):
            // 0xffffffff.
            max_buffer_size: u64::from(u32::MAX),
            memory_budget: false,
            buffer_device_address: true,
            amd_device_coherent_types: 0,
            amd_device_coherent_memory: false,
            protected_memory: false,
            exportable_handle_types: None,
            buffer_requirements: BufferRequirements::new(64, 1),
            image_requirements: ImageRequirements::flat(16),
        }
    }

    /// An Intel Arc discrete GPU without resizable BAR, as Mesa's ANV driver
    /// reports it: VRAM split into a 15.75 GiB heap the host cannot map
    /// (heap 0) and the 256 MiB the host can (heap 2), and a 16 GiB system
    /// heap (heap 1). Types: 0 device-local, 1 host-visible coherent
    /// *cached* (the only system-memory type: no write-combined one), 2
    /// device-local host-visible coherent (the BAR). `bufferImageGranularity`
    /// 1, `maxMemoryAllocationCount` `u32::MAX`, as ANV reports them.
    pub fn intel_arc() -> Self {
        Self {
            name: "intel-arc",
            memory_types: vec![
                ty(0, Props::DEVICE_LOCAL),
                ty(
                    1,
                    Props::HOST_VISIBLE | Props::HOST_COHERENT | Props::HOST_CACHED,
                ),
                ty(
                    2,
                    Props::DEVICE_LOCAL | Props::HOST_VISIBLE | Props::HOST_COHERENT,
                ),
            ],
            memory_heaps: vec![
                MemoryHeap {
                    size: 16 * GIB - 256 * MIB,
                },
                MemoryHeap { size: 16 * GIB },
                MemoryHeap { size: 256 * MIB },
            ],
            buffer_image_granularity: 1,
            non_coherent_atom_size: 64,
            max_memory_allocation_count: u32::MAX,
            max_memory_allocation_size: 4 * GIB,
            // ANV's, as `integrated`: 2^32 on gen9 and later (Mesa's
            // isl.c).
            max_buffer_size: 4 * GIB,
            memory_budget: true,
            buffer_device_address: true,
            amd_device_coherent_types: 0,
            amd_device_coherent_memory: false,
            protected_memory: false,
            exportable_handle_types: None,
            buffer_requirements: ANV_BUFFERS,
            image_requirements: ANV_IMAGES,
        }
    }

    /// An Apple-silicon Mac through MoltenVK: one 16 GiB unified heap; types
    /// 0 device-local (Metal's private storage), 1 device-local host-visible
    /// *cached, non-coherent* (managed storage, listed before the coherent
    /// type), 2 device-local host-visible coherent cached (shared storage).
    /// `bufferImageGranularity` and `nonCoherentAtomSize` 16 (Metal's
    /// buffer alignment). No budget extension.
    pub fn apple() -> Self {
        let host = Props::DEVICE_LOCAL | Props::HOST_VISIBLE | Props::HOST_CACHED;
        Self {
            name: "apple",
            memory_types: vec![
                ty(0, Props::DEVICE_LOCAL),
                ty(0, host),
                ty(0, host | Props::HOST_COHERENT),
            ],
            memory_heaps: vec![MemoryHeap { size: 16 * GIB }],
            buffer_image_granularity: 16,
            non_coherent_atom_size: 16,
            max_memory_allocation_count: 4096,
            max_memory_allocation_size: 4 * GIB,
            // As maxMemoryAllocationSize here; MoltenVK's own value
            // unverified.
            max_buffer_size: 4 * GIB,
            memory_budget: false,
            buffer_device_address: true,
            amd_device_coherent_types: 0,
            amd_device_coherent_memory: false,
            protected_memory: false,
            exportable_handle_types: None,
            buffer_requirements: BufferRequirements::new(16, 1),
            image_requirements: ImageRequirements::flat(4096),
        }
    }

    /// A Mali GPU as Arm's driver reports it: one 4 GiB heap and no
    /// device-local type the host cannot map. Types: 0 device-local
    /// host-visible coherent, 1 the same and cached, 2 lazily allocated.
    /// `bufferImageGranularity` 4096, `nonCoherentAtomSize` 64.
    pub fn mali() -> Self {
        let mappable = Props::DEVICE_LOCAL | Props::HOST_VISIBLE | Props::HOST_COHERENT;
        Self {
            name: "mali",
            memory_types: vec![
                ty(0, mappable),
                ty(0, mappable | Props::HOST_CACHED),
                ty(0, Props::DEVICE_LOCAL | Props::LAZILY_ALLOCATED),
            ],
            memory_heaps: vec![MemoryHeap { size: 4 * GIB }],
            buffer_image_granularity: 4096,
            non_coherent_atom_size: 64,
            max_memory_allocation_count: 4096,
            max_memory_allocation_size: 2 * GIB,
            // As maxMemoryAllocationSize here; Arm's value unverified.
            max_buffer_size: 2 * GIB,
            memory_budget: false,
            buffer_device_address: true,
            amd_device_coherent_types: 0,
            amd_device_coherent_memory: false,
            protected_memory: false,
            exportable_handle_types: None,
            buffer_requirements: BufferRequirements::new(64, 1),
            image_requirements: ImageRequirements::flat(4096),
        }
    }

    /// Every preset above, in the order they are listed: for a test that
    /// should hold on each device this fake device models.
    pub fn presets() -> [Self; 9] {
        [
            Self::discrete(),
            Self::integrated(),
            Self::mobile(),
            Self::rebar(),
            Self::amd(),
            Self::lavapipe(),
            Self::intel_arc(),
            Self::apple(),
            Self::mali(),
        ]
    }
}
