//! Custom pools that export their memory (`PoolDesc::export`): every memory
//! object such a pool makes, its `min_blocks`, the blocks it grows and its
//! dedicated memory, is allocated with `VkExportMemoryAllocateInfo`, as the
//! fake device records; the default pools' memory and other pools' never
//! is. Handle types the device cannot export are refused at `create_pool`.

use crate::FakeTarget;
use std::collections::HashSet;

use ash::vk;
use vk_suballoc::device::fake::FakeLayout;
use vk_suballoc::device::{DedicatedHint, DedicatedTarget};
use vk_suballoc::{
    AllocationDesc, DedicatedPolicy, DefragmentationLimits, Error, Pool, PoolDesc, Request,
    ResourceKind, Usage,
};

use super::defragment::{keep_where, movables};
use super::{allocator, buffer, finish, free, requirements};
use super::{FakeAllocator, FakeDevice};

const MIB: u64 = 1 << 20;

/// The discrete layout's device-local type.
const VRAM: u32 = 1;

const OPAQUE_FD: vk::ExternalMemoryHandleTypeFlags = vk::ExternalMemoryHandleTypeFlags::OPAQUE_FD;
const DMA_BUF: vk::ExternalMemoryHandleTypeFlags = vk::ExternalMemoryHandleTypeFlags::DMA_BUF_EXT;
const HOST: vk::ExternalMemoryHandleTypeFlags =
    vk::ExternalMemoryHandleTypeFlags::HOST_ALLOCATION_EXT;
const AHB: vk::ExternalMemoryHandleTypeFlags =
    vk::ExternalMemoryHandleTypeFlags::ANDROID_HARDWARE_BUFFER_ANDROID;

/// A device-local buffer request from `pool`, in dedicated memory when
/// `dedicated`.
fn in_pool(pool: Pool, size: u64, dedicated: bool) -> Request<'static> {
    let mut desc = AllocationDesc::new(Usage::DEVICE_LOCAL).pool(pool);
    if dedicated {
        desc = desc.dedicated(DedicatedPolicy::Always);
    }
    Request::with_desc(requirements(size, 256), ResourceKind::Buffer, desc)
}

/// The memory objects the device holds now.
fn live_memory(device: &FakeDevice) -> HashSet<vk::DeviceMemory> {
    device.live_allocations().iter().map(|m| m.memory).collect()
}

/// Checks that each live memory object carries the export handle types of
/// the pool it belongs to: `exporting` lists pools' memory objects with
/// their types; every other object must carry none.
fn assert_exports(
    device: &FakeDevice,
    exporting: &[(
        &HashSet<vk::DeviceMemory>,
        vk::ExternalMemoryHandleTypeFlags,
    )],
) {
    for memory in device.live_allocations() {
        let expected = exporting
            .iter()
            .find(|(objects, _)| objects.contains(&memory.memory))
            .map_or(vk::ExternalMemoryHandleTypeFlags::empty(), |&(_, types)| {
                types
            });
        assert_eq!(memory.export_handle_types, expected, "{memory:?}");
    }
}

