//! Moving buffers between the member processes of a communicator: files in a directory they share.
//!
//! Layout under the communicator's directory (named in the root info):
//! ```text
//! member-{rank}                  written once by HcclCommInitRootInfo: "{nRanks} {pid}"
//! c{seq}/in-{rank}               a member's contribution to collective number `seq` of the communicator
//! c{seq}/done-{rank}             the member has read everything it needed; the last one removes c{seq}/
//! p2p-{src}-{dst}/{k}            message number k from src to dst; the receiver deletes it
//! left-{rank}                    HcclCommDestroy; the last member to leave removes the directory
//! ```
//! Every file is written under a temporary name and renamed into place, so a reader sees all of it or
//! nothing. Readers poll with a growing sleep (20 µs to 1 ms) until the file appears or the deadline passes.
//! A file starts with a [`Header`] that every member of the call must agree on (op, element type, count,
//! reduce op, root), so a framework bug that mismatches calls fails loudly instead of mixing buffers.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// What kind of call a file belongs to (part of the header all members must agree on).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum CallKind {
    AllReduce = 1,
    Broadcast = 2,
    AllGather = 3,
    ReduceScatter = 4,
    Barrier = 5,
    SendRecv = 6,
}

impl CallKind {
    fn from_byte(b: u8) -> Option<CallKind> {
        Some(match b {
            1 => CallKind::AllReduce,
            2 => CallKind::Broadcast,
            3 => CallKind::AllGather,
            4 => CallKind::ReduceScatter,
            5 => CallKind::Barrier,
            6 => CallKind::SendRecv,
            _ => return None,
        })
    }
}

/// The parameters every participant of one call must have passed alike.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header {
    pub kind: CallKind,
    pub dtype: u32,
    /// Reduce op (0 when the call does not reduce).
    pub op: u32,
    /// Root rank of a broadcast (0 otherwise).
    pub root: u32,
    /// The element count the caller passed.
    pub count: u64,
}

const MAGIC: &[u8; 4] = b"SHCL";
const HEADER_LEN: usize = 32;

impl Header {
    fn encode(&self, payload: &[u8]) -> Vec<u8> {
        let mut out = Vec::with_capacity(HEADER_LEN + payload.len());
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&[self.kind as u8, 0, 0, 0]);
        out.extend_from_slice(&self.dtype.to_le_bytes());
        out.extend_from_slice(&self.op.to_le_bytes());
        out.extend_from_slice(&self.root.to_le_bytes());
        out.extend_from_slice(&[0; 4]);
        out.extend_from_slice(&self.count.to_le_bytes());
        out.extend_from_slice(payload);
        out
    }

    fn decode(bytes: &[u8]) -> Option<(Header, &[u8])> {
        if bytes.len() < HEADER_LEN || &bytes[..4] != MAGIC {
            return None;
        }
        let u32_at = |o: usize| u32::from_le_bytes(bytes[o..o + 4].try_into().expect("4 bytes"));
        let header = Header {
            kind: CallKind::from_byte(bytes[4])?,
            dtype: u32_at(8),
            op: u32_at(12),
            root: u32_at(16),
            count: u64::from_le_bytes(bytes[24..32].try_into().expect("8 bytes")),
        };
        Some((header, &bytes[HEADER_LEN..]))
    }
}

/// Why an exchange failed; the ABI maps each onto an `HcclResult`.
#[derive(Debug)]
pub enum TransportError {
    /// A member did not show up before the deadline (`HCCL_EXEC_TIMEOUT`).
    Timeout { waiting_for: String, after: Duration },
    /// The shared directory could not be read or written.
    Io { path: PathBuf, error: io::Error },
    /// A file that is not ours, or cut short.
    Corrupt { path: PathBuf },
    /// A member called with other parameters.
    Mismatch { rank: u32, ours: Header, theirs: Header },
    /// A member joined with another communicator size (`None`: unreadable).
    SizeMismatch { rank: u32, ours: u32, theirs: Option<u32> },
}

impl std::fmt::Display for TransportError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TransportError::Timeout { waiting_for, after } => {
                write!(f, "timed out after {:.1} s waiting for {waiting_for}", after.as_secs_f64())
            }
            TransportError::Io { path, error } => write!(f, "{}: {error}", path.display()),
            TransportError::Corrupt { path } => write!(f, "{}: not a sim-hccl message", path.display()),
            TransportError::Mismatch { rank, ours, theirs } => {
                write!(f, "rank {rank} called {theirs:?} where this rank called {ours:?}")
            }
            TransportError::SizeMismatch { rank, ours, theirs } => match theirs {
                Some(n) => {
                    write!(f, "rank {rank} joined a communicator of {n} ranks, this rank one of {ours}")
                }
                None => write!(f, "rank {rank}'s member file is unreadable"),
            },
        }
    }
}

type Result<T> = std::result::Result<T, TransportError>;

fn io_error(path: &Path) -> impl FnOnce(io::Error) -> TransportError + '_ {
    move |error| TransportError::Io { path: path.to_path_buf(), error }
}

/// One member's view of the communicator's directory.
pub struct Transport {
    pub dir: PathBuf,
    pub ranks: u32,
    pub rank: u32,
    pub timeout: Duration,
}

impl Transport {
    /// Writes `bytes` to `path` so that readers never see a partial file.
    fn publish(&self, path: &Path, bytes: &[u8]) -> Result<()> {
        let tmp = path.with_extension(format!("tmp{}", self.rank));
        fs::write(&tmp, bytes).map_err(io_error(&tmp))?;
        fs::rename(&tmp, path).map_err(io_error(path))
    }

