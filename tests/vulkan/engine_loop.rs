//! An engine's frame loop written from the README and the rustdoc alone, as
//! a new user would, once per memory architecture: 3 frames in flight on
//! fences created signalled (the README's frame loop), meshes uploaded
//! through staging buffers retired after their frame, streamed optimal
//! textures (both in custom pools of their own, as the README's streamed
//! textures), uniforms through an upload ring, a readback per frame read
//! after its fence, a defragmentation pass in the middle of it all carried
//! out as the README's recipe says (one move given up), render targets made
//! again with dedicated memory as a window resizes, `stats()` every frame,
//! and a shutdown that leaves no allocation and no memory object. The other
//! suites test each of these alone; this one, the recipe's every step
//! together under the validation layer (best practices included).

use ash::vk;
use vk_suballoc::device::AshMemoryDevice;
use vk_suballoc::report::TypeStats;
use vk_suballoc::{
    Allocation, AllocationDesc, Allocator, Config, DedicatedPolicy, DefragmentationLimits, Movable,
    Pool, PoolDesc, ResourceKind, UploadRingDesc, Usage,
};

use super::allocator_setup::{
    allocator_configured, memory_barrier, transition, IdleOnDrop, COLOR, TRANSFER_TO_HOST,
    TRANSFER_TO_TRANSFER,
};
use crate::support::{rgba8_image_info, test_each_profile, Advice, Profile, VulkanContext};

const FRAMES: u64 = 30;
/// The frame that defragments: the level has loaded and been thinned out.
const DEFRAGMENT: u64 = 15;
const IN_FLIGHT: usize = 3;
/// Bytes of a mesh: a range of its own, not a small-buffer slot.
const MESH: u64 = 256 << 10;
const UNIFORMS: u64 = 256;
const SAMPLED: vk::ImageUsageFlags = vk::ImageUsageFlags::SAMPLED;
const WHOLE: [vk::BufferCopy; 1] = [vk::BufferCopy {
    src_offset: 0,
    dst_offset: 0,
    size: MESH,
}];

struct Slot {
    pool: vk::CommandPool,
    cmd: vk::CommandBuffer,
    fence: vk::Fence,
    /// A mesh and the frame's uniforms are copied here, and checked against
    /// `expected` once the fence has signalled.
    readback: (vk::Buffer, Allocation),
    expected: Vec<u8>,
}

struct Mesh {
    buffer: vk::Buffer,
    allocation: Allocation,
    info: vk::BufferCreateInfo<'static>,
    byte: u8,
}

fn buffer_info(size: u64, usage: vk::BufferUsageFlags) -> vk::BufferCreateInfo<'static> {
    vk::BufferCreateInfo::default().size(size).usage(usage)
}

/// Invalidates the slot's readback (as the docs say for host reads of GPU
/// writes) and checks it.
fn check(allocator: &Allocator<AshMemoryDevice>, slot: &mut Slot, what: &str) {
    let (len, allocation) = (slot.expected.len(), &mut slot.readback.1);
    allocator.invalidate(allocation, 0..len as u64).unwrap();
    let bytes = &allocator.mapped_slice(allocation).unwrap()[..len];
    assert!(
        bytes == slot.expected.as_slice(),
        "{what}: readback differs"
    );
}