#[test]
fn every_memory_object_of_an_exporting_pool_carries_its_handle_types() {
    let (allocator, device) = allocator(FakeLayout::discrete());
    // Memory the default pools make before any pool exists.
    let before = allocator
        .allocate(&buffer(MIB, 256, Usage::DEVICE_LOCAL))
        .unwrap();

    let known = live_memory(&device);
    let fixed = allocator
        .create_pool(
            &PoolDesc::new(VRAM)
                .block_size(4 * MIB)
                .min_blocks(2)
                .max_blocks(4)
                .name("exported")
                .export(OPAQUE_FD),
        )
        .unwrap();
    let mut fixed_memory: HashSet<_> = live_memory(&device).difference(&known).copied().collect();
    assert_eq!(fixed_memory.len(), 2, "its min_blocks");
    assert_exports(&device, &[(&fixed_memory, OPAQUE_FD)]);

    // A pool of growing blocks exporting two types, and one exporting none.
    let growing = allocator
        .create_pool(&PoolDesc::new(VRAM).export(OPAQUE_FD | DMA_BUF))
        .unwrap();
    let plain = allocator
        .create_pool(&PoolDesc::new(VRAM).block_size(4 * MIB).min_blocks(1))
        .unwrap();

    // Fill the fixed pool's two blocks and make it grow a third; a
    // dedicated allocation in each pool; more default-pool memory, a
    // dedicated one included.
    let mut allocations = Vec::new();
    for _ in 0..3 {
        let allocation = allocator.allocate(&in_pool(fixed, 3 * MIB, false)).unwrap();
        fixed_memory.insert(allocation.memory());
        assert_eq!(allocator.memory_size(&allocation), Ok(4 * MIB));
        allocations.push(allocation);
    }
    assert_eq!(allocator.pool_stats(&fixed).unwrap().blocks, 3);
    let dedicated = allocator.allocate(&in_pool(fixed, MIB, true)).unwrap();
    assert!(dedicated.is_dedicated());
    assert_eq!(allocator.memory_size(&dedicated), Ok(MIB));
    fixed_memory.insert(dedicated.memory());
    allocations.push(dedicated);

    let mut growing_memory = HashSet::new();
    for dedicated in [false, false, true] {
        let allocation = allocator
            .allocate(&in_pool(growing, 2 * MIB, dedicated))
            .unwrap();
        growing_memory.insert(allocation.memory());
        allocations.push(allocation);
    }
    for dedicated in [false, true] {
        allocations.push(allocator.allocate(&in_pool(plain, MIB, dedicated)).unwrap());
    }
    let always = AllocationDesc::new(Usage::DEVICE_LOCAL).dedicated(DedicatedPolicy::Always);
    allocations.push(
        allocator
            .allocate(&Request::with_desc(
                requirements(MIB, 256),
                ResourceKind::Buffer,
                always,
            ))
            .unwrap(),
    );
    allocations.push(
        allocator
            .allocate(&buffer(MIB, 256, Usage::UPLOAD))
            .unwrap(),
    );
    assert_eq!(fixed_memory.len(), 4, "three blocks and a dedicated one");
    assert!(
        growing_memory.len() >= 2,
        "a block or two and a dedicated one"
    );
    assert!(fixed_memory.is_disjoint(&growing_memory));
    assert_exports(
        &device,
        &[
            (&fixed_memory, OPAQUE_FD),
            (&growing_memory, OPAQUE_FD | DMA_BUF),
        ],
    );
    // The default pools' and the plain pool's memory carried none (checked
    // above); there was some of each.
    let exported = fixed_memory.len() + growing_memory.len();
    assert!(device.live_allocations().len() >= exported + 4);
    // The memory map tells the exporting pools.
    let mut pools: Vec<_> = allocator
        .memory_map()
        .custom_pools()
        .map(|pool| (pool.name.clone(), pool.export_handle_types))
        .collect();
    pools.sort();
    let mut expected = vec![
        (Some("exported".to_owned()), OPAQUE_FD),
        (None, OPAQUE_FD | DMA_BUF),
        (None, vk::ExternalMemoryHandleTypeFlags::empty()),
    ];
    expected.sort();
    assert_eq!(pools, expected);

    for allocation in allocations {
        free(&allocator, allocation);
    }
    free(&allocator, before);
    // Emptied, the fixed pool keeps its min_blocks, still exportable.
    assert_exports(
        &device,
        &[
            (&fixed_memory, OPAQUE_FD),
            (&growing_memory, OPAQUE_FD | DMA_BUF),
        ],
    );
    for pool in [fixed, growing, plain] {
        allocator.destroy_pool(pool).unwrap();
    }
    finish(allocator, &device);
}

