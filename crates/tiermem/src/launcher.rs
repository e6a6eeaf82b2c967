//! The job launcher that started this process (`mpirun`, `mpiexec`,
//! `srun`), read from the variables it exports, and what follows from it
//! for a process's share of its node: one place of truth for `tiermem
//! run` and the preload library alike.
//!
//! A share of physical memory (`--near 50%`, `TIERMEM_NEAR=50%`), a node
//! total (`--near-node 64G`, `TIERMEM_NEAR_NODE`) and the heap's default
//! address range are of the NODE, divided among the job's ranks on that
//! node; an absolute size (`--near 4G`) and a share of the footprint
//! (`50%fp`, which a previous run of this very rank measured) stay per
//! process. Launchers read, first match wins:
//!
//! | launcher | rank, size | local rank, local size |
//! |---|---|---|
//! | Open MPI 4/5 | `OMPI_COMM_WORLD_RANK`, `_SIZE` | `OMPI_COMM_WORLD_LOCAL_RANK`, `_LOCAL_SIZE` |
//! | MPICH/Hydra (Intel MPI) | `PMI_RANK`, `PMI_SIZE` | `MPI_LOCALRANKID`, `MPI_LOCALNRANKS` |
//! | Slurm `srun` (a job step) | `SLURM_PROCID`, `SLURM_STEP_NUM_TASKS`/`SLURM_NTASKS` | `SLURM_LOCALID`, `SLURM_STEP_TASKS_PER_NODE`/`SLURM_TASKS_PER_NODE` at `SLURM_NODEID`, else `SLURM_NTASKS_PER_NODE` |
//! | PMIx | `PMIX_RANK` | `PMIX_LOCAL_RANK`, `PMIX_LOCAL_SIZE` where exported |
//! | PMI | `PMI_RANK`, `PMI_SIZE` | none |
//!
//! PMIx itself exports no local size (Open MPI 4.1 sets `PMIX_RANK`,
//! `PMIX_NAMESPACE` and `PMIX_ID`; the local size is a `PMIx_Get` key):
//! under a bare PMIx or PMI launcher the rank names the files, and the
//! budgets stay per process, with a warning. A value that is not understood
//! is a warning and the same per-process behaviour, never an error.

use crate::config::{default_far_bytes, format_size, parse_near, parse_share, NearSpec};
use serde::Serialize;
use std::path::{Path, PathBuf};

/// Where this process stands in its job, as its launcher said.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Ranks {
    /// Which launcher's variables said it (`Open MPI`, `Slurm`, ...).
    pub launcher: &'static str,
    /// The rank in the job (0-based).
    pub rank: u64,
    /// Ranks in the job, where known.
    pub size: Option<u64>,
    /// The rank among the job's ranks on this node, where known.
    pub local_rank: Option<u64>,
    /// The job's ranks on this node, where known.
    pub local_size: Option<u64>,
}

impl Ranks {
    /// The ranks that share this node's memory (1 when unknown: the
    /// process then has the node to itself, as without a launcher).
    pub fn local_ranks(&self) -> u64 {
        self.local_size.unwrap_or(1).max(1)
    }

    /// Whether more than this process run in the job (its files would
    /// collide).
    pub fn several(&self) -> bool {
        self.size.unwrap_or(1) > 1 || self.local_size.unwrap_or(1) > 1
    }

    /// `rank 1/4 (local 1/2, Open MPI)`.
    pub fn describe(&self) -> String {
        let of = |n: Option<u64>| n.map_or("?".to_owned(), |n| n.to_string());
        let local = match (self.local_rank, self.local_size) {
            (None, None) => String::new(),
            (r, s) => format!("local {}/{}, ", of(r), of(s)),
        };
        format!("rank {}/{} ({local}{})", self.rank, of(self.size), self.launcher)
    }
}

