//! The memory architectures the Vulkan tests run against.

use std::fmt;

/// A memory architecture for a test device: lavapipe as it is, or lavapipe
/// behind the fake-memory layer (`layers/fake-memory`) with one of its profiles.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Profile {
    /// Lavapipe alone: one heap, one coherent type, no `VK_EXT_memory_budget`.
    Lavapipe,
    /// A discrete GPU: 1 GiB device-local heap, 2 GiB host heap, 256 MiB BAR
    /// heap; device-local, host coherent, host cached non-coherent and BAR
    /// types; granularity 1024, atom 256, 4096 allocations.
    Discrete,
    /// An integrated GPU: one 2 GiB device-local heap, every type device-local
    /// (plain, host coherent, host coherent cached); granularity 64, atom 64.
    Integrated,
    /// A mobile GPU: one 256 MiB heap, a non-coherent cached host type before
    /// the coherent one, then a lazily allocated device-local type that only
    /// transient-attachment images may use; granularity 4096, atom 128, 1024
    /// allocations.
    Mobile,
    /// A discrete AMD GPU: the discrete heaps; device-local, host coherent,
    /// BAR and host cached types, then the same four with AMD's
    /// device-coherent flags, which need a feature these devices never
    /// enable; granularity 64, atom 64.
    Amd,
    /// A discrete GPU with resizable BAR: 1 GiB device-local heap holding
    /// both the device-local type and the host-visible one (no BAR heap),
    /// 2 GiB host heap with coherent and coherent cached types; granularity
    /// 1024, atom 64.
    Rebar,
    /// Intel Arc without resizable BAR (Mesa's ANV): 1.75 GiB device-local
    /// heap the host cannot map, 2 GiB host heap, 256 MiB BAR heap;
    /// device-local, host coherent *cached* (the only system-memory type)
    /// and BAR types; granularity 1, atom 64, no allocation-count limit of
    /// its own.
    Arc,
    /// An Apple-silicon Mac through MoltenVK: one 2 GiB heap, every type
    /// device-local; private, then host-visible cached *non-coherent*
    /// (managed) before host-visible coherent cached (shared); granularity
    /// 16, atom 16.
    Apple,
    /// A Mali GPU: one 2 GiB heap, no device-local type the host cannot map
    /// (host coherent, host coherent cached), then a lazily allocated type
    /// that only transient-attachment images may use; granularity 4096,
    /// atom 64.
    Mali,
}

impl Profile {
    /// Every profile, lavapipe first.
    pub const ALL: [Profile; 9] = [
        Profile::Lavapipe,
        Profile::Discrete,
        Profile::Integrated,
        Profile::Mobile,
        Profile::Amd,
        Profile::Rebar,
        Profile::Arc,
        Profile::Apple,
        Profile::Mali,
    ];

    /// The profiles served by the fake-memory layer.
    pub const FAKE: [Profile; 8] = [
        Profile::Discrete,
        Profile::Integrated,
        Profile::Mobile,
        Profile::Amd,
        Profile::Rebar,
        Profile::Arc,
        Profile::Apple,
        Profile::Mali,
    ];

    /// Lower-case name, as in test names and the layer's configuration.
    pub fn name(self) -> &'static str {
        match self {
            Profile::Lavapipe => "lavapipe",
            Profile::Discrete => "discrete",
            Profile::Integrated => "integrated",
            Profile::Mobile => "mobile",
            Profile::Amd => "amd",
            Profile::Rebar => "rebar",
            Profile::Arc => "arc",
            Profile::Apple => "apple",
            Profile::Mali => "mali",
        }
    }

    /// Whether the device offers `VK_EXT_memory_budget`: the fake-memory
    /// layer's profiles of GPUs that have it (discrete, amd, rebar, arc),
    /// as the crate's `FakeLayout`s of the same names. Lavapipe, integrated,
    /// mobile, apple and mali have none: allocators count their own usage
    /// against a fraction of each heap there.
    pub fn has_memory_budget(self) -> bool {
        matches!(
            self,
            Profile::Discrete | Profile::Amd | Profile::Rebar | Profile::Arc
        )
    }

    /// Whether the profile offers `VK_EXT_memory_priority` (which the
    /// fake-memory layer emulates), as NVIDIA's and AMD's drivers do:
    /// discrete, amd and rebar. Lavapipe has none.
    pub fn has_memory_priority(self) -> bool {
        matches!(self, Profile::Discrete | Profile::Amd | Profile::Rebar)
    }

    /// Whether this profile needs the fake-memory layer.
    pub fn uses_fake_layer(self) -> bool {
        self != Profile::Lavapipe
    }
}

impl fmt::Display for Profile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Defines a module `$name` with one `#[test]` per listed profile (test
/// function name and [`Profile`] variant), each running the body with
/// `$profile` bound to its profile: the body of [`test_each_profile!`] and
/// [`test_each_fake_profile!`].
macro_rules! test_profiles {
    (
        [$($test:ident => $variant:ident),+]
        $(#[$attr:meta])* fn $name:ident($profile:ident) $body:block
    ) => {
        $(#[$attr])*
        mod $name {
            #[allow(unused_imports)]
            use super::*;

            fn run($profile: $crate::support::Profile) $body

            $(
                #[test]
                fn $test() {
                    run($crate::support::Profile::$variant)
                }
            )+
        }
    };
}
pub(crate) use test_profiles;

/// Defines a module `$name` with one `#[test]` per [`Profile`] (functions
/// `lavapipe`, `discrete`, `integrated`, `mobile`, `amd`, `rebar`, `arc`,
/// `apple`, `mali`), each running the body with
/// `$profile` bound to its profile. Run one profile's tests with a name
/// filter, e.g. `cargo test --test vulkan -- ::mobile`.
///
/// ```ignore
/// test_each_profile!(
///     /// Every buffer can be bound.
///     fn buffers_bind(profile) {
///         let context = VulkanContext::new(profile);
///         // ...
///     }
/// );
/// ```
macro_rules! test_each_profile {
    ($($test:tt)*) => {
        $crate::support::test_profiles!(
            [lavapipe => Lavapipe, discrete => Discrete, integrated => Integrated, mobile => Mobile, amd => Amd, rebar => Rebar, arc => Arc, apple => Apple, mali => Mali]
            $($test)*
        );
    };
}
pub(crate) use test_each_profile;

/// Like [`test_each_profile!`], for the fake-memory profiles only (no
/// `lavapipe` test): for behaviour lavapipe alone cannot show.
macro_rules! test_each_fake_profile {
    ($($test:tt)*) => {
        $crate::support::test_profiles!(
            [discrete => Discrete, integrated => Integrated, mobile => Mobile, amd => Amd, rebar => Rebar, arc => Arc, apple => Apple, mali => Mali]
            $($test)*
        );
    };
}
pub(crate) use test_each_fake_profile;
