//! TLB-shootdown IPIs from the `TLB:` line of `/proc/interrupts`.

/// Per-CPU counts of TLB-shootdown interrupts received so far.
pub fn tlb_shootdowns_per_cpu() -> std::io::Result<Vec<u64>> {
    let s = std::fs::read_to_string("/proc/interrupts")?;
    Ok(parse_tlb_line(&s).unwrap_or_default())
}

/// Total TLB-shootdown interrupts over all CPUs so far (0 if the kernel
/// has no `TLB:` line, e.g. not x86).
pub fn tlb_shootdowns() -> u64 {
    tlb_shootdowns_per_cpu().map(|v| v.iter().sum()).unwrap_or(0)
}

fn parse_tlb_line(s: &str) -> Option<Vec<u64>> {
    let line = s.lines().find(|l| l.trim_start().starts_with("TLB:"))?;
    Some(
        line.trim_start()["TLB:".len()..]
            .split_whitespace()
            .map_while(|w| w.parse::<u64>().ok())
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_tlb_line() {
        let s = "           CPU0       CPU1\n  0:   42   0  IO-APIC timer\n TLB:        796        749   TLB shootdowns\n";
        assert_eq!(parse_tlb_line(s), Some(vec![796, 749]));
        assert_eq!(parse_tlb_line("nothing"), None);
    }

    #[test]
    fn reads_this_machine() {
        let v = tlb_shootdowns_per_cpu().unwrap();
        if cfg!(target_arch = "x86_64") {
            assert!(!v.is_empty());
        }
    }
}
