//! The seeded random source of the randomised tests (shared by the
//! `fake_device` and `vulkan` test binaries through `#[path]`).

/// SplitMix64: small, seedable, good enough for test workloads.
pub struct Rng(pub u64);

impl Rng {
    /// The seed of a randomised test: `VK_SUBALLOC_SEED` when set, else the
    /// clock. Printed with `test`'s name, so a failure can be replayed.
    pub fn seed(test: &str) -> u64 {
        let seed = std::env::var("VK_SUBALLOC_SEED")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| {
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(1, |d| d.as_nanos() as u64)
            });
        println!("{test}: seed {seed} (replay with VK_SUBALLOC_SEED={seed})");
        seed
    }

    /// A generator seeded by [`Rng::seed`].
    pub fn from_env(test: &str) -> Self {
        Self(Self::seed(test))
    }

    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}
