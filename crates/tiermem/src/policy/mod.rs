//! Replacement policies: which resident pages to evict, as a batch.
//!
//! A policy observes events (a page was filled, a page left near memory)
//! and answers "which pages to evict" with victims in preference order; the
//! engine carries the decision out. Policies see page indices only and
//! never block, allocate or do I/O: they run under one short lock, also
//! from the in-context SIGBUS handler.
//!
//! Policies:
//! - [`fifo`]: first filled, first evicted (paper 1, section IV.B);
//! - [`clock`]: second chance over reference bits from the accesses user
//!   space can observe;
//! - [`scan`]: scan-resistant, for cyclic sweeps larger than the budget;
//! - [`auto`]: FIFO or scan resistance, chosen from the refaults it sees.

pub mod auto;
pub mod clock;
pub mod fifo;
mod list;
pub mod scan;
#[cfg(test)]
mod testing;

/// A replacement policy.
pub trait Policy: Send {
    /// Page `page` became resident (filled from far memory or zero-filled).
    fn on_fill(&mut self, page: usize);

    /// Page `page` was observed being accessed (a write-protect fault, a
    /// re-fault on a page unmapped but not yet reused). Default: ignored.
    fn on_access(&mut self, _page: usize) {}

    /// Page `page` left near memory other than by `select_victims` (it was
    /// discarded), or an eviction of it was abandoned and it stays resident
    /// (`still_resident`), in which case the policy may keep tracking it.
    fn on_remove(&mut self, page: usize, still_resident: bool);

    /// Page `page`, chosen by `select_victims`, really left near memory
    /// (called only for policies whose [`PolicyKind::sees_evictions`]).
    fn on_evicted(&mut self, _page: usize) {}

    /// What the adaptive policy did ([`auto`] only).
    fn auto_stats(&self) -> Option<auto::AutoStats> {
        None
    }

    /// Whether `page` may be evicted along with nearby victims (to make
    /// longer contiguous runs: one unmap call, one TLB shootdown, for the
    /// whole run). Policies say no for pages they want to keep.
    fn evictable(&self, _page: usize) -> bool {
        true
    }

    /// Moves up to `out.len()` victims into `out`, best first, and stops
    /// tracking them. Returns how many.
    fn select_victims(&mut self, out: &mut [usize]) -> usize;

    /// Pages currently tracked.
    fn tracked(&self) -> usize;
}

/// The policies by name, for configuration and command lines.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PolicyKind {
    /// First in, first out by fill order (the default).
    #[default]
    Fifo,
    /// CLOCK / second chance.
    Clock,
    /// Scan-resistant (most recently filled first, outside a window).
    Scan,
    /// FIFO or scan, switched by what comes back after eviction.
    Auto,
}

impl PolicyKind {
    /// Every policy.
    pub const ALL: &'static [PolicyKind] = &[
        PolicyKind::Fifo,
        PolicyKind::Clock,
        PolicyKind::Scan,
        PolicyKind::Auto,
    ];

    /// The policy's name.
    pub fn name(self) -> &'static str {
        match self {
            PolicyKind::Fifo => "fifo",
            PolicyKind::Clock => "clock",
            PolicyKind::Scan => "scan",
            PolicyKind::Auto => "auto",
        }
    }

    /// Whether the engine reports each page that left to the policy
    /// ([`Policy::on_evicted`]: a lock per eviction run).
    pub fn sees_evictions(self) -> bool {
        self == PolicyKind::Auto
    }

    /// Looks a policy up by name.
    pub fn from_name(name: &str) -> Option<PolicyKind> {
        Self::ALL
            .iter()
            .copied()
            .find(|p| p.name().eq_ignore_ascii_case(name))
    }

    /// Builds the policy for a region of `pages` pages with a budget of
    /// `near` pages. `window` is the number of recent fills the
    /// scan-resistant policies protect (the working neighbourhood plus what
    /// the prefetcher brought in ahead).
    pub fn build(self, pages: usize, near: usize, window: usize) -> Box<dyn Policy> {
        match self {
            PolicyKind::Fifo => Box::new(fifo::Fifo::new(pages)),
            PolicyKind::Clock => Box::new(clock::Clock::new(pages)),
            PolicyKind::Scan => Box::new(scan::Scan::new(pages, window)),
            PolicyKind::Auto => Box::new(auto::Auto::new(pages, near, window)),
        }
    }
}

impl std::fmt::Display for PolicyKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}
