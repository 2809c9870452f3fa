//! The fake device itself, which every other test relies on: the properties
//! its preset reports through `MemoryDeviceExt`, and the rules of
//! allocations and binds it checks, as the validation layer does.

use vk_suballoc::device::fake::{FakeDevice, FakeLayout};
use vk_suballoc::device::{AllocateInfo, AllocationFlags, DedicatedTarget, MemoryDeviceExt};

use crate::assert_rules;

#[test]
fn the_ext_trait_reports_the_preset() {
    let device = vk_suballoc::device::fake::FakeDevice::new(FakeLayout::mobile());
    let properties = device.memory_properties();
    assert_eq!(properties.device.memory_types.len(), 4);
    assert_eq!(properties.device.non_coherent_atom_size, 256);
    assert_eq!(properties.buffer_image_granularity, 4096);
    assert_eq!(properties.max_buffer_size, 1 << 30);
}

/// The fake device answers its buffers' memory requirements as each
/// preset's driver does (`BufferRequirements`, whose docs give the
/// sources), where it answered every buffer on every preset with an
/// alignment of 256 and its size rounded to 4: NVIDIA 256 and 16 bytes,
/// RADV 16 with the size rounded to it (64 for acceleration-structure
/// storage), ANV 64 with the size as asked (to 4 for uniform and storage
/// buffers), Turnip 64 and 64, MoltenVK 16, Arm and lavapipe 64, sizes as
/// asked; every type but lazily allocated ones.
#[test]
fn fake_buffers_are_aligned_and_sized_as_each_preset_s_driver_answers() {
    use ash::vk::BufferUsageFlags as B;
    let transfer = B::TRANSFER_SRC;
    let uniform = B::UNIFORM_BUFFER;
    let structure = B::ACCELERATION_STRUCTURE_STORAGE_KHR;
    // (layout, usage, alignment, size of a 1001-byte buffer)
    let cases = [
        (FakeLayout::discrete(), transfer, 256, 1008),
        (FakeLayout::rebar(), uniform, 256, 1008),
        (FakeLayout::amd(), transfer, 16, 1008),
        (FakeLayout::amd(), uniform, 16, 1008),
        (FakeLayout::amd(), structure, 64, 1024),
        (FakeLayout::integrated(), transfer, 64, 1001),
        (FakeLayout::integrated(), uniform, 64, 1004),
        (FakeLayout::intel_arc(), B::STORAGE_BUFFER, 64, 1004),
        (FakeLayout::mobile(), transfer, 64, 1024),
        (FakeLayout::mali(), uniform, 64, 1001),
        (FakeLayout::apple(), uniform, 16, 1001),
        (FakeLayout::lavapipe(), transfer, 64, 1001),
    ];
    for (layout, usage, alignment, size) in cases {
        let name = layout.name;
        let lazy = layout
            .memory_types
            .iter()
            .enumerate()
            .filter(|(_, t)| {
                t.props
                    .contains(vk_suballoc::device::MemoryPropertyFlags::LAZILY_ALLOCATED)
            })
            .fold(0u32, |bits, (i, _)| bits | 1 << i);
        let every = (1u32 << layout.memory_types.len()) - 1;
        let device = FakeDevice::new(layout);
        // SAFETY: a fake device; a non-zero size and a usage.
        let (buffer, requirements, _) = unsafe { device.create_buffer(1001, usage) }.unwrap();
        assert_eq!(
            (requirements.alignment, requirements.size),
            (alignment, size),
            "{name}: {usage:?}"
        );
        assert_eq!(requirements.memory_type_bits, every & !lazy, "{name}");
        // SAFETY: made above, bound to nothing.
        unsafe { device.destroy_buffer(buffer) };
        device.assert_clean();
    }
}