fn engine_loop(profile: Profile) {
    let context = VulkanContext::new(profile);
    // Small blocks, so that the meshes span several and a plan can empty one.
    let (large_heap_block_size, small_heap_limit) = (4 << 20, 0);
    let config = Config {
        large_heap_block_size,
        small_heap_limit,
        ..Config::default()
    };
    let allocator = allocator_configured(&context, config);
    let device = &context.device;
    let _idle = IdleOnDrop(device);
    let align = context
        .properties()
        .limits
        .min_uniform_buffer_offset_alignment;
    let ring_desc = UploadRingDesc {
        size: 1 << 20,
        ..UploadRingDesc::default()
    };
    let ring = allocator.create_upload_ring(&ring_desc).unwrap();
    let pools = TransientPools::new(&allocator);
    let readback_info = buffer_info(MESH + UNIFORMS, vk::BufferUsageFlags::TRANSFER_DST);
    let pool_info = vk::CommandPoolCreateInfo::default()
        .flags(vk::CommandPoolCreateFlags::TRANSIENT)
        .queue_family_index(context.queue_family_index);
    let readback = AllocationDesc::new(Usage::READBACK);
    let signalled = vk::FenceCreateInfo::default().flags(vk::FenceCreateFlags::SIGNALED);
    // SAFETY: valid create infos on a live device.
    let mut slots: Vec<Slot> = (0..IN_FLIGHT)
        .map(|_| unsafe {
            let pool = device.create_command_pool(&pool_info, None).unwrap();
            let cmd_info = vk::CommandBufferAllocateInfo::default()
                .command_pool(pool)
                .command_buffer_count(1);
            Slot {
                pool,
                cmd: device.allocate_command_buffers(&cmd_info).unwrap()[0],
                fence: device.create_fence(&signalled, None).unwrap(),
                readback: allocator.create_buffer(&readback_info, &readback).unwrap(),
                expected: Vec::new(),
            }
        })
        .collect();
    let mut meshes: Vec<Mesh> = Vec::new();
    let mut textures: Vec<(vk::Image, Allocation)> = Vec::new();
    let mut target: Option<(vk::Image, Allocation)> = None;
    let mut moved = Vec::new();

    for frame in 0..FRAMES {
        let what = format!("{profile} frame {frame}");
        let slot = &mut slots[frame as usize % IN_FLIGHT];
        // SAFETY: the slot's objects belong to `device`; collect reads the
        // fence, so it is reset after collecting (the README's order).
        unsafe {
            let (fence, no_flags) = ([slot.fence], vk::CommandPoolResetFlags::empty());
            device.wait_for_fences(&fence, true, u64::MAX).unwrap();
            allocator.collect().unwrap();
            device.reset_fences(&fence).unwrap();
            device.reset_command_pool(slot.pool, no_flags).unwrap();
        }
        if !slot.expected.is_empty() {
            check(&allocator, slot, &what);
        }
        // Cheap, every frame: each memory object is a block or dedicated.
        let stats = allocator.stats();
        let made = |t: &TypeStats| t.blocks + t.dedicated_allocations;
        let objects: u64 = stats.memory_types.iter().map(made).sum();
        assert_eq!(u64::from(stats.memory_objects), objects, "{what}: {stats}");
        let cmd = slot.cmd;
        let begin = vk::CommandBufferBeginInfo::default()
            .flags(vk::CommandBufferUsageFlags::ONE_TIME_SUBMIT);
        // SAFETY: the slot's command buffer is not in use (fence waited).
        unsafe { device.begin_command_buffer(cmd, &begin) }.unwrap();

        // A level loads two meshes a frame, then drops every other one,
        // leaving holes in every block, and settles: no mesh comes or goes
        // until the defragmenting frame, after which one streams in a frame.
        // With the staging buffers and textures in pools of their own, the
        // plan is the same on every run (on Mali, where it is smallest,
        // two moves: one carried out, one given up).
        let loads = match frame {
            0..12 => 2,
            12..=DEFRAGMENT => 0,
            _ => 1,
        };
        for i in 0..loads {
            meshes.push(load_mesh(
                &allocator,
                device,
                cmd,
                pools.staging,
                frame as u8 ^ i ^ 0x5A,
            ));
        }
        if frame == 12 {
            for i in (0..24).rev().filter(|i| i % 2 != 0) {
                let mesh = meshes.remove(i);
                // SAFETY: the mesh's buffer, destroyed only here.
                unsafe { allocator.destroy_buffer_after_frame(mesh.buffer, mesh.allocation) }
                    .unwrap();
            }
        }
        // A streamed texture, kept five frames; render targets made again,
        // dedicated, as the window resizes.
        let size = (16 << (frame % 3), 16 << (frame % 3));
        let sampled = AllocationDesc::new(Usage::DEVICE_LOCAL).pool(pools.textures);
        textures.push(image(&allocator, cmd, size, SAMPLED, &sampled));
        if textures.len() > 5 {
            let (image, allocation) = textures.remove(0);
            // SAFETY: the allocator's image, destroyed only by it.
            unsafe { allocator.destroy_image_after_frame(image, allocation) }.unwrap();
        }
        if frame % 10 == 0 {
            let size = (64 + frame as u32 * 8, 32);
            let always =
                AllocationDesc::new(Usage::DEVICE_LOCAL).dedicated(DedicatedPolicy::Always);
            let target_usage = vk::ImageUsageFlags::COLOR_ATTACHMENT;
            // Render targets this small are dedicated on purpose: small
            // memory allowed for that call alone, not for the blocks, the
            // ring or the readback buffers.
            let new = context.allowing(&[Advice::SmallMemory], || {
                image(&allocator, cmd, size, target_usage, &always)
            });
            assert!(new.1.is_dedicated(), "{what}");
            if let Some((image, allocation)) = target.replace(new) {
                // SAFETY: the allocator's image, destroyed only by it.
                unsafe { allocator.destroy_image_after_frame(image, allocation) }.unwrap();
            }
        }
        let (src, dst) = TRANSFER_TO_TRANSFER;
        // SAFETY: recording; orders the uploads before the copies below.
        unsafe { memory_barrier(device, cmd, src, dst) };
        if frame == DEFRAGMENT {
            moved = defragment(&allocator, device, cmd, &mut meshes);
            assert!(!moved.is_empty(), "{what}: the plan moved nothing");
            // SAFETY: recording; orders the moves before the readback.
            unsafe { memory_barrier(device, cmd, src, dst) };
        }

        // Uniforms through the ring; a mesh (each moved one in turn, from
        // the defragmenting frame on) and the uniforms read back.
        let uniforms = allocator.ring_allocate(ring, UNIFORMS, align).unwrap();
        let uniform_bytes = vec![frame as u8; UNIFORMS as usize];
        allocator.ring_write(&uniforms, 0, &uniform_bytes).unwrap();
        let pick = moved.get(frame.wrapping_sub(DEFRAGMENT) as usize);
        let mesh = &meshes[*pick.unwrap_or(&(frame as usize % meshes.len()))];
        slot.expected = vec![mesh.byte; MESH as usize];
        slot.expected.extend_from_slice(&uniform_bytes);
        let ring_copy = [vk::BufferCopy {
            src_offset: uniforms.buffer_offset(),
            dst_offset: MESH,
            size: UNIFORMS,
        }];
        // SAFETY: recording; every buffer is bound and alive.
        unsafe {
            device.cmd_copy_buffer(cmd, mesh.buffer, slot.readback.0, &WHOLE);
            device.cmd_copy_buffer(cmd, uniforms.buffer(), slot.readback.0, &ring_copy);
            memory_barrier(device, cmd, TRANSFER_TO_HOST.0, TRANSFER_TO_HOST.1);
            device.end_command_buffer(cmd).unwrap();
        }
        let cmds = [cmd];
        let submit = [vk::SubmitInfo::default().command_buffers(&cmds)];
        // SAFETY: a recorded command buffer; this test is the queue's only
        // user. The fence is signalled by this frame's only submission.
        unsafe {
            let queue = context.queue;
            device.queue_submit(queue, &submit, slot.fence).unwrap();
            allocator.end_frame(slot.fence).unwrap();
        }
    }

    // Shutdown, as the README's frame loop ends; then nothing is in flight.
    allocator.wait_and_collect(u64::MAX).unwrap();
    for slot in &mut slots {
        check(&allocator, slot, &format!("{profile}'s last frames"));
    }
    allocator.destroy_upload_ring(ring).unwrap();
    // SAFETY: every frame is done; each resource is destroyed once.
    unsafe {
        for Mesh {
            buffer, allocation, ..
        } in meshes
        {
            allocator.destroy_buffer(buffer, allocation).unwrap();
        }
        for (image, allocation) in textures.into_iter().chain(target) {
            allocator.destroy_image(image, allocation).unwrap();
        }
        for slot in slots {
            let (buffer, allocation) = slot.readback;
            allocator.destroy_buffer(buffer, allocation).unwrap();
            device.destroy_fence(slot.fence, None);
            device.destroy_command_pool(slot.pool, None);
        }
        // The ring's memory waits for the end of the current frame, and
        // the device is idle.
        allocator.collect_idle();
    }
    assert_eq!(allocator.stats().allocations(), 0, "{profile}");
    allocator.destroy_pool(pools.staging).unwrap();
    allocator.destroy_pool(pools.textures).unwrap();
    allocator.trim();
    let stats = allocator.stats();
    assert_eq!(stats.memory_objects, 0, "{profile}: {stats}");
}