/// Memory dedicated to an image and exported as an Android hardware buffer
/// is sized by the driver, not by its `allocationSize`, which must be 0
/// (VUID-VkMemoryAllocateInfo-pNext-01874); the allocator counts, maps and
/// clamps flushes by the size it asks for, so a pool exporting AHBs
/// refuses a request for such memory with `NotExportable`, whether the
/// caller or the driver asks for dedicated memory, before any
/// `vkAllocateMemory` and with nothing changed. (The docs' advice for a
/// `DEDICATED_ONLY` handle type, `DedicatedPolicy::Always` with a
/// dedicated target, made exactly that memory, with the image's size.)
/// Its blocks, memory dedicated to a buffer and dedicated memory made for
/// no one resource (`can_alias`) are sized and exported as before
/// (VUID-VkMemoryAllocateInfo-pNext-07900, -07901).
#[test]
fn an_images_dedicated_memory_is_not_exported_as_an_android_hardware_buffer() {
    let (allocator, device) = allocator(FakeLayout::mobile());
    // Mobile's device-local, not host-visible type.
    let pool = allocator
        .create_pool(&PoolDesc::new(0).export(AHB | OPAQUE_FD))
        .unwrap();
    let image = device.create_resource();
    let image_target = DedicatedTarget::Image(vk::Handle::from_raw(image));
    let desc = AllocationDesc::new(Usage::DEVICE_LOCAL).pool(pool);
    let image_request = |desc: AllocationDesc<'static>| {
        Request::with_desc(
            requirements(4 * MIB, 4096),
            ResourceKind::OptimalImage,
            desc,
        )
        .fake_target(image_target)
    };
    let required = DedicatedHint {
        required: true,
        preferred: true,
    };
    let before = allocator.stats();
    let calls = device.counters().allocate_calls;
    for request in [
        image_request(desc.dedicated(DedicatedPolicy::Always)),
        image_request(desc).driver_dedicated(required),
    ] {
        assert_eq!(
            allocator.allocate(&request).map(|a| a.size()),
            Err(Error::NotExportable { handle_types: AHB })
        );
    }
    assert_eq!(device.counters().allocate_calls, calls);
    assert_eq!(allocator.stats(), before);
    assert_eq!(allocator.pool_stats(&pool).unwrap().blocks, 0);

    // The same image in a block, and dedicated memory for no one resource
    // (what the helpers make with `can_alias`) or for a buffer: sized, and
    // exported.
    let known = live_memory(&device);
    let mut allocations = vec![
        allocator.allocate(&image_request(desc)).unwrap(),
        allocator
            .allocate(&Request::with_desc(
                requirements(4 * MIB, 4096),
                ResourceKind::OptimalImage,
                desc.dedicated(DedicatedPolicy::Always),
            ))
            .unwrap(),
    ];
    let buffer = device.create_resource();
    let buffer_target = DedicatedTarget::Buffer(vk::Handle::from_raw(buffer));
    allocations.push(
        allocator
            .allocate(&in_pool(pool, MIB, true).fake_target(buffer_target))
            .unwrap(),
    );
    assert_eq!(
        allocations
            .iter()
            .map(|a| a.is_dedicated())
            .collect::<Vec<_>>(),
        [false, true, true]
    );
    let made: HashSet<_> = live_memory(&device).difference(&known).copied().collect();
    assert_eq!(made.len(), 3);
    assert_exports(&device, &[(&made, AHB | OPAQUE_FD)]);
    for allocation in allocations {
        free(&allocator, allocation);
    }
    for resource in [image, buffer] {
        device.destroy_resource(resource);
    }
    allocator.destroy_pool(pool).unwrap();
    finish(allocator, &device);
}