/// The fake device checks binds against the requirements it reported, as
/// the validation layer does: the memory type (VUID-vkBindBufferMemory-memory-01035),
/// the alignment (-memoryOffset-01036), the size (-size-01037), dedicated
/// memory bound to its own resource at offset 0 (-memory-01508), a
/// device-address buffer in device-address memory (-bufferDeviceAddress-03339),
/// a buffer bound once only (-buffer-07459) at an offset inside the memory
/// (-memoryOffset-01031), and a dedicated allocation of exactly the buffer's size
/// (VUID-VkMemoryDedicatedAllocateInfo-buffer-02965) for a resource that
/// exists (-image-parameter).
#[test]
fn fake_binds_follow_the_reported_requirements() {
    use ash::vk;
    use vk_suballoc::device::MemoryDevice;
    let raw = FakeDevice::new(FakeLayout::mobile());
    let usage = vk::BufferUsageFlags::TRANSFER_SRC;
    // SAFETY: a fake device; the invalid calls are the ones under test.
    unsafe {
        let (buffer, requirements, _) = raw.create_buffer(1000, usage).unwrap();
        let (other, _, _) = raw.create_buffer(1000, usage).unwrap();
        assert_eq!(
            requirements.memory_type_bits & 0b1000,
            0,
            "lazily allocated"
        );
        let lazy = raw
            .allocate(&AllocateInfo::plain(4096, 3, AllocationFlags::empty()))
            .unwrap();
        let small = raw
            .allocate(&AllocateInfo::plain(1024, 0, AllocationFlags::empty()))
            .unwrap();
        let mut dedicated = AllocateInfo::plain(requirements.size, 0, AllocationFlags::empty());
        dedicated.dedicated = Some(DedicatedTarget::Buffer(other));
        let other_memory = raw.allocate(&dedicated).unwrap();
        dedicated.size += 4;
        assert!(raw.allocate(&dedicated).is_err());
        // Dedicated to a handle the device never made.
        let mut unknown = AllocateInfo::plain(1024, 0, AllocationFlags::empty());
        unknown.dedicated = Some(DedicatedTarget::Image(vk::Handle::from_raw(0x51)));
        assert!(raw.allocate(&unknown).is_err());
        for (memory, offset) in [
            (lazy.raw(), 0),
            (small.raw(), 4),
            (small.raw(), 256),
            (other_memory.raw(), 0),
        ] {
            raw.bind_buffer_memory(buffer, memory, offset).unwrap();
        }
        raw.bind_buffer_memory(other, other_memory.raw(), 0)
            .unwrap();
        // Without buffer device address (mobile), no rule for the address
        // usage; with it (discrete), the memory must have the flag.
        let address_usage = usage | vk::BufferUsageFlags::SHADER_DEVICE_ADDRESS;
        let (addressed, _, _) = raw.create_buffer(256, address_usage).unwrap();
        raw.bind_buffer_memory(addressed, small.raw(), 0).unwrap();
        // Bound already; then an offset at the memory's end (a 16-byte
        // buffer that the offset's alignment and size checks would pass).
        raw.bind_buffer_memory(other, other_memory.raw(), 0)
            .unwrap();
        let (past, _, _) = raw.create_buffer(16, usage).unwrap();
        raw.bind_buffer_memory(past, small.raw(), 1024).unwrap();
        let discrete = FakeDevice::new(FakeLayout::discrete());
        let plain = discrete
            .allocate(&AllocateInfo::plain(4096, 1, AllocationFlags::empty()))
            .unwrap();
        let (on_discrete, _, _) = discrete.create_buffer(256, address_usage).unwrap();
        discrete
            .bind_buffer_memory(on_discrete, plain.raw(), 0)
            .unwrap();
        let mut violations = raw.violations();
        violations.extend(discrete.violations());
        assert_rules(
            &violations,
            &[
                "VUID-VkMemoryDedicatedAllocateInfo-buffer-02965",
                "VUID-VkMemoryDedicatedAllocateInfo-image-parameter",
                "VUID-vkBindBufferMemory-memory-01035",
                "VUID-vkBindBufferMemory-memoryOffset-01036",
                "VUID-vkBindBufferMemory-size-01037",
                "VUID-vkBindBufferMemory-memory-01508",
                "VUID-vkBindBufferMemory-buffer-07459",
                "VUID-vkBindBufferMemory-memoryOffset-01031",
                "VUID-vkBindBufferMemory-bufferDeviceAddress-03339",
            ],
            "binds",
        );
        for memory in [lazy, small, other_memory] {
            raw.deallocate_memory(memory);
        }
        raw.destroy_buffer(buffer);
        raw.destroy_buffer(other);
        raw.destroy_buffer(addressed);
        raw.destroy_buffer(past);
        discrete.deallocate_memory(plain);
        discrete.destroy_buffer(on_discrete);
    }
}

