//! The team's counters: per member and summed.

use super::*;

/// Counters of one member (or of all, summed).
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct MemberStats {
    /// Missing faults (fills from far memory or with zeros).
    pub missing_faults: u64,
    /// Of those, zero fills.
    pub zero_fills: u64,
    /// Minor faults: page near, mapped for this member (`UFFDIO_CONTINUE`).
    pub minor_faults: u64,
    /// Pages evicted by this member.
    pub evictions: u64,
    /// Eviction runs (one punch each).
    pub evict_calls: u64,
    /// Bytes read from far memory.
    pub bytes_in: u64,
    /// Bytes written to far memory.
    pub bytes_out: u64,
    /// Time per cost category (paper 1 Fig. 6), ns.
    pub cost_ns: [u64; 5],
    /// Time inside fault handlers, ns.
    pub fault_ns: u64,
    /// Evicted pages that no member mapped.
    pub victims_unmapped: u64,
    /// Evicted pages mapped by the evicting member only.
    pub victims_self: u64,
    /// Evicted pages mapped by one other member only.
    pub victims_other: u64,
    /// Evicted pages mapped by two or more members.
    pub victims_many: u64,
    /// Sum over victims of members other than the evicting one mapping it.
    pub victim_remote_sharers: u64,
    /// Pages filled by read-ahead beyond the faulting one.
    pub readahead_pages: u64,
    /// Time spent evicting, ns.
    pub evict_ns: u64,
    /// Failed operations (far file full, ioctl errors).
    pub errors: u64,
    /// Faults that brought neighbours with them (fault-around).
    pub around_clusters: u64,
    /// Neighbours they brought.
    pub around_installed: u64,
    /// Of those, seen used (the member's later faults walked past them).
    pub around_used: u64,
    /// Of those, found out of near memory unused at the member's next
    /// fault on them (a lower bound: pages the member never faults on
    /// again are not counted).
    pub around_unused: u64,
    /// Writes to pages mapped write-protected (dirty tracking): the page
    /// becomes dirty and writable for this member.
    pub wp_faults: u64,
    /// Evicted pages that were clean: punched, not written back.
    pub clean_evictions: u64,
}

impl MemberStats {
    /// All faults.
    pub fn faults(&self) -> u64 {
        self.missing_faults + self.minor_faults
    }
    /// Cost categories with names.
    pub fn costs(&self) -> Vec<(String, u64)> {
        Cost::ALL
            .iter()
            .map(|c| (c.name().to_owned(), self.cost_ns[*c as usize]))
            .collect()
    }
    /// Adds `o`'s counters to these.
    pub fn add(&mut self, o: &MemberStats) {
        self.combine(o, u64::wrapping_add);
    }

    /// `self - earlier`, counter by counter.
    pub fn since(&self, earlier: &MemberStats) -> MemberStats {
        let mut d = self.clone();
        d.combine(earlier, u64::wrapping_sub);
        d
    }

    /// Applies `f(mine, theirs)` to every counter (one list of fields).
    fn combine(&mut self, o: &MemberStats, f: fn(u64, u64) -> u64) {
        let MemberStats {
            missing_faults,
            zero_fills,
            minor_faults,
            evictions,
            evict_calls,
            bytes_in,
            bytes_out,
            cost_ns,
            fault_ns,
            victims_unmapped,
            victims_self,
            victims_other,
            victims_many,
            victim_remote_sharers,
            readahead_pages,
            evict_ns,
            errors,
            around_clusters,
            around_installed,
            around_used,
            around_unused,
            wp_faults,
            clean_evictions,
        } = o;
        let pairs = [
            (&mut self.missing_faults, missing_faults),
            (&mut self.zero_fills, zero_fills),
            (&mut self.minor_faults, minor_faults),
            (&mut self.evictions, evictions),
            (&mut self.evict_calls, evict_calls),
            (&mut self.bytes_in, bytes_in),
            (&mut self.bytes_out, bytes_out),
            (&mut self.fault_ns, fault_ns),
            (&mut self.victims_unmapped, victims_unmapped),
            (&mut self.victims_self, victims_self),
            (&mut self.victims_other, victims_other),
            (&mut self.victims_many, victims_many),
            (&mut self.victim_remote_sharers, victim_remote_sharers),
            (&mut self.readahead_pages, readahead_pages),
            (&mut self.evict_ns, evict_ns),
            (&mut self.errors, errors),
            (&mut self.around_clusters, around_clusters),
            (&mut self.around_installed, around_installed),
            (&mut self.around_used, around_used),
            (&mut self.around_unused, around_unused),
            (&mut self.wp_faults, wp_faults),
            (&mut self.clean_evictions, clean_evictions),
        ];
        for (a, b) in pairs {
            *a = f(*a, *b);
        }
        for (a, b) in self.cost_ns.iter_mut().zip(cost_ns) {
            *a = f(*a, *b);
        }
    }
}

/// Statistics of a team region.
#[derive(Clone, Debug, Default, Serialize)]
pub struct TeamStats {
    /// By rank: workers `0..workers`, then the host (the creating process).
    pub members: Vec<MemberStats>,
    /// Pages near now.
    pub resident_pages: u64,
    /// Budget in pages.
    pub budget_pages: u64,
    /// Near pages by number of members mapping them (index: sharers,
    /// capped at the last entry).
    pub resident_by_sharers: Vec<u64>,
}

impl TeamStats {
    /// Sum over all members.
    pub fn total(&self) -> MemberStats {
        let mut t = MemberStats::default();
        for m in &self.members {
            t.add(m);
        }
        t
    }
}
