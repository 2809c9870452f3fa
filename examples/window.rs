//! A windowed frame loop: each frame uploads a freshly computed image through
//! an upload ring, copies it into the swapchain image on the GPU and presents
//! it, with two frames in flight. GPU scratch comes from a ring of GPU-only
//! memory and from buffers retired with `destroy_buffer_after_frame`, and
//! everything is released by the frame fences, under the validation layer
//! with best practices and synchronization validation on (across
//! submissions too, so hazards between frames are caught: scratch space
//! handed out again while an earlier frame still writes it would be one).
//!
//! ```sh
//! scripts/with-vulkan.sh cargo run --example window --features window-example
//! # headless, 120 frames (CI): needs xvfb
//! VK_SUBALLOC_FRAMES=120 xvfb-run -a scripts/with-vulkan.sh cargo run --example window --features window-example
//! ```
//!
//! Exits non-zero if the validation layer reported anything or the
//! allocator logged a warning or an error (a leak at its drop is one).

#![allow(clippy::expect_used, clippy::unwrap_used)]

#[path = "common/allocator_log.rs"]
mod allocator_log;
#[path = "window/draw.rs"]
mod draw;
#[path = "common/validation.rs"]
mod validation;

use ash::vk;
use vk_suballoc::device::{AshMemoryDevice, DeviceFeatures};
use vk_suballoc::{Allocator, Config, UploadRing, UploadRingDesc, Usage};
use winit::application::ApplicationHandler;
use winit::event::WindowEvent;
use winit::event_loop::{ActiveEventLoop, EventLoop};
use winit::raw_window_handle::{HasDisplayHandle, HasWindowHandle};
use winit::window::{Window, WindowId};

const FRAMES_IN_FLIGHT: usize = 2;

/// Per-frame-in-flight objects.
struct FrameSlot {
    /// The slot's own command pool, reset whole once the slot's fence has
    /// signalled: best practices advise resetting pools rather than single
    /// command buffers (`RESET_COMMAND_BUFFER`).
    pool: vk::CommandPool,
    command_buffer: vk::CommandBuffer,
    fence: vk::Fence,
    image_available: vk::Semaphore,
    submitted: bool,
}

/// The swapchain and what depends on its images.
struct Swapchain {
    handle: vk::SwapchainKHR,
    images: Vec<vk::Image>,
    /// One per image: signalled by the frame that renders into it.
    render_finished: Vec<vk::Semaphore>,
    /// 0×0 while the window is minimized: `draw` does nothing until the
    /// resize that restores it (winit reports one) makes the swapchain again.
    extent: vk::Extent2D,
}

struct Renderer {
    _entry: ash::Entry,
    instance: ash::Instance,
    debug_utils: ash::ext::debug_utils::Instance,
    messenger: vk::DebugUtilsMessengerEXT,
    surface_loader: ash::khr::surface::Instance,
    surface: vk::SurfaceKHR,
    physical_device: vk::PhysicalDevice,
    device: ash::Device,
    queue: vk::Queue,
    swapchain_loader: ash::khr::swapchain::Device,
    /// The swapchain images' format, chosen from what the surface offers.
    surface_format: vk::SurfaceFormatKHR,
    swapchain: Swapchain,
    slots: Vec<FrameSlot>,
    /// `Option` so it can be dropped before the device is destroyed.
    allocator: Option<Allocator<AshMemoryDevice>>,
    ring: UploadRing,
    /// GPU-only per-frame scratch (a ring whose usage has no host access).
    scratch_ring: UploadRing,
    frame: u64,
    pixels: Vec<u8>,
}