    /// Reads `path` once it exists; `what` names it in a timeout.
    fn await_file(&self, path: &Path, what: impl FnOnce() -> String) -> Result<Vec<u8>> {
        let start = Instant::now();
        let mut nap = Duration::from_micros(20);
        loop {
            match fs::read(path) {
                Ok(bytes) => return Ok(bytes),
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => return Err(TransportError::Io { path: path.to_path_buf(), error: e }),
            }
            if start.elapsed() >= self.timeout {
                return Err(TransportError::Timeout { waiting_for: what(), after: start.elapsed() });
            }
            std::thread::sleep(nap);
            nap = (nap * 2).min(Duration::from_millis(1));
        }
    }

    /// Announces this member and waits for all `ranks` of them; every member must name the same size.
    pub fn join(&self) -> Result<()> {
        let mine = self.dir.join(format!("member-{}", self.rank));
        if mine.exists() {
            return Err(TransportError::Io {
                path: mine,
                error: io::Error::new(io::ErrorKind::AlreadyExists, "this rank already joined"),
            });
        }
        self.publish(&mine, format!("{} {}", self.ranks, std::process::id()).as_bytes())?;
        for r in 0..self.ranks {
            let path = self.dir.join(format!("member-{r}"));
            let text = self.await_file(&path, || format!("rank {r} to join"))?;
            let their_size = String::from_utf8_lossy(&text).split(' ').next().and_then(|s| s.parse().ok());
            if their_size != Some(self.ranks) {
                return Err(TransportError::SizeMismatch { rank: r, ours: self.ranks, theirs: their_size });
            }
        }
        Ok(())
    }

    fn call_dir(&self, seq: u64) -> PathBuf {
        self.dir.join(format!("c{seq:010}"))
    }

    /// Posts this member's contribution to collective `seq`.
    pub fn post(&self, seq: u64, header: &Header, payload: &[u8]) -> Result<()> {
        let dir = self.call_dir(seq);
        fs::create_dir_all(&dir).map_err(io_error(&dir))?;
        self.publish(&dir.join(format!("in-{}", self.rank)), &header.encode(payload))
    }

    /// Waits for `from`'s contribution to collective `seq`, which must carry `expected`.
    pub fn fetch(&self, seq: u64, from: u32, expected: &Header) -> Result<Vec<u8>> {
        let path = self.call_dir(seq).join(format!("in-{from}"));
        let bytes = self.await_file(&path, || format!("rank {from} in call #{seq} ({:?})", expected.kind))?;
        let (header, payload) =
            Header::decode(&bytes).ok_or(TransportError::Corrupt { path: path.clone() })?;
        if header != *expected {
            return Err(TransportError::Mismatch { rank: from, ours: *expected, theirs: header });
        }
        Ok(payload.to_vec())
    }

    /// Marks collective `seq` read by this member; the last member removes its files.
    pub fn finish(&self, seq: u64) -> Result<()> {
        let dir = self.call_dir(seq);
        self.publish(&dir.join(format!("done-{}", self.rank)), b"")?;
        let all_done = (0..self.ranks).all(|r| dir.join(format!("done-{r}")).exists());
        if all_done {
            // Two members may both see the set complete: whoever removes it second finds nothing to do.
            let _ = fs::remove_dir_all(&dir);
        }
        Ok(())
    }

    /// Queues message `k` of this member to `dst` (it does not wait for the receiver).
    pub fn send(&self, dst: u32, k: u64, header: &Header, payload: &[u8]) -> Result<()> {
        let dir = self.dir.join(format!("p2p-{}-{dst}", self.rank));
        fs::create_dir_all(&dir).map_err(io_error(&dir))?;
        self.publish(&dir.join(k.to_string()), &header.encode(payload))
    }

    /// Waits for message `k` from `src`, which must carry `expected`, and consumes it.
    pub fn recv(&self, src: u32, k: u64, expected: &Header) -> Result<Vec<u8>> {
        let path = self.dir.join(format!("p2p-{src}-{}", self.rank)).join(k.to_string());
        let bytes = self.await_file(&path, || format!("message #{k} from rank {src}"))?;
        let (header, payload) =
            Header::decode(&bytes).ok_or(TransportError::Corrupt { path: path.clone() })?;
        if header != *expected {
            return Err(TransportError::Mismatch { rank: src, ours: *expected, theirs: header });
        }
        let payload = payload.to_vec();
        fs::remove_file(&path).map_err(io_error(&path))?;
        Ok(payload)
    }

    /// This member leaves; the last one to leave removes the directory.
    pub fn leave(&self) {
        let _ = self.publish(&self.dir.join(format!("left-{}", self.rank)), b"");
        if (0..self.ranks).all(|r| self.dir.join(format!("left-{r}")).exists()) {
            let _ = fs::remove_dir_all(&self.dir);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_round_trip_and_foreign_bytes_are_refused() {
        let h = Header { kind: CallKind::ReduceScatter, dtype: 11, op: 2, root: 0, count: 1 << 40 };
        let bytes = h.encode(&[7, 8, 9]);
        let (back, payload) = Header::decode(&bytes).unwrap();
        assert_eq!((back, payload), (h, &[7u8, 8, 9][..]));
        assert!(Header::decode(&bytes[..HEADER_LEN - 1]).is_none());
        let mut foreign = bytes.clone();
        foreign[4] = 99;
        assert!(Header::decode(&foreign).is_none());
    }

    #[test]
    fn a_missing_member_times_out_naming_it() {
        let dir = tempfile::tempdir().unwrap();
        let t = Transport { dir: dir.path().into(), ranks: 2, rank: 0, timeout: Duration::from_millis(30) };
        match t.join() {
            Err(TransportError::Timeout { waiting_for, .. }) => assert_eq!(waiting_for, "rank 1 to join"),
            other => panic!("expected a timeout, got {other:?}"),
        }
    }
}