/// What [`detect`] found: the ranks, if a launcher started this process,
/// and one line per value it could not use.
#[derive(Clone, Debug, Default)]
pub struct Launch {
    /// The process's place in its job.
    pub ranks: Option<Ranks>,
    /// Values not understood, each ending in what was done instead.
    pub warnings: Vec<String>,
}

/// Reads the launcher's variables from the process's environment.
pub fn from_env() -> Launch {
    detect(&|v| tiermem_sys::env::var(v))
}

/// Reads the launcher's variables through `lookup` (the environment, or a
/// test's table). See the module's table for the order.
pub fn detect(lookup: &dyn Fn(&str) -> Option<String>) -> Launch {
    let get = |v: &str| lookup(v).map(|s| s.trim().to_owned()).filter(|s| !s.is_empty());
    let warned = std::cell::RefCell::new(Vec::new());
    // A count or index variable: None when unset, and when not a number
    // (a warning).
    let num = |v: &str| -> Option<u64> {
        let s = get(v)?;
        match s.parse::<u64>() {
            Ok(n) => Some(n),
            Err(_) => {
                warned.borrow_mut().push(format!("{v}={s:?}: not a number"));
                None
            }
        }
    };
    let slurm_step = get("SLURM_STEP_ID").or_else(|| get("SLURM_STEPID"));
    let found = if get("OMPI_COMM_WORLD_RANK").is_some() {
        Some((
            "Open MPI",
            num("OMPI_COMM_WORLD_RANK"),
            num("OMPI_COMM_WORLD_SIZE"),
            num("OMPI_COMM_WORLD_LOCAL_RANK"),
            num("OMPI_COMM_WORLD_LOCAL_SIZE"),
        ))
    } else if get("MPI_LOCALNRANKS").is_some() {
        Some((
            "MPICH/Hydra",
            num("PMI_RANK"),
            num("PMI_SIZE"),
            num("MPI_LOCALRANKID"),
            num("MPI_LOCALNRANKS"),
        ))
    } else if get("SLURM_LOCALID").is_some() && slurm_step.is_some() {
        let size = num("SLURM_STEP_NUM_TASKS").or_else(|| num("SLURM_NTASKS"));
        let local_size = slurm_local_size(&get, &mut warned.borrow_mut());
        Some((
            "Slurm",
            num("SLURM_PROCID"),
            size,
            num("SLURM_LOCALID"),
            local_size,
        ))
    } else if get("PMIX_RANK").is_some() {
        Some((
            "PMIx",
            num("PMIX_RANK"),
            num("PMIX_SIZE"),
            num("PMIX_LOCAL_RANK"),
            num("PMIX_LOCAL_SIZE"),
        ))
    } else if get("PMI_RANK").is_some() {
        Some(("PMI", num("PMI_RANK"), num("PMI_SIZE"), None, None))
    } else {
        None
    };
    let mut warnings = warned.into_inner();
    let Some((launcher, rank, size, local_rank, local_size)) = found else {
        return Launch {
            ranks: None,
            warnings,
        };
    };
    let mut ranks = match rank {
        Some(rank) => Ranks {
            launcher,
            rank,
            size,
            local_rank,
            local_size,
        },
        None => {
            warnings.push(format!(
                "{launcher} started this process but its rank is not known: its files are not named per rank and \
                 its budgets are per process"
            ));
            return Launch {
                ranks: None,
                warnings,
            };
        }
    };
    if ranks.size.is_some_and(|s| ranks.rank >= s) {
        warnings.push(format!(
            "{launcher}: rank {} of a job of {} ranks: the job size is ignored",
            ranks.rank,
            ranks.size.unwrap_or(0)
        ));
        ranks.size = None;
    }
    let local_ok = match (ranks.local_rank, ranks.local_size) {
        (_, Some(0)) => false,
        (r, Some(s)) => r.is_none_or(|r| r < s) && ranks.size.is_none_or(|n| s <= n),
        _ => true,
    };
    if !local_ok {
        warnings.push(format!(
            "{launcher}: local rank {:?} of {:?} local ranks does not make sense",
            ranks.local_rank, ranks.local_size
        ));
        ranks.local_rank = None;
        ranks.local_size = None;
    }
    if ranks.local_size.is_none() {
        warnings.push(format!(
            "{launcher} gives no count of this node's ranks: shares of physical memory are per process \
             (give each rank an absolute --near)"
        ));
    }
    Launch {
        ranks: Some(ranks),
        warnings,
    }
}