impl Renderer {
    fn new(window: &Window) -> Self {
        // SAFETY: loading the system's Vulkan loader.
        let entry = unsafe { ash::Entry::load() }.expect("no Vulkan loader (libvulkan1)");
        let display = window.display_handle().unwrap().as_raw();
        let mut extensions = ash_window::enumerate_required_extensions(display)
            .unwrap()
            .to_vec();
        extensions.push(ash::ext::debug_utils::NAME.as_ptr());
        // VK_EXT_validation_features comes with the validation layer.
        extensions.push(ash::ext::validation_features::NAME.as_ptr());
        let mut validation_features =
            vk::ValidationFeaturesEXT::default().enabled_validation_features(&validation::CHECKS);
        let layers = [c"VK_LAYER_KHRONOS_validation".as_ptr()];
        let app = vk::ApplicationInfo::default()
            .application_name(c"vk-suballoc window")
            .api_version(vk::API_VERSION_1_3);
        let mut messenger_info = validation::messenger_info();
        let info = vk::InstanceCreateInfo::default()
            .application_info(&app)
            .enabled_layer_names(&layers)
            .enabled_extension_names(&extensions)
            .push_next(&mut messenger_info)
            .push_next(&mut validation_features);
        // SAFETY: a valid create info; missing pieces fail with a result.
        let instance = unsafe { entry.create_instance(&info, None) }
            .expect("vkCreateInstance failed (validation layer or surface extensions missing?)");
        let debug_utils = ash::ext::debug_utils::Instance::new(&entry, &instance);
        // SAFETY: VK_EXT_debug_utils is enabled.
        let messenger =
            unsafe { debug_utils.create_debug_utils_messenger(&messenger_info, None) }.unwrap();
        let window_handle = window.window_handle().unwrap().as_raw();
        // SAFETY: the handles come from a live window; the instance enables
        // the surface extensions ash-window asked for.
        let surface =
            unsafe { ash_window::create_surface(&entry, &instance, display, window_handle, None) }
                .unwrap();
        let surface_loader = ash::khr::surface::Instance::new(&entry, &instance);

        // A device whose first queue family can render and present.
        // SAFETY: valid instance and surface.
        let (physical_device, family) = unsafe { instance.enumerate_physical_devices() }
            .unwrap()
            .into_iter()
            .find_map(|pd| {
                // SAFETY: `pd` belongs to the instance.
                let families = unsafe { instance.get_physical_device_queue_family_properties(pd) };
                families.iter().enumerate().find_map(|(i, f)| {
                    // SAFETY: `pd`, the family index and the surface are valid.
                    let present = unsafe {
                        surface_loader.get_physical_device_surface_support(pd, i as u32, surface)
                    }
                    .unwrap_or(false);
                    (f.queue_flags.contains(vk::QueueFlags::GRAPHICS) && present)
                        .then_some((pd, i as u32))
                })
            })
            .expect("no device can present to the window");
        let priorities = [1.0];
        let queues = [vk::DeviceQueueCreateInfo::default()
            .queue_family_index(family)
            .queue_priorities(&priorities)];
        let device_extensions = [ash::khr::swapchain::NAME.as_ptr()];
        let device_info = vk::DeviceCreateInfo::default()
            .queue_create_infos(&queues)
            .enabled_extension_names(&device_extensions);
        // SAFETY: valid create info for this physical device.
        let device =
            unsafe { instance.create_device(physical_device, &device_info, None) }.unwrap();
        // SAFETY: the family and index exist.
        let queue = unsafe { device.get_device_queue(family, 0) };
        let swapchain_loader = ash::khr::swapchain::Device::new(&instance, &device);

        // TRANSIENT: the command buffers are re-recorded every frame.
        let pool_info = vk::CommandPoolCreateInfo::default()
            .flags(vk::CommandPoolCreateFlags::TRANSIENT)
            .queue_family_index(family);
        let slots = (0..FRAMES_IN_FLIGHT)
            .map(|_| {
                // SAFETY: valid create info.
                let pool = unsafe { device.create_command_pool(&pool_info, None) }.unwrap();
                let alloc_info = vk::CommandBufferAllocateInfo::default()
                    .command_pool(pool)
                    .level(vk::CommandBufferLevel::PRIMARY)
                    .command_buffer_count(1);
                // SAFETY: `pool` belongs to `device`.
                let command_buffers =
                    unsafe { device.allocate_command_buffers(&alloc_info) }.unwrap();
                FrameSlot {
                    pool,
                    command_buffer: command_buffers[0],
                    // SAFETY: valid create infos.
                    fence: unsafe { device.create_fence(&vk::FenceCreateInfo::default(), None) }
                        .unwrap(),
                    // SAFETY: as above.
                    image_available: unsafe {
                        device.create_semaphore(&vk::SemaphoreCreateInfo::default(), None)
                    }
                    .unwrap(),
                    submitted: false,
                }
            })
            .collect();

        // The frame is written as B, G, R, A bytes and copied as it is, so
        // a BGRA8 format shows it as computed (the copy does not convert,
        // so the sRGB variant shows the same bytes).
        // SAFETY: the surface and `physical_device` belong to the instance.
        let formats =
            unsafe { surface_loader.get_physical_device_surface_formats(physical_device, surface) }
                .unwrap();
        let surface_format = [vk::Format::B8G8R8A8_UNORM, vk::Format::B8G8R8A8_SRGB]
            .into_iter()
            .find_map(|format| {
                formats.iter().copied().find(|f| {
                    f.format == format && f.color_space == vk::ColorSpaceKHR::SRGB_NONLINEAR
                })
            })
            .expect("the surface offers no B8G8R8A8 format");

        let features = DeviceFeatures {
            debug_utils: true,
            ..DeviceFeatures::default()
        };
        // SAFETY: Vulkan 1.3 instance; `device` comes from `physical_device`;
        // both outlive the allocator (dropped first in `Drop`).
        let memory_device =
            unsafe { AshMemoryDevice::new(&instance, &device, physical_device, features) };
        let allocator = Allocator::new(memory_device, Config::default()).unwrap();
        let ring_desc = UploadRingDesc {
            size: 8 << 20,
            grow: true,
            name: Some("frame upload ring"),
            ..UploadRingDesc::default()
        };
        let ring = allocator.create_upload_ring(&ring_desc).unwrap();
        let scratch_desc = UploadRingDesc {
            size: 1 << 20,
            usage: Usage::DEVICE_LOCAL,
            buffer_usage: vk::BufferUsageFlags::TRANSFER_DST,
            name: Some("frame scratch ring"),
            ..UploadRingDesc::default()
        };
        let scratch_ring = allocator.create_upload_ring(&scratch_desc).unwrap();
        let size = window.inner_size();
        let mut renderer = Self {
            _entry: entry,
            instance,
            debug_utils,
            messenger,
            surface_loader,
            surface,
            physical_device,
            device,
            queue,
            swapchain_loader,
            surface_format,
            swapchain: Swapchain {
                handle: vk::SwapchainKHR::null(),
                images: Vec::new(),
                render_finished: Vec::new(),
                extent: vk::Extent2D::default(),
            },
            slots,
            allocator: Some(allocator),
            ring,
            scratch_ring,
            frame: 0,
            pixels: Vec::new(),
        };
        renderer.recreate_swapchain(size.width, size.height);
        renderer
    }

