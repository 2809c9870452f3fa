//! The driver's memory requirements of the traces' resources, and the
//! create infos they are queried (and, for real resources, made) with.
//!
//! Every allocation of a trace carries the `VkMemoryRequirements` the
//! driver reports for its resource; [`RequirementSource`] asks the driver
//! once per distinct resource, with no resource created, so that every
//! allocator gets exactly the same requirements. It is apart from
//! `trace.rs`, which builds the traces, because it is the bench's one
//! place that asks the device about the traces' resources.

use std::collections::HashMap;

use ash::vk;

use super::Resource;

/// Memory requirements of resources, queried from the driver once per
/// distinct resource (`vkGetDeviceBufferMemoryRequirements` /
/// `vkGetDeviceImageMemoryRequirements`: no resource is created).
pub struct RequirementSource<'a> {
    device: &'a ash::Device,
    cache: HashMap<Resource, vk::MemoryRequirements>,
    pub queries: u64,
}

impl<'a> RequirementSource<'a> {
    pub fn new(device: &'a ash::Device) -> Self {
        Self {
            device,
            cache: HashMap::new(),
            queries: 0,
        }
    }

    pub fn get(&mut self, resource: Resource) -> vk::MemoryRequirements {
        if let Some(r) = self.cache.get(&resource) {
            return *r;
        }
        self.queries += 1;
        let mut out = vk::MemoryRequirements2::default();
        match resource {
            Resource::Buffer { .. } => {
                let info = buffer_info(&resource);
                let query = vk::DeviceBufferMemoryRequirements::default().create_info(&info);
                // SAFETY: Vulkan 1.3 device; valid create info.
                unsafe {
                    self.device
                        .get_device_buffer_memory_requirements(&query, &mut out)
                };
            }
            Resource::Image { .. } => {
                let info = image_info(&resource);
                let query = vk::DeviceImageMemoryRequirements::default().create_info(&info);
                // SAFETY: Vulkan 1.3 device; valid create info.
                unsafe {
                    self.device
                        .get_device_image_memory_requirements(&query, &mut out)
                };
            }
        }
        let r = out.memory_requirements;
        self.cache.insert(resource, r);
        r
    }
}

/// The create info of a buffer resource.
pub fn buffer_info(resource: &Resource) -> vk::BufferCreateInfo<'static> {
    let Resource::Buffer { size, usage } = *resource else {
        unreachable!("buffer_info of an image")
    };
    vk::BufferCreateInfo::default()
        .size(size)
        .usage(usage)
        .sharing_mode(vk::SharingMode::EXCLUSIVE)
}

/// The create info of an image resource: 2D RGBA8, optimal tiling, one mip.
pub fn image_info(resource: &Resource) -> vk::ImageCreateInfo<'static> {
    let Resource::Image { width, height } = *resource else {
        unreachable!("image_info of a buffer")
    };
    vk::ImageCreateInfo::default()
        .image_type(vk::ImageType::TYPE_2D)
        .format(vk::Format::R8G8B8A8_UNORM)
        .extent(vk::Extent3D {
            width,
            height,
            depth: 1,
        })
        .mip_levels(1)
        .array_layers(1)
        .samples(vk::SampleCountFlags::TYPE_1)
        .tiling(vk::ImageTiling::OPTIMAL)
        .usage(vk::ImageUsageFlags::SAMPLED | vk::ImageUsageFlags::TRANSFER_DST)
        .sharing_mode(vk::SharingMode::EXCLUSIVE)
        .initial_layout(vk::ImageLayout::UNDEFINED)
}