/// Slurm's count of the step's tasks on this node.
fn slurm_local_size(get: &dyn Fn(&str) -> Option<String>, warnings: &mut Vec<String>) -> Option<u64> {
    for var in ["SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE"] {
        let Some(list) = get(var) else { continue };
        let node = get("SLURM_NODEID").and_then(|n| n.parse::<usize>().ok());
        let Some(node) = node else {
            warnings.push(format!("{var} is set but SLURM_NODEID is not a node index"));
            return None;
        };
        match slurm_tasks_on_node(&list, node) {
            Ok(n) => return Some(n),
            Err(e) => {
                warnings.push(format!("{var}={list:?}: {e}"));
                return None;
            }
        }
    }
    let v = get("SLURM_NTASKS_PER_NODE")?;
    match v.parse::<u64>() {
        Ok(n) => Some(n),
        Err(_) => {
            warnings.push(format!("SLURM_NTASKS_PER_NODE={v:?}: not a number"));
            None
        }
    }
}

/// The tasks on node `node` (0-based) of a Slurm task list in its
/// compressed form: `2(x3),1` is 2 tasks on each of nodes 0-2 and 1 on
/// node 3.
///
/// ```
/// use tiermem::launcher::slurm_tasks_on_node;
/// assert_eq!(slurm_tasks_on_node("2(x3),1", 2), Ok(2));
/// assert_eq!(slurm_tasks_on_node("2(x3),1", 3), Ok(1));
/// assert!(slurm_tasks_on_node("2(x3),1", 4).is_err());
/// ```
pub fn slurm_tasks_on_node(list: &str, node: usize) -> Result<u64, String> {
    let mut first = 0usize;
    for item in list.split(',').map(str::trim) {
        let (tasks, repeat) = match item.split_once('(') {
            None => (item, 1usize),
            Some((t, rest)) => {
                let n = rest
                    .strip_prefix('x')
                    .and_then(|r| r.strip_suffix(')'))
                    .and_then(|r| r.parse::<usize>().ok())
                    .filter(|&n| n > 0)
                    .ok_or_else(|| format!("{item:?} is not COUNT or COUNT(xNODES)"))?;
                (t, n)
            }
        };
        let tasks = tasks
            .parse::<u64>()
            .map_err(|_| format!("{item:?} is not COUNT or COUNT(xNODES)"))?;
        if node < first + repeat {
            return Ok(tasks);
        }
        first += repeat;
    }
    Err(format!("no node {node} in a list of {first} nodes"))
}

/// A process's share of its node: the node's physical memory and the
/// job's ranks on it.
#[derive(Clone, Debug)]
pub struct NodeShare {
    /// The node's physical memory.
    pub mem_total: u64,
    /// The ranks that share it (1 outside a launcher).
    pub local_ranks: u64,
}

impl NodeShare {
    /// This process's share of a node of `mem_total` bytes, by `ranks`.
    pub fn new(mem_total: u64, ranks: Option<&Ranks>) -> NodeShare {
        NodeShare {
            mem_total,
            local_ranks: ranks.map_or(1, Ranks::local_ranks),
        }
    }

    fn per_rank(&self) -> String {
        match self.local_ranks {
            1 => String::new(),
            n => format!(" / {n} local ranks"),
        }
    }

