//! The model of one program image's trace: what its meta file says, and its events by thread
//! slot. Uses error, meta, chunk and event.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::chunk::Chunks;
use crate::error::Error;
use crate::event::Events;
use crate::meta::{Clock, Collector, Exe, Meta, Module, ThreadInfo};

/// One program image's trace.
pub struct Process {
    pub pid: u32,
    pub ppid: u32,
    pub image: u32,
    pub cmdline: Vec<String>,
    pub exe: Option<Exe>,
    pub clock: Clock,
    pub modules: Vec<Module>,
    /// Every `thread` line, in order.
    pub threads: Vec<ThreadInfo>,
    /// Events lost per slot (from `lost` lines).
    pub lost: BTreeMap<u32, u64>,
    /// Calls the record-time filters left out (INSTRFN_DEPTH, INSTRFN_MIN_DURATION), from
    /// `dropped` lines, all slots together.
    pub dropped: u64,
    /// Whether the process wrote its `end` line (it exited normally).
    pub ended: bool,
    /// The collector thread at the end (from the `collector` line), if it ran.
    pub collector: Option<Collector>,
    /// A ring-mode snapshot's reason (its `snapshot` line): its events begin mid-call.
    pub snapshot: Option<String>,
    /// The files read.
    pub meta_path: PathBuf,
    pub events_path: PathBuf,
    /// The staging file (format version 2; none for version 1 traces).
    pub stage_path: PathBuf,
    chunks: Chunks,
}

impl Process {
    /// Reads the meta file, then maps the events and staging files.
    pub(crate) fn open(meta_path: &Path, events_path: &Path) -> Result<Process, Error> {
        let Meta {
            pid,
            ppid,
            image,
            cmdline,
            exe,
            clock,
            modules,
            threads,
            lost,
            dropped,
            ended,
            collector,
            snapshot,
        } = Meta::read(meta_path)?;
        let stage_path = events_path.with_extension("stage");
        let chunks = Chunks::open(events_path, &stage_path)?;
        Ok(Process {
            pid,
            ppid,
            image,
            cmdline,
            exe,
            clock,
            modules,
            threads,
            lost,
            dropped,
            ended,
            collector,
            snapshot,
            meta_path: meta_path.to_path_buf(),
            events_path: events_path.to_path_buf(),
            stage_path,
            chunks,
        })
    }

    /// The thread slots that appear in the trace (with events, thread lines or losses).
    pub fn slots(&self) -> Vec<u32> {
        let mut s: Vec<u32> = self
            .chunks
            .all()
            .iter()
            .map(|c| c.slot)
            .chain(self.threads.iter().map(|t| t.slot))
            .chain(self.lost.keys().copied())
            .collect();
        s.sort_unstable();
        s.dedup();
        s
    }

    /// The thread lines of a slot.
    pub fn threads_of(&self, slot: u32) -> impl Iterator<Item = &ThreadInfo> {
        self.threads.iter().filter(move |t| t.slot == slot)
    }

    /// How many threads the `thread` lines name (distinct tids).
    pub fn thread_count(&self) -> usize {
        self.threads
            .iter()
            .map(|t| t.tid)
            .collect::<std::collections::BTreeSet<_>>()
            .len()
    }

    /// The tid that wrote a slot's events first (from its first chunk), if any.
    pub fn first_tid(&self, slot: u32) -> Option<u32> {
        self.chunks
            .all()
            .iter()
            .find(|c| c.slot == slot)
            .map(|c| c.tid)
    }

    /// The events of one slot, in the order they were written (chunk by chunk). An event
    /// whose tag word is zero ends a chunk (the rest was never written); an unknown kind is an
    /// error of the whole trace. The tids of the chunks tell which thread wrote them.
    pub fn events(&self, slot: u32) -> Events<'_> {
        Events::new(&self.chunks, slot)
    }

    /// How many events lost in total (from the meta file).
    pub fn lost_total(&self) -> u64 {
        self.lost.values().sum()
    }

    /// Bytes of the chunks that hold events (chunks prepared and never used not counted).
    pub fn event_bytes(&self) -> u64 {
        self.chunks.bytes()
    }

    /// The module holding `addr`, if one does.
    pub fn module_of(&self, addr: u64) -> Option<&Module> {
        self.modules.iter().find(|m| m.holds(addr, u64::MAX))
    }
}