/// The fake device reports its layout's `maxBufferSize` through
/// `MemoryDeviceExt`, and, as the validation layer does, records a buffer
/// larger than it (VUID-VkBufferCreateInfo-size-06409) and makes none; a
/// buffer of exactly that size is valid, and `u64::MAX` (a device that
/// does not say) limits nothing.
#[test]
fn fake_buffers_stay_within_max_buffer_size() {
    use ash::vk;
    let usage = vk::BufferUsageFlags::TRANSFER_SRC;
    let max = 1 << 20;
    let device = FakeDevice::new(FakeLayout::mobile().with_max_buffer_size(max));
    assert_eq!(device.memory_properties().max_buffer_size, max);
    // SAFETY: a fake device; the invalid call is the one under test.
    unsafe {
        assert!(device.create_buffer(max + 1, usage).is_err());
        assert_eq!(device.live_resources(), 0);
        let (buffer, _, _) = device.create_buffer(max, usage).unwrap();
        device.destroy_buffer(buffer);
    }
    let violations = device.violations();
    assert_rules(
        &violations,
        &["VUID-VkBufferCreateInfo-size-06409"],
        "max + 1",
    );

    let layout = FakeLayout::mobile().with_max_buffer_size(u64::MAX);
    // The largest size whose requirements, rounded as the driver rounds
    // them, stay within u64::MAX.
    let largest = u64::MAX - (layout.buffer_requirements.size_granule - 1);
    let unknown = FakeDevice::new(layout);
    assert_eq!(unknown.memory_properties().max_buffer_size, u64::MAX);
    // SAFETY: a fake device.
    unsafe {
        let (buffer, _, _) = unknown.create_buffer(largest, usage).unwrap();
        unknown.destroy_buffer(buffer);
    }
    unknown.assert_clean();
}

/// The buffers the fake device makes are unprotected (`create_buffer`
/// takes no `VK_BUFFER_CREATE_PROTECTED_BIT`), so binding one to memory
/// of a protected type is a violation (VUID-vkBindBufferMemory-None-01899),
/// as the validation layer reports it, even where the buffer's
/// `memoryTypeBits` name that type (the allocator does not count on a
/// driver leaving protected types out of them). The fake device bound it
/// silently, so an upload-ring chunk placed in protected memory would have
/// passed. The same buffer in an unprotected type of the same heap binds.
#[test]
fn fake_unprotected_buffers_stay_out_of_protected_memory() {
    use ash::vk;
    use vk_suballoc::device::{MemoryDevice, MemoryPropertyFlags as Props, MemoryType};
    const PROTECTED: u32 = 5;
    let mut layout = FakeLayout::discrete().with_protected_memory(true);
    layout.memory_types.push(MemoryType {
        heap: 0,
        props: Props::DEVICE_LOCAL | Props::PROTECTED,
    });
    let device = FakeDevice::new(layout);
    let usage = vk::BufferUsageFlags::TRANSFER_SRC;
    // SAFETY: a fake device; the invalid bind is the one under test.
    unsafe {
        let (buffer, requirements, _) = device.create_buffer(1024, usage).unwrap();
        let (plain_buffer, _, _) = device.create_buffer(1024, usage).unwrap();
        assert_ne!(requirements.memory_type_bits & (1 << PROTECTED), 0);
        let protected = device
            .allocate(&AllocateInfo::plain(
                4096,
                PROTECTED,
                AllocationFlags::empty(),
            ))
            .unwrap();
        let plain = device
            .allocate(&AllocateInfo::plain(4096, 1, AllocationFlags::empty()))
            .unwrap();
        device
            .bind_buffer_memory(buffer, protected.raw(), 0)
            .unwrap();
        device
            .bind_buffer_memory(plain_buffer, plain.raw(), 0)
            .unwrap();
        let violations = device.violations();
        assert_rules(
            &violations,
            &["VUID-vkBindBufferMemory-None-01899"],
            "binds",
        );
        for memory in [protected, plain] {
            device.deallocate_memory(memory);
        }
        device.destroy_buffer(buffer);
        device.destroy_buffer(plain_buffer);
    }
}