    /// A near budget as `--near` and `TIERMEM_NEAR` take it: a share of
    /// physical memory (`50%`) is of the node, divided among its local
    /// ranks; a size (`4G`) and a share of the footprint (`50%fp`) are
    /// this process's.
    ///
    /// ```
    /// use tiermem::launcher::NodeShare;
    /// let node = NodeShare { mem_total: 8 << 30, local_ranks: 2 };
    /// let n = node.near("50%", None).unwrap();
    /// assert_eq!(n.bytes, 2 << 30);
    /// assert_eq!(n.share.as_deref(), Some("50% of 8G physical memory / 2 local ranks"));
    /// assert_eq!(node.near("4G", None).unwrap().bytes, 4 << 30);
    /// ```
    pub fn near(&self, v: &str, report: Option<&Path>) -> Result<NearSpec, String> {
        let mut n = parse_near(v, self.mem_total, report)?;
        if v.trim().ends_with('%') && !v.trim().ends_with("%fp") {
            n.bytes /= self.local_ranks;
            n.share = n.share.map(|s| s + &self.per_rank());
        }
        Ok(n)
    }

    /// A node's near budget (`--near-node 64G`, `TIERMEM_NEAR_NODE`; a
    /// size or a share of physical memory) divided among its local ranks.
    ///
    /// ```
    /// use tiermem::launcher::NodeShare;
    /// let node = NodeShare { mem_total: 8 << 30, local_ranks: 4 };
    /// assert_eq!(node.near_node("4G").unwrap().bytes, 1 << 30);
    /// ```
    pub fn near_node(&self, v: &str) -> Result<NearSpec, String> {
        let v = v.trim();
        if v.ends_with("%fp") {
            return Err("a share of the footprint is per process: give it with --near".into());
        }
        let node = parse_share(v, self.mem_total)?;
        let of = if v.ends_with('%') {
            format!("{v} of {} physical memory", format_size(self.mem_total))
        } else {
            format!("{} for the node", format_size(node))
        };
        Ok(NearSpec {
            bytes: node / self.local_ranks,
            share: Some(of + &self.per_rank()),
            footprint: None,
        })
    }

    /// The heap's default address range (`TIERMEM_FAR` unset): twice the
    /// node's physical memory divided among its local ranks, in whole GiB
    /// (the ranks' reservations together stay what one process's would
    /// be).
    pub fn default_heap_bytes(&self) -> u64 {
        (default_far_bytes(self.mem_total) / self.local_ranks)
            .max(1 << 30)
            .next_multiple_of(1 << 30)
    }
}

