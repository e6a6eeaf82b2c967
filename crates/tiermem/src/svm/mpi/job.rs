//! The MPI job: joining it (node split, files, windows, progress thread),
//! collectives, runs and the collective allocator.

use super::*;

/// A collective allocation (the same table in every rank).
#[derive(Clone, Copy, Debug)]
pub(super) struct Block {
    first: usize,
    pages: usize,
}

/// What an MPI job adds to an [`crate::svm::Svm`]: the communicator, the
/// transport, and what the forked team keeps in shared memory but an MPI
/// job keeps per rank (scratch words, the allocation table, statistics
/// gathered after a run).
pub(crate) struct Job {
    pub(crate) link: Arc<MpiLink>,
    world: Comm,
    scratch: Vec<AtomicU64>,
    stats: Mutex<Vec<SvmStats>>,
    blocks: Mutex<Vec<Block>>,
    /// Double-buffered slots of [`Job::allreduce_sum`]'s generation.
    runs: AtomicU64,
    /// Heap candidates rank 0 refused (kept mapped so they are not
    /// proposed again).
    _refused: Vec<Mapping>,
}

/// The pieces [`crate::svm::Svm::new`] assembles in an MPI job.
pub(crate) struct Joined {
    pub(crate) job: Job,
    pub(crate) heap: Mapping,
    pub(crate) heap_user: UserAccess,
}

pub(super) fn wait(p: &mut Pending, what: &str) -> Result<Vec<u64>, Error> {
    let start = Instant::now();
    let mut backoff = Backoff::new(Duration::from_micros(20));
    loop {
        if let Some(v) = p.test()? {
            return Ok(v);
        }
        backoff.snooze();
        if start.elapsed() > Duration::from_secs(600) {
            return Err(Error::Team(format!("{what}: a rank did not join within 600 s")));
        }
    }
}