/// Custom pools for what comes and goes with the frames: staging buffers
/// and streamed textures, each freed once its frame is collected.
///
/// In the default pools they would share the meshes' blocks, and where they
/// land would depend on which frames the GPU had finished when each
/// `collect` ran: on Mali, where staging buffers and meshes take one type, the
/// defragmentation plan then had a single move now and then (the block to
/// empty also held a staging buffer or a texture), and with that move
/// given up the plan moved nothing. In pools of their own they leave the
/// meshes' placement the same on every run.
struct TransientPools {
    staging: Pool,
    textures: Pool,
}

impl TransientPools {
    fn new(allocator: &Allocator<AshMemoryDevice>) -> Self {
        let texture_info = rgba8_image_info(16, 16, SAMPLED | vk::ImageUsageFlags::TRANSFER_DST);
        // SAFETY: valid create infos for this device.
        let (staging_type, texture_type) = unsafe {
            (
                allocator.memory_type_for_buffer(&staging_info(), Usage::UPLOAD),
                allocator.memory_type_for_image(&texture_info, Usage::DEVICE_LOCAL),
            )
        };
        let pool = |memory_type, name| {
            let desc = PoolDesc::new(memory_type).block_size(4 << 20).name(name);
            allocator.create_pool(&desc).unwrap()
        };
        Self {
            staging: pool(staging_type.unwrap(), "staging"),
            textures: pool(texture_type.unwrap(), "streamed textures"),
        }
    }
}

