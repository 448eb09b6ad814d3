//! A stream writer's life: created with `stream.json` and its first segment, summarised for the manifest,
//! sealed (the last segment cut to its sealed end), abandoned as a killed process would, or dropped.

use super::{StreamWriter, WriterOptions, MIN_SEGMENT_SIZE, PREPARED_SEGMENT_FILE};
use crate::capture::encode::DataEncoder;
use crate::capture::manifest::{write_json_atomic, StreamCounts, StreamInfo, StreamSummary, STREAM_FILE};
use crate::capture::policy::{Policy, PolicyState};
use crate::capture::trim_lock;
use crate::{FormatError, Result};
use std::collections::{HashMap, VecDeque};
use std::fs::OpenOptions;
use std::path::Path;

impl StreamWriter {
    /// Creates `run_dir/<info.dir_name()>/` with `stream.json` and the first segment.
    pub fn create(
        run_dir: &Path,
        info: StreamInfo,
        segment_size: u64,
        policy: Policy,
    ) -> Result<StreamWriter> {
        Self::create_with(run_dir, info, WriterOptions::new(segment_size, policy))
    }

    /// [`create`](Self::create) with all options.
    pub fn create_with(run_dir: &Path, info: StreamInfo, opts: WriterOptions) -> Result<StreamWriter> {
        if opts.segment_size < MIN_SEGMENT_SIZE || opts.segment_size & 7 != 0 {
            return Err(FormatError::whole(format!(
                "segment size {} must be a multiple of 8 and at least {MIN_SEGMENT_SIZE}",
                opts.segment_size
            )));
        }
        let dir = run_dir.join(info.dir_name());
        std::fs::create_dir_all(&dir).map_err(|e| FormatError::io(&dir, &e))?;
        // A crashed writer's half-prepared segment (best effort: preparing truncates it anyway).
        let _ = std::fs::remove_file(dir.join(PREPARED_SEGMENT_FILE));
        let mut w = StreamWriter {
            dir,
            info,
            opts,
            policy: PolicyState::new(opts.policy),
            seg: None,
            next: None,
            live: VecDeque::new(),
            next_index: 0,
            strings: HashMap::new(),
            op: None,
            op_in_segment: false,
            head: Vec::new(),
            defs: Vec::new(),
            def_frames: Vec::new(),
            encoder: DataEncoder::new(),
            compressed: Vec::new(),
            counts: StreamCounts::default(),
            sealed: false,
        };
        w.open_segment(opts.segment_size)?;
        write_json_atomic(&w.dir.join(STREAM_FILE), &w.info)?;
        Ok(w)
    }

    /// The stream's directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The policy state (trigger step, stopped).
    pub fn policy(&self) -> &PolicyState {
        &self.policy
    }

    /// What was written so far, for the manifest.
    pub fn summary(&self) -> StreamSummary {
        StreamSummary {
            info: self.info.clone(),
            dir: self.info.dir_name(),
            policy: self.opts.policy,
            counts: self.counts.clone(),
            triggered_at_step: self.policy.triggered_at(),
            sealed: self.sealed,
        }
    }

    /// Seals the last segment (publishes its end, flushes it to disk) and returns the summary.
    pub fn seal(mut self) -> Result<StreamSummary> {
        self.discard_preparation();
        let last = self.seg.as_ref().map(|s| (s.path.clone(), s.pos));
        self.seal_current(true)?;
        // The last segment was made at full size and is usually mostly empty: once sealed (and unmapped),
        // it is cut at its sealed end, so a small capture takes little disk. Readers stop at the sealed end.
        // Not while a reader maps it (trim_lock): the cut would fault its reads of the pages cut off.
        if let Some((path, end)) = last {
            let file = OpenOptions::new().write(true).open(&path).map_err(|e| FormatError::io(&path, &e))?;
            if trim_lock::may_cut(&file) {
                file.set_len(end).map_err(|e| FormatError::io(&path, &e))?;
            }
        }
        self.sealed = true;
        Ok(self.summary())
    }

    /// Drops the writer WITHOUT sealing, as a killed process would: for crash tests.
    #[doc(hidden)]
    pub fn abandon(mut self) {
        // A killed writer may leave its prepared segment behind: keep the file (readers ignore it).
        if let Some(p) = self.next.take() {
            let _ = p.thread.join();
        }
        self.seg = None;
        self.sealed = true;
    }
}

impl Drop for StreamWriter {
    fn drop(&mut self) {
        if !self.sealed {
            self.discard_preparation();
            let _ = self.seal_current(false);
        }
    }
}