impl Job {
    /// Joins the MPI job (collective over `MPI_COMM_WORLD`): node files,
    /// heap at one address in every rank, windows and progress thread if
    /// the job spans nodes.
    pub(crate) fn join(config: &SvmConfig, npages: usize) -> Result<Joined, Error> {
        let m = tiermem_sys::mpi::init()?;
        let world = Comm::world(&m)?;
        let (rank, size) = (world.rank(), world.size());
        if config.procs != 0 && config.procs != size {
            return Err(Error::Usage(format!(
                "an SVM of {} processes inside an MPI job of {size} ranks: pass 0 or {size} (every rank is one SVM process)",
                config.procs
            )));
        }
        if size >= meta::MAX_PROCS {
            return Err(Error::Usage(format!(
                "an MPI job of {size} ranks: the SVM supports at most {}",
                meta::MAX_PROCS - 1
            )));
        }
        let ps = tiermem_sys::mm::base_page_size();
        let mut node_comm = world.split_shared()?;
        let per_node = env_usize("TIERMEM_SVM_RANKS_PER_NODE", usize::MAX);
        if per_node < node_comm.size() {
            node_comm = node_comm.split(node_comm.rank() / per_node, node_comm.rank())?;
        }
        // Node index: the leaders' world ranks, in order.
        let mut lead = [if node_comm.rank() == 0 { rank as u64 } else { 0 }];
        node_comm.bcast(0, &mut lead)?;
        let mut leaders_by_rank = vec![0u64; size];
        world.allgather(&lead, &mut leaders_by_rank)?;
        let mut leaders = leaders_by_rank.clone();
        leaders.sort_unstable();
        leaders.dedup();
        let node_of: Vec<u16> = leaders_by_rank
            .iter()
            .map(|l| leaders.binary_search(l).unwrap_or(0) as u16)
            .collect();
        let nodes = leaders.len();
        if nodes > 1 && config.flavour == SpmFlavour::Noncoherent {
            return Err(Error::Usage(
                "the noncoherent SPM flavour models non-coherent memory inside a node; an MPI job on several nodes runs coherent SPM"
                    .into(),
            ));
        }
        // The node's files: made by its leader, opened by the others.
        let made = if node_comm.rank() == 0 {
            Some(LocalShm::create(npages, size))
        } else {
            None
        };
        let mut ids = [0u64; 4];
        if let Some(r) = &made {
            match r {
                Ok(t) => {
                    let (h, mf) = t.raw_fds();
                    ids = [1, tiermem_sys::thread::getpid() as u64, h as u64, mf as u64];
                }
                Err(_) => ids[0] = 0,
            }
        }
        node_comm.bcast(0, &mut ids)?;
        if ids[0] == 0 {
            return Err(made
                .and_then(|r| r.err())
                .unwrap_or_else(|| Error::Team("the node leader could not create the SVM files".into())));
        }
        let node = match made {
            Some(r) => r?,
            None => LocalShm::open_peer(ids[1] as u32, ids[2] as i32, ids[3] as i32, npages)?,
        };
        // The heap at one address everywhere: rank 0 proposes, the others
        // map there or refuse, until all agree.
        let len = npages * ps;
        let mut refused = Vec::new();
        let mut heap = None;
        for _ in 0..16 {
            let mut addr = [0u64];
            let mine = if rank == 0 {
                let (mp, u) = Mapping::shared(node.home_fd(), 0, len, ps, &MapOptions::default())?;
                addr[0] = mp.addr() as u64;
                Some((mp, u))
            } else {
                None
            };
            world.bcast(0, &mut addr)?;
            let mine = match mine {
                Some(x) => Some(x),
                None => Mapping::shared_at(node.home_fd(), 0, len, ps, addr[0] as usize).ok(),
            };
            let ok = wait(
                &mut world.iallreduce(ReduceOp::Min, vec![mine.is_some() as u64])?,
                "agreeing on the heap address",
            )?;
            if ok[0] == 1 {
                heap = mine;
                break;
            }
            if let Some((mp, _)) = mine {
                if rank == 0 {
                    refused.push(mp);
                }
            }
        }
        let Some((heap, heap_user)) = heap else {
            return Err(Error::Team(format!(
                "no address range of {len} bytes was free in every rank after 16 tries"
            )));
        };
        let remote = if nodes > 1 {
            let (data_view, _) = Mapping::shared(node.home_fd(), 0, len, ps, &MapOptions::default())?;
            let data_view = Arc::new(data_view);
            let (meta_view, _) =
                Mapping::shared(node.meta_fd(), 0, node.meta_map.len(), ps, &MapOptions::default())?;
            let opts = MapOptions {
                noreserve: true,
                ..MapOptions::default()
            };
            let (inbox_map, inbox_user) = Mapping::anonymous((size * SLOT_STRIDE).div_ceil(ps) * ps, &opts)?;
            let inbox_map = Arc::new(inbox_map);
            let data = Window::create(&world, data_view.clone())?;
            let meta = Window::create(&world, Arc::new(meta_view))?;
            let inbox = Window::create(&world, inbox_map.clone())?;
            let us = env_usize("TIERMEM_SVM_PROGRESS_US", 50);
            let hook = inbox_hook(inbox_map, inbox_user, data_view, size, ps);
            let progress = Progress::start(&world, Duration::from_micros(us as u64), hook)?;
            Some(Remote {
                _progress: progress,
                data,
                meta,
                inbox,
            })
        } else {
            None
        };
        let link = MpiLink {
            remote,
            node,
            rank,
            my_node: node_of[rank],
            node_of,
            homes: (0..npages).map(|_| AtomicU16::new(0)).collect(),
            in_mask: (0..npages).map(|_| AtomicBool::new(false)).collect(),
            heads: (0..MAX_LOCKS).map(|_| AtomicU64::new(0)).collect(),
            posted: (0..size).map(|_| AtomicU64::new(0)).collect(),
            held: (0..MAX_LOCKS).map(|_| AtomicBool::new(false)).collect(),
            changed: Mutex::new(Vec::new()),
            timeout: Duration::from_secs(env_usize("TIERMEM_SVM_TIMEOUT_S", 600) as u64),
        };
        link.set_homes(0, npages, Distribution::Block);
        world.barrier()?;
        Ok(Joined {
            job: Job {
                link: Arc::new(link),
                world,
                scratch: (0..SCRATCH_WORDS).map(|_| AtomicU64::new(0)).collect(),
                stats: Mutex::new(Vec::new()),
                blocks: Mutex::new(Vec::new()),
                runs: AtomicU64::new(0),
                _refused: refused,
            },
            heap,
            heap_user,
        })
    }