/// The name under which one rank writes a file that every rank of the
/// job is given (a report, a far file): `%r` is the rank, `%l` the local
/// rank, `%%` a percent sign (other `%` stay as they are). Several ranks
/// and no `%r` in the name: `.rank<N>` goes before the extension, so
/// that they do not overwrite each other's files, and the second value is
/// true.
///
/// ```
/// use std::path::Path;
/// use tiermem::launcher::{per_rank_path, Ranks};
/// let r = Ranks { launcher: "Open MPI", rank: 3, size: Some(4), local_rank: Some(1), local_size: Some(2) };
/// assert_eq!(per_rank_path(Path::new("out-%r.json"), Some(&r)).0, Path::new("out-3.json"));
/// assert_eq!(per_rank_path(Path::new("d/out.json"), Some(&r)), (Path::new("d/out.rank3.json").into(), true));
/// assert_eq!(per_rank_path(Path::new("out.json"), None).0, Path::new("out.json"));
/// ```
pub fn per_rank_path(p: &Path, ranks: Option<&Ranks>) -> (PathBuf, bool) {
    let Some(s) = p.to_str() else {
        return (p.to_owned(), false);
    };
    let rank = ranks.map_or(0, |r| r.rank);
    let local = ranks.and_then(|r| r.local_rank).unwrap_or(rank);
    let mut out = String::with_capacity(s.len());
    let mut has_rank = false;
    let mut chars = s.chars().peekable();
    while let Some(c) = chars.next() {
        match (c, chars.peek()) {
            ('%', Some('r')) => {
                out += &rank.to_string();
                has_rank = true;
                chars.next();
            }
            ('%', Some('l')) => {
                out += &local.to_string();
                chars.next();
            }
            ('%', Some('%')) => {
                out.push('%');
                chars.next();
            }
            _ => out.push(c),
        }
    }
    let mut path = PathBuf::from(out);
    let insert = !has_rank && ranks.is_some_and(Ranks::several);
    if insert {
        let tag = format!("rank{rank}");
        let name = match (path.file_stem(), path.extension()) {
            (Some(stem), Some(ext)) => {
                format!("{}.{tag}.{}", stem.to_string_lossy(), ext.to_string_lossy())
            }
            _ => format!(
                "{}.{tag}",
                path.file_name().map(|n| n.to_string_lossy()).unwrap_or_default()
            ),
        };
        path.set_file_name(name);
    }
    (path, insert)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn launch(vars: &[(&str, &str)]) -> Launch {
        let m: HashMap<String, String> = vars.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        detect(&|v| m.get(v).cloned())
    }

    fn ranks(vars: &[(&str, &str)]) -> Ranks {
        let l = launch(vars);
        assert!(l.warnings.is_empty(), "{:?}", l.warnings);
        l.ranks.expect("a launcher")
    }

    #[test]
    fn no_launcher_is_a_process_of_its_own() {
        let l = launch(&[("HOME", "/root")]);
        assert_eq!(l.ranks, None);
        assert!(l.warnings.is_empty());
        assert_eq!(NodeShare::new(8 << 30, None).local_ranks, 1);
    }

    #[test]
    fn open_mpi() {
        // What Open MPI 4.1.4's mpirun -np 2 exports (PMIX_RANK too).
        let r = ranks(&[
            ("OMPI_COMM_WORLD_RANK", "1"),
            ("OMPI_COMM_WORLD_SIZE", "2"),
            ("OMPI_COMM_WORLD_LOCAL_RANK", "1"),
            ("OMPI_COMM_WORLD_LOCAL_SIZE", "2"),
            ("PMIX_RANK", "1"),
        ]);
        assert_eq!(
            r,
            Ranks {
                launcher: "Open MPI",
                rank: 1,
                size: Some(2),
                local_rank: Some(1),
                local_size: Some(2)
            }
        );
        assert_eq!(r.describe(), "rank 1/2 (local 1/2, Open MPI)");
    }

    #[test]
    fn mpich_hydra() {
        let r = ranks(&[
            ("PMI_RANK", "5"),
            ("PMI_SIZE", "8"),
            ("MPI_LOCALRANKID", "1"),
            ("MPI_LOCALNRANKS", "4"),
        ]);
        assert_eq!((r.launcher, r.rank, r.size), ("MPICH/Hydra", 5, Some(8)));
        assert_eq!((r.local_rank, r.local_size), (Some(1), Some(4)));
    }

    #[test]
    fn slurm_step_with_a_compressed_task_list() {
        let r = ranks(&[
            ("SLURM_STEP_ID", "0"),
            ("SLURM_PROCID", "7"),
            ("SLURM_STEP_NUM_TASKS", "8"),
            ("SLURM_LOCALID", "0"),
            ("SLURM_NODEID", "3"),
            ("SLURM_STEP_TASKS_PER_NODE", "2(x3),1"),
            ("SLURM_TASKS_PER_NODE", "4(x2)"),
        ]);
        assert_eq!((r.launcher, r.rank, r.size), ("Slurm", 7, Some(8)));
        assert_eq!((r.local_rank, r.local_size), (Some(0), Some(1)));
        // The allocation's list when the step's is not there; then
        // --ntasks-per-node.
        let r = ranks(&[
            ("SLURM_STEPID", "1"),
            ("SLURM_PROCID", "2"),
            ("SLURM_NTASKS", "8"),
            ("SLURM_LOCALID", "2"),
            ("SLURM_NODEID", "1"),
            ("SLURM_TASKS_PER_NODE", "4(x2)"),
        ]);
        assert_eq!(r.local_size, Some(4));
        let r = ranks(&[
            ("SLURM_STEP_ID", "0"),
            ("SLURM_PROCID", "2"),
            ("SLURM_LOCALID", "2"),
            ("SLURM_NTASKS_PER_NODE", "3"),
        ]);
        assert_eq!(r.local_size, Some(3));
        // A batch script's own processes (no srun: no step) are no ranks.
        assert_eq!(
            launch(&[
                ("SLURM_LOCALID", "0"),
                ("SLURM_PROCID", "0"),
                ("SLURM_TASKS_PER_NODE", "4")
            ])
            .ranks,
            None
        );
    }

    #[test]
    fn slurm_task_lists() {
        assert_eq!(slurm_tasks_on_node("4", 0), Ok(4));
        assert_eq!(slurm_tasks_on_node("2(x3),1", 0), Ok(2));
        assert_eq!(slurm_tasks_on_node("2(x3),1", 3), Ok(1));
        assert_eq!(slurm_tasks_on_node("1,2(x2),3", 2), Ok(2));
        assert_eq!(slurm_tasks_on_node("1,2(x2),3", 3), Ok(3));
        for bad in ["", "x", "2(3)", "2(x0)", "2(x3", "-1", "2(x3),a"] {
            assert!(slurm_tasks_on_node(bad, 0).is_err() || bad == "2(x3),a", "{bad}");
        }
        assert!(slurm_tasks_on_node("2(x3),a", 3).is_err());
        assert!(slurm_tasks_on_node("4", 1).is_err());
    }

    #[test]
    fn pmix_and_pmi_name_the_rank_but_keep_budgets_per_process() {
        let l = launch(&[("PMIX_RANK", "3"), ("PMIX_NAMESPACE", "x")]);
        let r = l.ranks.unwrap();
        assert_eq!((r.launcher, r.rank, r.local_size), ("PMIx", 3, None));
        assert_eq!(r.local_ranks(), 1);
        assert!(
            l.warnings[0].contains("no count of this node's ranks"),
            "{:?}",
            l.warnings
        );
        let r = launch(&[
            ("PMIX_RANK", "1"),
            ("PMIX_LOCAL_RANK", "1"),
            ("PMIX_LOCAL_SIZE", "2"),
        ])
        .ranks
        .unwrap();
        assert_eq!(r.local_ranks(), 2);
        let r = launch(&[("PMI_RANK", "1"), ("PMI_SIZE", "2")]).ranks.unwrap();
        assert_eq!((r.launcher, r.size, r.local_ranks()), ("PMI", Some(2), 1));
    }

    #[test]
    fn garbage_is_a_warning_and_per_process() {
        let cases: [&[(&str, &str)]; 6] = [
            &[
                ("OMPI_COMM_WORLD_RANK", "1"),
                ("OMPI_COMM_WORLD_LOCAL_SIZE", "two"),
            ],
            &[
                ("OMPI_COMM_WORLD_RANK", "1"),
                ("OMPI_COMM_WORLD_LOCAL_RANK", "2"),
                ("OMPI_COMM_WORLD_LOCAL_SIZE", "2"),
            ],
            &[("OMPI_COMM_WORLD_RANK", "1"), ("OMPI_COMM_WORLD_LOCAL_SIZE", "0")],
            &[
                ("OMPI_COMM_WORLD_RANK", "0"),
                ("OMPI_COMM_WORLD_SIZE", "2"),
                ("OMPI_COMM_WORLD_LOCAL_SIZE", "4"),
            ],
            &[("MPI_LOCALNRANKS", "-2"), ("PMI_RANK", "0")],
            &[
                ("SLURM_STEP_ID", "0"),
                ("SLURM_PROCID", "0"),
                ("SLURM_LOCALID", "0"),
                ("SLURM_NODEID", "0"),
                ("SLURM_STEP_TASKS_PER_NODE", "2(y3)"),
            ],
        ];
        for vars in cases {
            let l = launch(vars);
            assert!(!l.warnings.is_empty(), "{vars:?}");
            let r = l.ranks.expect("the rank is still known");
            assert_eq!(r.local_ranks(), 1, "{vars:?}");
            assert_eq!(
                NodeShare::new(8 << 30, Some(&r)).near("50%", None).unwrap().bytes,
                4 << 30
            );
        }
        // No usable rank: nothing at all.
        let l = launch(&[
            ("OMPI_COMM_WORLD_RANK", "one"),
            ("OMPI_COMM_WORLD_LOCAL_SIZE", "2"),
        ]);
        assert_eq!(l.ranks, None);
        assert!(l.warnings.iter().any(|w| w.contains("OMPI_COMM_WORLD_RANK")));
        // A rank past the job's size: the size is dropped.
        let l = launch(&[("OMPI_COMM_WORLD_RANK", "4"), ("OMPI_COMM_WORLD_SIZE", "2")]);
        assert_eq!(l.ranks.unwrap().size, None);
    }

    #[test]
    fn shares_of_the_node() {
        let r = ranks(&[
            ("OMPI_COMM_WORLD_RANK", "0"),
            ("OMPI_COMM_WORLD_SIZE", "4"),
            ("OMPI_COMM_WORLD_LOCAL_RANK", "0"),
            ("OMPI_COMM_WORLD_LOCAL_SIZE", "4"),
        ]);
        let node = NodeShare::new(16 << 30, Some(&r));
        assert_eq!(node.near("50%", None).unwrap().bytes, 2 << 30);
        assert_eq!(node.near("2G", None).unwrap().bytes, 2 << 30);
        assert_eq!(node.near("2G", None).unwrap().share, None);
        let n = node.near_node("8G").unwrap();
        assert_eq!(n.bytes, 2 << 30);
        assert_eq!(n.share.as_deref(), Some("8G for the node / 4 local ranks"));
        assert_eq!(node.near_node("25%").unwrap().bytes, 1 << 30);
        assert!(node.near_node("50%fp").is_err());
        assert!(node.near_node("lots").is_err());
        // Twice 16G over 4 ranks.
        assert_eq!(node.default_heap_bytes(), 8 << 30);
        assert_eq!(NodeShare::new(16 << 30, None).default_heap_bytes(), 32 << 30);
        // Never below 1 GiB, whole GiB.
        assert_eq!(
            NodeShare {
                mem_total: 1 << 30,
                local_ranks: 64
            }
            .default_heap_bytes(),
            1 << 30
        );
        assert_eq!(
            NodeShare {
                mem_total: 3 << 30,
                local_ranks: 4
            }
            .default_heap_bytes(),
            2 << 30
        );
    }

    #[test]
    fn per_rank_names() {
        let r = Ranks {
            launcher: "Slurm",
            rank: 12,
            size: Some(16),
            local_rank: Some(2),
            local_size: Some(4),
        };
        let p = |s: &str, r: Option<&Ranks>| per_rank_path(Path::new(s), r);
        assert_eq!(p("r-%r.json", Some(&r)), (PathBuf::from("r-12.json"), false));
        assert_eq!(
            p("n%l/r-%r-100%%.json", Some(&r)).0,
            PathBuf::from("n2/r-12-100%.json")
        );
        assert_eq!(p("/tmp/far", Some(&r)), (PathBuf::from("/tmp/far.rank12"), true));
        assert_eq!(p("r-%l.json", Some(&r)).0, PathBuf::from("r-2.rank12.json"));
        assert_eq!(p("a.tar.gz", Some(&r)).0, PathBuf::from("a.tar.rank12.gz"));
        assert_eq!(p("50%x.json", Some(&r)).0, PathBuf::from("50%x.rank12.json"));
        // One rank, or none: only the substitutions.
        let one = Ranks {
            size: Some(1),
            local_size: Some(1),
            rank: 0,
            local_rank: Some(0),
            ..r
        };
        assert_eq!(p("r.json", Some(&one)), (PathBuf::from("r.json"), false));
        assert_eq!(p("r-%r.json", None).0, PathBuf::from("r-0.json"));
    }
}