    fn allocator(&self) -> &Allocator<AshMemoryDevice> {
        self.allocator.as_ref().expect("allocator lives until drop")
    }

    fn recreate_swapchain(&mut self, width: u32, height: u32) {
        // SAFETY: waiting for idle before destroying what frames use.
        unsafe { self.device.device_wait_idle() }.unwrap();
        // SAFETY: the surface and device are live.
        let caps = unsafe {
            self.surface_loader
                .get_physical_device_surface_capabilities(self.physical_device, self.surface)
        }
        .unwrap();
        assert!(
            caps.supported_usage_flags
                .contains(vk::ImageUsageFlags::TRANSFER_DST),
            "the surface cannot be a transfer destination"
        );
        let extent = if caps.current_extent.width == u32::MAX {
            // The surface takes the swapchain's size (Wayland): the window's,
            // within what the surface allows.
            if width == 0 || height == 0 {
                vk::Extent2D::default()
            } else {
                vk::Extent2D {
                    width: width.clamp(caps.min_image_extent.width, caps.max_image_extent.width),
                    height: height
                        .clamp(caps.min_image_extent.height, caps.max_image_extent.height),
                }
            }
        } else {
            caps.current_extent
        };
        if extent.width == 0 || extent.height == 0 {
            // Minimized (Windows reports a 0×0 surface): no swapchain can be
            // made (VUID-VkSwapchainCreateInfoKHR-imageExtent-01689). Keep the
            // old one, to retire when the window comes back, and draw nothing
            // until a resize makes the swapchain again.
            self.swapchain.extent = extent;
            return;
        }
        let image_count = (caps.min_image_count + 1).min(if caps.max_image_count == 0 {
            u32::MAX
        } else {
            caps.max_image_count
        });
        let info = vk::SwapchainCreateInfoKHR::default()
            .surface(self.surface)
            .min_image_count(image_count)
            .image_format(self.surface_format.format)
            .image_color_space(self.surface_format.color_space)
            .image_extent(extent)
            .image_array_layers(1)
            .image_usage(vk::ImageUsageFlags::TRANSFER_DST)
            .image_sharing_mode(vk::SharingMode::EXCLUSIVE)
            .pre_transform(caps.current_transform)
            .composite_alpha(vk::CompositeAlphaFlagsKHR::OPAQUE)
            .present_mode(vk::PresentModeKHR::FIFO)
            .clipped(true)
            .old_swapchain(self.swapchain.handle);
        // SAFETY: a valid create info: the format is one the surface offers,
        // FIFO is the present mode every surface supports.
        let handle = unsafe { self.swapchain_loader.create_swapchain(&info, None) }.unwrap();
        self.destroy_swapchain();
        // SAFETY: `handle` is a live swapchain.
        let images = unsafe { self.swapchain_loader.get_swapchain_images(handle) }.unwrap();
        let render_finished = images
            .iter()
            .map(|_| {
                // SAFETY: valid create info.
                unsafe {
                    self.device
                        .create_semaphore(&vk::SemaphoreCreateInfo::default(), None)
                }
                .unwrap()
            })
            .collect();
        self.swapchain = Swapchain {
            handle,
            images,
            render_finished,
            extent,
        };
    }