/// A staging buffer's create info: a mesh's bytes, copied from.
fn staging_info() -> vk::BufferCreateInfo<'static> {
    buffer_info(MESH, vk::BufferUsageFlags::TRANSFER_SRC)
}

/// A device-local mesh filled with `byte` through a staging buffer in
/// `staging_pool`, which is retired after the frame.
fn load_mesh(
    allocator: &Allocator<AshMemoryDevice>,
    device: &ash::Device,
    cmd: vk::CommandBuffer,
    staging_pool: Pool,
    byte: u8,
) -> Mesh {
    let desc = AllocationDesc::new(Usage::UPLOAD)
        .pool(staging_pool)
        .name("staging");
    // SAFETY: a valid create info.
    let (staging, mut memory) = unsafe { allocator.create_buffer(&staging_info(), &desc) }.unwrap();
    allocator.mapped_slice_mut(&mut memory).unwrap()[..MESH as usize].fill(byte);
    allocator.flush(&memory, 0..MESH).unwrap();
    let transfer = vk::BufferUsageFlags::TRANSFER_SRC | vk::BufferUsageFlags::TRANSFER_DST;
    let info = buffer_info(MESH, transfer);
    let desc = AllocationDesc::new(Usage::DEVICE_LOCAL).name("mesh");
    // SAFETY: a valid create info.
    let (buffer, allocation) = unsafe { allocator.create_buffer(&info, &desc) }.unwrap();
    // SAFETY: recording; both buffers are bound. `staging` is the
    // allocator's, destroyed only by it, after the frame.
    unsafe {
        device.cmd_copy_buffer(cmd, staging, buffer, &WHOLE);
        allocator
            .destroy_buffer_after_frame(staging, memory)
            .unwrap();
    }
    Mesh {
        buffer,
        allocation,
        info,
        byte,
    }
}