/// The fake device refuses the buffers `MemoryDeviceExt::create_buffer`'s
/// contract rules out, as the validation layer reports them, and makes
/// none: a size of 0 (VUID-VkBufferCreateInfo-size-00912) and an empty
/// usage (VUID-VkBufferCreateInfo-usage-requiredbitmask). It made both,
/// the first with requirements of 0 bytes, so an upload ring that asked
/// for one would have passed.
#[test]
fn fake_buffers_need_a_size_and_a_usage() {
    use ash::vk;
    let device = FakeDevice::new(FakeLayout::discrete());
    let usage = vk::BufferUsageFlags::TRANSFER_SRC;
    // SAFETY: a fake device; the invalid calls are the ones under test.
    unsafe {
        assert!(device.create_buffer(0, usage).is_err());
        assert!(device
            .create_buffer(256, vk::BufferUsageFlags::empty())
            .is_err());
    }
    assert_eq!(device.live_resources(), 0);
    let violations = device.violations();
    assert_rules(
        &violations,
        &[
            "VUID-VkBufferCreateInfo-size-00912",
            "VUID-VkBufferCreateInfo-usage-requiredbitmask",
        ],
        "buffers",
    );
}

/// A memory priority outside [0, 1], or NaN, is a violation
/// (VUID-VkMemoryPriorityAllocateInfoEXT-priority-02602) that the fake
/// device records and refuses, as the validation layer does: `AllocateInfo`
/// promises every backend a valid priority (the allocator clamps what its
/// caller asked for), and the fake device took any, so a path that skipped
/// the clamp passed. 0 and 1 themselves are valid.
#[test]
fn fake_memory_priorities_lie_in_0_to_1() {
    let device = FakeDevice::new(FakeLayout::discrete());
    let with_priority = |priority| {
        let mut info = AllocateInfo::plain(4096, 1, AllocationFlags::empty());
        info.priority = Some(priority);
        // SAFETY: a fake device; the invalid calls are the ones under test.
        unsafe { device.allocate(&info) }
    };
    for priority in [-0.5, 1.5, f32::NAN, f32::INFINITY] {
        assert!(with_priority(priority).is_err(), "{priority}");
    }
    let valid: Vec<_> = [0.0, 1.0]
        .into_iter()
        .map(|priority| with_priority(priority).unwrap())
        .collect();
    let violations = device.violations();
    assert_rules(
        &violations,
        &["VUID-VkMemoryPriorityAllocateInfoEXT-priority-02602"; 4],
        "priorities",
    );
    for memory in valid {
        // SAFETY: allocated above, freed once.
        unsafe { vk_suballoc::device::MemoryDevice::deallocate_memory(&device, memory) };
    }
}

/// A buffer bound to memory of a type past the 32 a `memoryTypeBits` mask
/// can name (a layout may list more; Vulkan does not) is bound to a type
/// its requirements do not allow (VUID-vkBindBufferMemory-memory-01035),
/// recorded as the other binds' breaches are. The fake device shifted a
/// 32-bit mask by the type's index, which panicked ("shift left with
/// overflow") inside the device's lock.
#[test]
fn fake_binds_to_memory_types_past_32_break_memory_type_bits() {
    use ash::vk;
    use vk_suballoc::device::MemoryDevice;
    const PAST_MASK: u32 = 32;
    let mut layout = FakeLayout::lavapipe();
    let only = layout.memory_types[0];
    layout.memory_types.resize(PAST_MASK as usize + 1, only);
    let device = FakeDevice::new(layout);
    let usage = vk::BufferUsageFlags::TRANSFER_SRC;
    // SAFETY: a fake device; the invalid bind is the one under test.
    unsafe {
        let (buffer, _, _) = device.create_buffer(256, usage).unwrap();
        let memory = device
            .allocate(&AllocateInfo::plain(
                4096,
                PAST_MASK,
                AllocationFlags::empty(),
            ))
            .unwrap();
        device.bind_buffer_memory(buffer, memory.raw(), 0).unwrap();
        let violations = device.violations();
        assert_rules(
            &violations,
            &["VUID-vkBindBufferMemory-memory-01035"],
            "bind",
        );
        device.deallocate_memory(memory);
        device.destroy_buffer(buffer);
    }
}