    fn destroy_swapchain(&mut self) {
        // SAFETY: the device is idle (callers wait); each object is destroyed once.
        unsafe {
            for semaphore in self.swapchain.render_finished.drain(..) {
                self.device.destroy_semaphore(semaphore, None);
            }
            if self.swapchain.handle != vk::SwapchainKHR::null() {
                self.swapchain_loader
                    .destroy_swapchain(self.swapchain.handle, None);
            }
        }
    }
}

impl Drop for Renderer {
    fn drop(&mut self) {
        // SAFETY: wait for the GPU before releasing anything it may use.
        unsafe { self.device.device_wait_idle() }.unwrap();
        if let Some(allocator) = self.allocator.take() {
            allocator.destroy_upload_ring(self.ring).unwrap();
            allocator.destroy_upload_ring(self.scratch_ring).unwrap();
            allocator.wait_and_collect(u64::MAX).unwrap();
            // The ring's buffers were queued in the current frame: seal it
            // with a fence that an empty submission signals.
            // SAFETY: valid create info; an empty submission signals it.
            let fence = unsafe {
                self.device
                    .create_fence(&vk::FenceCreateInfo::default(), None)
            }
            .unwrap();
            // SAFETY: as above; the fence follows all earlier work.
            unsafe {
                self.device.queue_submit(self.queue, &[], fence).unwrap();
                allocator.end_frame(fence).unwrap();
            }
            allocator.wait_and_collect(u64::MAX).unwrap();
            println!("frames: {}", self.frame);
            print!("{}", allocator.stats());
            println!("trim released {} bytes", allocator.trim());
            drop(allocator);
            // SAFETY: collected, so no frame refers to it.
            unsafe { self.device.destroy_fence(fence, None) };
        }
        self.destroy_swapchain();
        // SAFETY: the device is idle; every object is destroyed once, children first.
        unsafe {
            for slot in &self.slots {
                self.device.destroy_fence(slot.fence, None);
                self.device.destroy_semaphore(slot.image_available, None);
                self.device.destroy_command_pool(slot.pool, None);
            }
            self.device.destroy_device(None);
            self.surface_loader.destroy_surface(self.surface, None);
            self.debug_utils
                .destroy_debug_utils_messenger(self.messenger, None);
            self.instance.destroy_instance(None);
        }
    }
}

/// The winit application: a window and its renderer.
struct App {
    frame_limit: Option<u64>,
    window: Option<Window>,
    renderer: Option<Renderer>,
}

impl ApplicationHandler for App {
    fn resumed(&mut self, event_loop: &ActiveEventLoop) {
        if self.window.is_some() {
            return;
        }
        let attributes = Window::default_attributes()
            .with_title("vk-suballoc")
            .with_inner_size(winit::dpi::LogicalSize::new(640.0, 400.0));
        let window = event_loop.create_window(attributes).unwrap();
        self.renderer = Some(Renderer::new(&window));
        window.request_redraw();
        self.window = Some(window);
    }

    fn window_event(&mut self, event_loop: &ActiveEventLoop, _: WindowId, event: WindowEvent) {
        match event {
            WindowEvent::CloseRequested => event_loop.exit(),
            WindowEvent::Resized(size) => {
                if let Some(renderer) = &mut self.renderer {
                    renderer.recreate_swapchain(size.width, size.height);
                }
            }
            WindowEvent::RedrawRequested => {
                if let Some(renderer) = &mut self.renderer {
                    renderer.draw();
                    if self
                        .frame_limit
                        .is_some_and(|limit| renderer.frame >= limit)
                    {
                        event_loop.exit();
                    }
                }
                if let Some(window) = &self.window {
                    window.request_redraw();
                }
            }
            _ => {}
        }
    }

    fn exiting(&mut self, _: &ActiveEventLoop) {
        // The renderer (and its surface) goes before the window.
        self.renderer = None;
        self.window = None;
    }
}

fn main() {
    validation::enable_submit_time_sync_validation();
    allocator_log::install();
    let frame_limit = std::env::var("VK_SUBALLOC_FRAMES")
        .ok()
        .and_then(|v| v.parse().ok());
    let event_loop = EventLoop::new().expect("no display: run under X11/Wayland or xvfb-run");
    let mut app = App {
        frame_limit,
        window: None,
        renderer: None,
    };
    event_loop.run_app(&mut app).unwrap();
    let messages = validation::messages();
    println!("validation messages: {messages}");
    let warnings = allocator_log::allocator_warnings();
    println!("allocator warnings and errors (leaks included): {warnings}");
    if messages > 0 || warnings > 0 {
        std::process::exit(1);
    }
}