/// A new optimal image of `usage` (and transfer destination), cleared,
/// allocated as `desc` says.
fn image(
    allocator: &Allocator<AshMemoryDevice>,
    cmd: vk::CommandBuffer,
    (width, height): (u32, u32),
    usage: vk::ImageUsageFlags,
    desc: &AllocationDesc<'_>,
) -> (vk::Image, Allocation) {
    let info = rgba8_image_info(width, height, usage | vk::ImageUsageFlags::TRANSFER_DST);
    // SAFETY: a valid image create info.
    let (image, allocation) = unsafe { allocator.create_image(&info, desc) }.unwrap();
    let device = allocator.device().device();
    let color = vk::ClearColorValue {
        float32: [0.25, 0.5, 0.75, 1.0],
    };
    let dst = vk::ImageLayout::TRANSFER_DST_OPTIMAL;
    // SAFETY: recording; the image is bound and new.
    unsafe {
        let from = (vk::ImageLayout::UNDEFINED, vk::AccessFlags::empty());
        transition(
            device,
            cmd,
            image,
            from,
            (dst, vk::AccessFlags::TRANSFER_WRITE),
        );
        device.cmd_clear_color_image(cmd, image, dst, &color, &[COLOR]);
    }
    (image, allocation)
}

/// The README's defragmentation recipe, step by step, every move carried
/// out but the last, which is given up. Returns the meshes moved.
fn defragment(
    allocator: &Allocator<AshMemoryDevice>,
    device: &ash::Device,
    cmd: vk::CommandBuffer,
    meshes: &mut [Mesh],
) -> Vec<usize> {
    let movables: Vec<Movable> = meshes
        .iter()
        .map(|mesh| {
            // SAFETY: the buffer belongs to `device`.
            let requirements = unsafe { device.get_buffer_memory_requirements(mesh.buffer) };
            Movable::new(&mesh.allocation, requirements, ResourceKind::Buffer)
        })
        .collect();
    let limits = DefragmentationLimits::default();
    let mut plan = allocator.plan_defragmentation(&movables, &limits).unwrap();
    drop(movables);
    let given_up = plan.moves.pop();
    let moved = plan.moves.iter().map(|planned| planned.movable).collect();
    for planned in plan.moves {
        let mesh = &mut meshes[planned.movable];
        let new = planned.destination;
        // SAFETY: a valid create info; `new` is unused memory of the
        // buffer's requirements, in the memory type of the old allocation.
        let buffer = unsafe {
            let buffer = device.create_buffer(&mesh.info, None).unwrap();
            let requirements = device.get_buffer_memory_requirements(buffer);
            assert!(requirements.size <= new.size());
            device
                .bind_buffer_memory(buffer, new.memory(), new.offset())
                .unwrap();
            buffer
        };
        // SAFETY: recording; both buffers are bound.
        unsafe { device.cmd_copy_buffer(cmd, mesh.buffer, buffer, &WHOLE) };
        let old_buffer = std::mem::replace(&mut mesh.buffer, buffer);
        let old = std::mem::replace(&mut mesh.allocation, new);
        // SAFETY: destroyed after this frame's fence, when the copy is done.
        unsafe { allocator.destroy_buffer_after_frame(old_buffer, old) }.unwrap();
    }
    if let Some(planned) = given_up {
        allocator.give_up_move(planned).unwrap();
    }
    moved
}

test_each_profile!(
    /// 30 frames of an engine's memory work, 3 in flight.
    fn engine_loop_as_the_readme_says(profile) {
        engine_loop(profile);
    }
);