    /// This rank.
    pub(crate) fn rank(&self) -> usize {
        self.link.rank
    }

    /// Ranks in the job.
    pub(crate) fn procs(&self) -> usize {
        self.world.size()
    }

    /// Nodes the job spans.
    pub(crate) fn nodes(&self) -> usize {
        self.link.nodes()
    }

    /// The scratch words (this rank's during a run; after it, the sum over
    /// ranks).
    pub(crate) fn scratch(&self) -> &[AtomicU64] {
        &self.scratch
    }

    /// Statistics per rank, gathered at the end of the last run.
    pub(crate) fn stats(&self) -> Vec<SvmStats> {
        self.stats.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Waits until every rank arrived; an error if a rank failed or died.
    pub(crate) fn barrier(&self) -> Result<(), Error> {
        let mut p = self.world.ibarrier()?;
        let mut backoff = Backoff::new(Duration::from_micros(20));
        let (start, mut last) = (Instant::now(), Instant::now());
        loop {
            if p.test()?.is_some() {
                return Ok(());
            }
            backoff.snooze();
            if last.elapsed() > Duration::from_millis(10) {
                last = Instant::now();
                self.link.check_peers(start, &|| "waiting at a barrier".into())?;
            }
        }
    }

    /// Waits for `p` while watching the other ranks.
    fn wait(&self, p: Pending, what: &str) -> Result<Vec<u64>, Error> {
        self.wait_for(p, &|| what.to_string())
    }

    /// Waits for `p` while watching the other ranks; `what` says what the
    /// rank was doing, in errors.
    fn wait_for(&self, mut p: Pending, what: &dyn Fn() -> String) -> Result<Vec<u64>, Error> {
        let mut backoff = Backoff::new(Duration::from_micros(20));
        let (start, mut last) = (Instant::now(), Instant::now());
        loop {
            if let Some(v) = p.test()? {
                return Ok(v);
            }
            backoff.snooze();
            if last.elapsed() > Duration::from_millis(10) {
                last = Instant::now();
                self.link.check_peers(start, what)?;
            }
        }
    }

    /// A barrier that carries the changes (collective): every rank's pages
    /// changed since the last barrier, with their newest versions, sorted
    /// by page.
    pub(crate) fn barrier_exchange(&self) -> Result<Vec<(usize, u64)>, Error> {
        let mine = self.link.take_changes();
        let counts = self.wait(
            self.world.iallgather(vec![mine.len() as u64])?,
            "waiting at a barrier",
        )?;
        let max = counts.iter().copied().max().unwrap_or(0) as usize;
        if max == 0 {
            return Ok(Vec::new());
        }
        let mut send = vec![u64::MAX; 2 * max];
        for (i, &(p, v)) in mine.iter().enumerate() {
            send[2 * i] = p;
            send[2 * i + 1] = v;
        }
        let all = self.wait(
            self.world.iallgather(send)?,
            "exchanging write notices at a barrier",
        )?;
        let mut ch: Vec<(u64, u64)> = all
            .chunks(2)
            .filter(|c| c[0] != u64::MAX)
            .map(|c| (c[0], c[1]))
            .collect();
        dedup_changes(&mut ch);
        Ok(ch.into_iter().map(|(p, v)| (p as usize, v)).collect())
    }

    /// Sum of `v` over ranks (collective; `what` names the call in errors).
    pub(crate) fn allreduce(&self, op: ReduceOp, v: Vec<u64>, what: &str) -> Result<Vec<u64>, Error> {
        self.wait_for(self.world.iallreduce(op, v)?, &|| format!("in collective {what}"))
    }

    /// Starts a run: this rank's statistics zeroed, scratch words of ranks
    /// other than 0 zeroed (so the sum after the run counts rank 0's
    /// leftovers once), every rank here.
    pub(crate) fn begin_run(&self) -> Result<(), Error> {
        let m = self.link.node.meta();
        for s in 0..meta::NSTAT {
            m.stat(self.rank(), s).store(0, Ordering::Relaxed);
        }
        // Relaxed: the barrier below orders the rest.
        m.pid(self.rank())
            .store(tiermem_sys::thread::getpid() as u64, Ordering::Relaxed);
        if self.rank() != 0 {
            for w in &self.scratch {
                w.store(0, Ordering::Relaxed);
            }
        }
        self.runs.fetch_add(1, Ordering::Relaxed);
        self.barrier()
    }

    /// Ends a run that succeeded here: waits for every rank, gathers the
    /// statistics and sums the scratch words.
    pub(crate) fn end_run(&self) -> Result<(), Error> {
        self.barrier()?;
        let m = self.link.node.meta();
        let mine: Vec<u64> = (0..meta::NSTAT)
            .map(|s| m.stat(self.rank(), s).load(Ordering::Relaxed))
            .collect();
        let mut all = vec![0u64; meta::NSTAT * self.procs()];
        self.world.allgather(&mine, &mut all)?;
        *self.stats.lock().unwrap_or_else(|p| p.into_inner()) =
            all.chunks(meta::NSTAT).map(SvmStats::from_words).collect();
        let words: Vec<u64> = self.scratch.iter().map(|w| w.load(Ordering::Relaxed)).collect();
        let sum = self.allreduce(ReduceOp::Sum, words, "summing the scratch words")?;
        for (w, v) in self.scratch.iter().zip(sum) {
            w.store(v, Ordering::Relaxed);
        }
        Ok(())
    }

    /// Collective allocation of `pages` pages: every rank checks that the
    /// others ask for the same (call `call`), then takes the same first-fit
    /// range from its copy of the table and sets the pages' homes.
    pub(crate) fn malloc(
        &self,
        pages: usize,
        call: u64,
        npages: usize,
        d: Distribution,
    ) -> Result<usize, Error> {
        let key = (pages as u64) << 20 | (d == Distribution::Cyclic) as u64;
        let v = self.allreduce(
            ReduceOp::Min,
            vec![key, call, u64::MAX - key, u64::MAX - call],
            "tm_svm_malloc",
        )?;
        if v[0] != u64::MAX - v[2] || v[1] != u64::MAX - v[3] {
            return Err(Error::Usage(format!(
                "tm_svm_malloc call {call} asks for {pages} pages here, and another rank asks for a different size or distribution, or is at another call: calls must match"
            )));
        }
        let mut blocks = self.blocks.lock().unwrap_or_else(|p| p.into_inner());
        if blocks.len() >= crate::svm::MAX_BLOCKS {
            return Err(Error::GlobalHeapFull(format!(
                "more than {} SVM allocations",
                crate::svm::MAX_BLOCKS
            )));
        }
        blocks.sort_unstable_by_key(|b| b.first);
        let mut at = 0;
        for b in blocks.iter() {
            if b.first >= at + pages {
                break;
            }
            at = at.max(b.first + b.pages);
        }
        if at + pages > npages {
            return Err(Error::GlobalHeapFull(format!(
                "the SVM heap of {npages} pages has no free run of {pages} pages"
            )));
        }
        blocks.push(Block { first: at, pages });
        self.link.set_homes(at, pages, d);
        Ok(at)
    }

    /// Collective free of the block at page `first`: its page count, after
    /// every rank agreed on the block.
    pub(crate) fn free(&self, first: usize, ptr: usize) -> Result<usize, Error> {
        let found = {
            let blocks = self.blocks.lock().unwrap_or_else(|p| p.into_inner());
            blocks.iter().find(|b| b.first == first).map(|b| b.pages)
        };
        let key = found.map_or(u64::MAX, |_| first as u64);
        let v = self.allreduce(ReduceOp::Min, vec![key, u64::MAX - key], "tm_svm_free")?;
        let Some(pages) = found else {
            return Err(Error::Usage(format!(
                "tm_svm_free({ptr:#x}): not an SVM allocation"
            )));
        };
        if v[0] != u64::MAX - v[1] {
            return Err(Error::Usage(format!(
                "tm_svm_free({ptr:#x}): another rank frees a different block: calls must match"
            )));
        }
        let mut blocks = self.blocks.lock().unwrap_or_else(|p| p.into_inner());
        blocks.retain(|b| b.first != first);
        Ok(pages)
    }
}