/// `vkGetBufferDeviceAddress` as the fake device answers it (upload rings
/// ask it for their chunks' buffers): the address of the memory the
/// buffer is bound to plus its offset there, and, as the validation layer
/// reports them, none for a buffer bound to no memory
/// (VUID-VkBufferDeviceAddressInfo-buffer-02600), made without
/// `SHADER_DEVICE_ADDRESS` usage (-buffer-02601) or unknown
/// (-buffer-parameter), nor on a device without buffer device address
/// (VUID-vkGetBufferDeviceAddress-bufferDeviceAddress-03324). No test
/// pinned these rules.
#[test]
fn fake_buffer_addresses_need_a_bound_address_buffer() {
    use ash::vk;
    use vk_suballoc::device::MemoryDevice;
    let plain_usage = vk::BufferUsageFlags::TRANSFER_SRC;
    let address_usage = plain_usage | vk::BufferUsageFlags::SHADER_DEVICE_ADDRESS;
    let device = FakeDevice::new(FakeLayout::discrete());
    // SAFETY: a fake device; the invalid queries are the ones under test.
    unsafe {
        let (addressed, _, _) = device.create_buffer(256, address_usage).unwrap();
        let (plain, _, _) = device.create_buffer(256, plain_usage).unwrap();
        let memory = device
            .allocate(&AllocateInfo::plain(
                4096,
                1,
                AllocationFlags::DEVICE_ADDRESS,
            ))
            .unwrap();
        assert_eq!(device.buffer_device_address(addressed), None, "unbound");
        device
            .bind_buffer_memory(addressed, memory.raw(), 256)
            .unwrap();
        device.bind_buffer_memory(plain, memory.raw(), 0).unwrap();
        let base = device.memory_address(memory.raw()).unwrap();
        assert_eq!(device.buffer_device_address(addressed), Some(base + 256));
        assert_eq!(device.buffer_device_address(plain), None, "no usage");
        let unknown = vk::Handle::from_raw(0x51);
        assert_eq!(device.buffer_device_address(unknown), None, "unknown");
        assert_rules(
            &device.violations(),
            &[
                "VUID-VkBufferDeviceAddressInfo-buffer-02600",
                "VUID-VkBufferDeviceAddressInfo-buffer-02601",
                "VUID-VkBufferDeviceAddressInfo-buffer-parameter",
            ],
            "discrete",
        );
        device.deallocate_memory(memory);
        device.destroy_buffer(addressed);
        device.destroy_buffer(plain);
    }
    let without = FakeDevice::new(FakeLayout::mobile());
    // SAFETY: as above.
    unsafe {
        let (addressed, _, _) = without.create_buffer(256, address_usage).unwrap();
        let memory = without
            .allocate(&AllocateInfo::plain(4096, 0, AllocationFlags::empty()))
            .unwrap();
        without
            .bind_buffer_memory(addressed, memory.raw(), 0)
            .unwrap();
        assert_eq!(without.buffer_device_address(addressed), None);
        assert_rules(
            &without.violations(),
            &["VUID-vkGetBufferDeviceAddress-bufferDeviceAddress-03324"],
            "mobile",
        );
        without.deallocate_memory(memory);
        without.destroy_buffer(addressed);
    }
}

/// `FakeLayout::with_buffer_type_left_out` never leaves buffers without a
/// memory type both host-visible and host-coherent, which Vulkan promises
/// every buffer, also when types were left out before it: leaving out
/// each of the discrete layout's three such types in turn keeps the last.
/// It counted the types the layout lists, not those buffers may still
/// use, so the third call left none.
#[test]
fn buffers_keep_a_host_coherent_type_whatever_is_left_out() {
    use vk_suballoc::device::MemoryPropertyFlags as Props;
    let host = Props::HOST_VISIBLE | Props::HOST_COHERENT;
    let layout = FakeLayout::discrete();
    let host_types: Vec<usize> = (layout.memory_types.iter().enumerate())
        .filter(|(_, t)| t.props.contains(host))
        .map(|(i, _)| i)
        .collect();
    assert_eq!(host_types, [2, 3, 4]);
    let layout = host_types.iter().fold(layout, |layout, &index| {
        layout.with_buffer_type_left_out(index)
    });
    assert_eq!(layout.buffer_memory_type_bits(), 0b1_0011);
}
