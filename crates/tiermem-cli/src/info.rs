//! `tiermem info`: kernel, userfaultfd features, huge page pools, CPUs.

use tiermem::config::format_size;

pub fn run(json: bool) -> Result<(), String> {
    let i = tiermem::SystemInfo::probe();
    let cg_v1 = std::path::Path::new("/sys/fs/cgroup/memory/memory.limit_in_bytes").exists();
    let zram = std::path::Path::new("/sys/class/zram-control").exists();
    if json {
        let v = serde_json::json!({
            "kernel": i.kernel_release,
            "uffd_features": i.uffd_features.as_ref().map(|f| f.names()).map_err(|e| e.clone()),
            "pagemap_scan": i.pagemap_scan,
            "hugepages_2m": i.pool_2m.map(|p| serde_json::json!({"total": p.total, "free": p.free, "reserved": p.reserved})),
            "hugepages_1g": i.pool_1g.map(|p| serde_json::json!({"total": p.total, "free": p.free, "reserved": p.reserved})),
            "cpus": i.cpus,
            "cpu_model": i.cpu_model,
            "mem_total_bytes": i.mem_total_bytes,
            "thp": i.thp_mode,
            "root": i.root,
            "memory_cgroup_v1": cg_v1,
            "zram": zram,
        });
        println!("{}", serde_json::to_string_pretty(&v).map_err(|e| e.to_string())?);
        return Ok(());
    }
    println!("kernel           {}", i.kernel_release);
    println!("cpus             {} x {}", i.cpus, i.cpu_model);
    println!("memory           {}", format_size(i.mem_total_bytes));
    println!("transparent huge pages: {}", i.thp_mode);
    match &i.uffd_features {
        Ok(f) => {
            println!("userfaultfd      available");
            use tiermem_sys::uffd::Features as F;
            for (feat, use_) in [
                (F::SIGBUS, "in-context fault path (default)"),
                (F::THREAD_ID, "handler-thread fault path, per-thread stats"),
                (F::PAGEFAULT_FLAG_WP, "dirty tracking (wp-fault)"),
                (F::WP_ASYNC, "dirty tracking (wp-async)"),
                (F::WP_UNPOPULATED, "(enabled with WP_ASYNC)"),
                (F::MISSING_HUGETLBFS, "2 MiB pages"),
                (F::WP_HUGETLBFS_SHMEM, "dirty tracking of 2 MiB pages"),
                (F::MINOR_SHMEM, "shared regions (later)"),
                (F::POISON, "failing accesses visibly (handler-thread)"),
                (F::MOVE, "zero-copy install (install=move)"),
            ] {
                let name = feat.names();
                println!(
                    "  {} {name:<20} {use_}",
                    if f.contains(feat) { "yes" } else { "NO " }
                );
            }
        }
        Err(e) => println!("userfaultfd      UNAVAILABLE: {e}"),
    }
    println!("PAGEMAP_SCAN     {}", if i.pagemap_scan { "yes" } else { "no" });
    for (name, p) in [("2M", i.pool_2m), ("1G", i.pool_1g)] {
        match p {
            Some(p) => println!(
                "hugepages {name}     {} total, {} free, {} reserved",
                p.total, p.free, p.reserved
            ),
            None => println!("hugepages {name}     no pool"),
        }
    }
    println!(
        "kernel-swap baseline: root {}, memory cgroup v1 {}, zram {}",
        if i.root { "yes" } else { "no" },
        if cg_v1 { "yes" } else { "no" },
        if zram { "yes" } else { "no" }
    );
    println!(
        "TLB shootdowns so far: {:?} per CPU",
        tiermem_sys::interrupts::tlb_shootdowns_per_cpu().unwrap_or_default()
    );
    Ok(())
}