/// Memory exported as a D3D11 texture or a D3D12 resource is always
/// memory dedicated to one image or buffer: Vulkan requires every driver
/// to report `DEDICATED_ONLY` for those handle types, so memory allocated
/// with them must name its resource in `VkMemoryDedicatedAllocateInfo`
/// (VUID-VkMemoryAllocateInfo-pNext-00639). A pool exporting one makes no
/// block (`min_blocks` is refused at `create_pool`, a request that would
/// take a block fails) nor dedicated memory for no one resource, with
/// [`Error::NotExportable`] naming those types and no device call; memory
/// dedicated to a named resource is made and exported.
#[test]
fn dedicated_only_handle_types_take_memory_dedicated_to_a_resource() {
    let d3d = vk::ExternalMemoryHandleTypeFlags::D3D11_TEXTURE
        | vk::ExternalMemoryHandleTypeFlags::D3D12_RESOURCE;
    let win32 = vk::ExternalMemoryHandleTypeFlags::OPAQUE_WIN32;
    let (allocator, device) = allocator(FakeLayout::discrete());
    let calls = device.counters().allocate_calls;
    assert_eq!(
        try_exporting_pool(&allocator, d3d | win32),
        Err(Error::NotExportable { handle_types: d3d })
    );
    assert_eq!(allocator.memory_map().custom_pools().count(), 0);

    let pool = allocator
        .create_pool(&PoolDesc::new(VRAM).export(d3d | win32))
        .unwrap();
    // In a block, and in dedicated memory made for no one resource.
    for dedicated in [false, true] {
        assert_eq!(
            allocator
                .allocate(&in_pool(pool, MIB, dedicated))
                .map(|a| a.size()),
            Err(Error::NotExportable { handle_types: d3d })
        );
    }
    assert_eq!(device.counters().allocate_calls, calls);
    assert_eq!(allocator.pool_stats(&pool).unwrap().blocks, 0);
    assert_eq!(device.violations(), Vec::<String>::new());

    // Memory dedicated to a buffer: made, and exported.
    let buffer = device.create_resource();
    let target = DedicatedTarget::Buffer(vk::Handle::from_raw(buffer));
    let known = live_memory(&device);
    let allocation = allocator
        .allocate(&in_pool(pool, MIB, true).fake_target(target))
        .unwrap();
    assert!(allocation.is_dedicated());
    let made: HashSet<_> = live_memory(&device).difference(&known).copied().collect();
    assert_eq!(made.len(), 1);
    assert_exports(&device, &[(&made, d3d | win32)]);
    free(&allocator, allocation);
    device.destroy_resource(buffer);
    allocator.destroy_pool(pool).unwrap();
    finish(allocator, &device);
}

/// A plan moves an exporting pool's allocations only into its own blocks,
/// which all carry the handle types (an importer of the old block still
/// sees the old contents: the docs say so).
#[test]
fn defragmentation_moves_an_exporting_pools_allocations_into_exportable_blocks() {
    let (allocator, device) = allocator(FakeLayout::discrete());
    let pool = allocator
        .create_pool(&PoolDesc::new(VRAM).block_size(4 * MIB).export(OPAQUE_FD))
        .unwrap();
    let known = live_memory(&device);
    // Three blocks of four 1 MiB buffers; keep one buffer in each.
    let all: Vec<_> = (0..12)
        .map(|_| allocator.allocate(&in_pool(pool, MIB, false)).unwrap())
        .collect();
    let pool_memory: HashSet<_> = live_memory(&device).difference(&known).copied().collect();
    assert_eq!(pool_memory.len(), 3);
    let mut live = keep_where(&allocator, all, |i| i % 4 == 0);
    let outside = allocator
        .allocate(&buffer(MIB, 256, Usage::DEVICE_LOCAL))
        .unwrap();
    let plan = allocator
        .plan_defragmentation(&movables(&live), &DefragmentationLimits::default())
        .unwrap();
    assert!(plan.blocks_released > 0, "{plan:?}");
    for planned in plan.moves {
        assert!(pool_memory.contains(&planned.destination.memory()));
        let old = std::mem::replace(&mut live[planned.movable], planned.destination);
        free(&allocator, old);
    }
    assert_exports(&device, &[(&pool_memory, OPAQUE_FD)]);
    for allocation in live {
        free(&allocator, allocation);
    }
    free(&allocator, outside);
    allocator.destroy_pool(pool).unwrap();
    finish(allocator, &device);
}

/// Asks for a pool of one block exporting `types`, for tests that expect
/// it refused: says only whether it was made (a pool made is not
/// destroyed, and `finish` then finds its block).
fn try_exporting_pool(
    allocator: &FakeAllocator,
    types: vk::ExternalMemoryHandleTypeFlags,
) -> Result<(), Error> {
    allocator
        .create_pool(&PoolDesc::new(VRAM).min_blocks(1).export(types))
        .map(|_| ())
}

/// Host pointers are import-only, whatever the device; a device that tells
/// which types it exports refuses the others. Refused pools call no device.
#[test]
fn handle_types_memory_cannot_be_exported_as_are_refused() {
    let layout = FakeLayout::discrete().with_exportable_handle_types(OPAQUE_FD);
    let (allocator, device) = allocator(layout);
    let calls = device.counters().allocate_calls;
    let refused = |types| try_exporting_pool(&allocator, types);
    assert_eq!(
        refused(DMA_BUF),
        Err(Error::NotExportable {
            handle_types: DMA_BUF
        })
    );
    assert_eq!(
        refused(OPAQUE_FD | DMA_BUF | HOST),
        Err(Error::NotExportable {
            handle_types: DMA_BUF | HOST
        })
    );
    assert_eq!(device.counters().allocate_calls, calls);
    let pool = allocator
        .create_pool(&PoolDesc::new(VRAM).min_blocks(1).export(OPAQUE_FD))
        .unwrap();
    allocator.destroy_pool(pool).unwrap();
    finish(allocator, &device);

    // A device that does not tell (as the ash backend): all but host
    // pointers are taken.
    let (allocator, device) = super::allocator(FakeLayout::discrete());
    let pool = PoolDesc::new(VRAM).export(DMA_BUF | HOST);
    assert_eq!(
        allocator.create_pool(&pool).map(|_| ()),
        Err(Error::NotExportable { handle_types: HOST })
    );
    let pool = allocator.create_pool(&pool.export(DMA_BUF)).unwrap();
    allocator.destroy_pool(pool).unwrap();
    finish(allocator, &device);
}

/// Bits that are no handle type Vulkan defines never reach
/// `VkExportMemoryAllocateInfo` (VUID-VkExportMemoryAllocateInfo-handleTypes-parameter),
/// even from a backend that does not tell which types it exports: the
/// pool is refused before any memory is made, naming those bits. Every
/// defined exportable type is still taken.
#[test]
fn undefined_handle_type_bits_are_refused() {
    // Bit 13 lies between RDMA_ADDRESS_NV and SCREEN_BUFFER_QNX; bit 31 is
    // the highest.
    let gap = vk::ExternalMemoryHandleTypeFlags::from_raw(1 << 13);
    let top = vk::ExternalMemoryHandleTypeFlags::from_raw(1 << 31);
    let (allocator, device) = allocator(FakeLayout::discrete());
    let calls = device.counters().allocate_calls;
    let refused = |types| try_exporting_pool(&allocator, types);
    assert_eq!(
        refused(OPAQUE_FD | gap),
        Err(Error::NotExportable { handle_types: gap })
    );
    assert_eq!(
        refused(top | DMA_BUF),
        Err(Error::NotExportable { handle_types: top })
    );
    assert_eq!(
        refused(gap | top | HOST | OPAQUE_FD),
        Err(Error::NotExportable {
            handle_types: gap | top | HOST
        })
    );
    // QNX Screen buffers are imported only: no call exports one.
    let screen = vk::ExternalMemoryHandleTypeFlags::SCREEN_BUFFER_QNX;
    assert_eq!(
        refused(screen | DMA_BUF),
        Err(Error::NotExportable {
            handle_types: screen
        })
    );
    assert_eq!(device.counters().allocate_calls, calls);
    assert_eq!(allocator.memory_map().custom_pools().count(), 0);

    // Every defined type a block can be exported as (D3D11 textures and
    // D3D12 resources only ever in dedicated memory: see
    // `dedicated_only_handle_types_take_memory_dedicated_to_a_resource`).
    let all = [
        vk::ExternalMemoryHandleTypeFlags::OPAQUE_FD,
        vk::ExternalMemoryHandleTypeFlags::OPAQUE_WIN32,
        vk::ExternalMemoryHandleTypeFlags::OPAQUE_WIN32_KMT,
        vk::ExternalMemoryHandleTypeFlags::D3D12_HEAP,
        vk::ExternalMemoryHandleTypeFlags::DMA_BUF_EXT,
        vk::ExternalMemoryHandleTypeFlags::ANDROID_HARDWARE_BUFFER_ANDROID,
        vk::ExternalMemoryHandleTypeFlags::ZIRCON_VMO_FUCHSIA,
        vk::ExternalMemoryHandleTypeFlags::RDMA_ADDRESS_NV,
    ]
    .into_iter()
    .fold(vk::ExternalMemoryHandleTypeFlags::empty(), |all, t| all | t);
    let pool = allocator
        .create_pool(&PoolDesc::new(VRAM).min_blocks(1).export(all))
        .unwrap();
    assert_eq!(device.counters().allocations, calls + 1);
    allocator.destroy_pool(pool).unwrap();
    finish(allocator, &device);
}
