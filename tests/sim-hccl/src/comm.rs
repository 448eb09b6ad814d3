//! Communicators: the root info that names where members meet, and the collectives in safe Rust over
//! byte buffers (the ABI layer in `abi` turns C pointers into these slices and back).

use crate::reduce::{self, Unsupported};
use crate::transport::{CallKind, Header, Transport, TransportError};
use ascend_sys::hccl::{HcclDataType, HcclReduceOp, ROOT_INFO_LEN};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// The first bytes of a root info this library made.
const ROOT_INFO_MAGIC: &[u8; 8] = b"SIMHCCL1";

/// Why a call failed; the ABI maps each onto an `HcclResult`.
#[derive(Debug)]
pub enum CommError {
    /// A bad argument (root or peer out of range, a root info this library did not make).
    Param(String),
    /// The element type or reduce op is not one HCCL supports for this call.
    Unsupported(Unsupported),
    Transport(TransportError),
}

impl std::fmt::Display for CommError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CommError::Param(m) => f.write_str(m),
            CommError::Unsupported(Unsupported::Op(op)) => write!(f, "reduce op {op} is not supported"),
            CommError::Unsupported(Unsupported::DataType(t)) => {
                write!(f, "data type {t} cannot be reduced")
            }
            CommError::Transport(e) => e.fmt(f),
        }
    }
}

impl From<TransportError> for CommError {
    fn from(e: TransportError) -> Self {
        CommError::Transport(e)
    }
}

type Result<T> = std::result::Result<T, CommError>;

/// Where communicators' directories are made: `$SIM_HCCL_DIR`, else the system temporary directory.
fn base_dir() -> PathBuf {
    std::env::var_os("SIM_HCCL_DIR")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(std::env::temp_dir)
}

/// How long a member waits for the others: `HCCL_EXEC_TIMEOUT` seconds (the real library's variable),
/// else 300 s.
fn timeout() -> Duration {
    let secs = std::env::var("HCCL_EXEC_TIMEOUT").ok().and_then(|v| v.trim().parse::<u64>().ok());
    Duration::from_secs(secs.filter(|&s| s > 0).unwrap_or(300))
}

/// Makes a new meeting directory and the root info naming it (HcclGetRootInfo).
pub fn new_root_info() -> std::io::Result<[u8; ROOT_INFO_LEN]> {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let nanos =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
    let name = format!("sim-hccl-{}-{}-{nanos}", std::process::id(), COUNTER.fetch_add(1, Ordering::Relaxed));
    let dir = base_dir().join(name);
    std::fs::create_dir_all(&dir)?;
    let dir = dir.canonicalize()?;
    let path = dir.as_os_str().as_encoded_bytes();
    let mut info = [0u8; ROOT_INFO_LEN];
    if ROOT_INFO_MAGIC.len() + 4 + path.len() > ROOT_INFO_LEN {
        let _ = std::fs::remove_dir(&dir);
        return Err(std::io::Error::new(std::io::ErrorKind::InvalidInput, "SIM_HCCL_DIR path too long"));
    }
    info[..8].copy_from_slice(ROOT_INFO_MAGIC);
    info[8..12].copy_from_slice(&(path.len() as u32).to_le_bytes());
    info[12..12 + path.len()].copy_from_slice(path);
    Ok(info)
}

/// The meeting directory a root info names.
pub fn root_info_dir(info: &[u8; ROOT_INFO_LEN]) -> Result<PathBuf> {
    if &info[..8] != ROOT_INFO_MAGIC {
        return Err(CommError::Param("the root info was not made by HcclGetRootInfo of this library".into()));
    }
    let len = u32::from_le_bytes(info[8..12].try_into().expect("4 bytes")) as usize;
    let path = info.get(12..12 + len).ok_or_else(|| CommError::Param("the root info is corrupt".into()))?;
    use std::os::unix::ffi::OsStrExt;
    Ok(PathBuf::from(std::ffi::OsStr::from_bytes(path)))
}

/// A member's buffer must have the length this member's own parameters imply (the headers already agree,
/// so a difference means a damaged file).
fn same_length(rank: u32, part: &[u8], expected: usize) -> Result<()> {
    if part.len() == expected {
        Ok(())
    } else {
        Err(CommError::Param(format!("rank {rank} sent {} bytes where {expected} were due", part.len())))
    }
}

/// Bytes of `count` elements of an HCCL type, refused when the type is unknown or the size overflows.
pub fn dtype_bytes(dtype: HcclDataType, count: u64) -> Result<usize> {
    let width = accutrace_formats::dtype::hccl::element_bytes(dtype)
        .ok_or(CommError::Unsupported(Unsupported::DataType(dtype)))?;
    count
        .checked_mul(width)
        .and_then(|n| usize::try_from(n).ok())
        .filter(|&n| n <= isize::MAX as usize)
        .ok_or_else(|| {
            CommError::Param(format!("{count} elements of type {dtype} overflow the address space"))
        })
}

/// One member's end of a communicator.
pub struct Communicator {
    /// The same on every member: the meeting directory's name.
    pub name: String,
    transport: Transport,
    /// Collectives issued so far (every member issues them in the same order).
    next_call: u64,
    sent: HashMap<u32, u64>,
    received: HashMap<u32, u64>,
    /// The next reduction folds members in reverse rank order (the injected nondeterminism).
    reverse_next_reduction: bool,
    /// The next message sent is damaged in transit (the injected link fault).
    corrupt_next_send: bool,
}

impl Communicator {
    /// Joins the communicator that meets in `dir` as `rank` of `ranks`, waiting for every member.
    pub fn join(dir: &Path, ranks: u32, rank: u32) -> Result<Communicator> {
        if ranks == 0 || rank >= ranks {
            return Err(CommError::Param(format!("rank {rank} of {ranks}: out of range")));
        }
        if !dir.is_dir() {
            return Err(CommError::Param(format!("{}: no such communicator directory", dir.display())));
        }
        let transport = Transport { dir: dir.to_path_buf(), ranks, rank, timeout: timeout() };
        transport.join()?;
        let name = dir.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        Ok(Communicator {
            name,
            transport,
            next_call: 0,
            sent: HashMap::new(),
            received: HashMap::new(),
            reverse_next_reduction: false,
            corrupt_next_send: false,
        })
    }

    pub fn ranks(&self) -> u32 {
        self.transport.ranks
    }

    pub fn rank(&self) -> u32 {
        self.transport.rank
    }

    /// Makes the next reduction on this member fold the members' buffers in reverse rank order, as an
    /// algorithm picked without `HCCL_DETERMINISTIC` may: its result differs in the last bits from the
    /// other members' (with 3 or more members; a sum of two is the same either way).
    pub fn reverse_next_reduction(&mut self) {
        self.reverse_next_reduction = true;
    }

    /// Damages the next message this member sends: one bit of it flips on the way, so the receiver gets
    /// other bytes than the sender handed over (a link or memory fault the call itself does not notice).
    pub fn corrupt_next_send(&mut self) {
        self.corrupt_next_send = true;
    }

    /// Posts `payload` and gathers every member's contribution (index = rank).
    fn exchange(&mut self, header: Header, payload: &[u8]) -> Result<Vec<Vec<u8>>> {
        let seq = self.next_call;
        self.next_call += 1;
        let t = &self.transport;
        t.post(seq, &header, payload)?;
        let parts: Vec<Vec<u8>> =
            (0..t.ranks).map(|r| t.fetch(seq, r, &header)).collect::<std::result::Result<_, _>>()?;
        t.finish(seq)?;
        for (rank, part) in parts.iter().enumerate() {
            same_length(rank as u32, part, payload.len())?;
        }
        Ok(parts)
    }

    /// Folds `parts` element-wise, in rank order unless a reversal was injected.
    fn fold(&mut self, mut parts: Vec<Vec<u8>>, dtype: HcclDataType, op: HcclReduceOp) -> Vec<u8> {
        if std::mem::take(&mut self.reverse_next_reduction) {
            parts.reverse();
        }
        let mut iter = parts.into_iter();
        let mut acc = iter.next().unwrap_or_default();
        for part in iter {
            reduce::fold_into(&mut acc, &part, dtype, op);
        }
        acc
    }

    pub fn all_reduce(
        &mut self,
        send: &[u8],
        count: u64,
        dtype: HcclDataType,
        op: HcclReduceOp,
    ) -> Result<Vec<u8>> {
        reduce::check(dtype, op).map_err(CommError::Unsupported)?;
        let header = Header { kind: CallKind::AllReduce, dtype, op, root: 0, count };
        let parts = self.exchange(header, send)?;
        Ok(self.fold(parts, dtype, op))
    }

    /// The root's buffer, on every member (the root gets its own back).
    pub fn broadcast(&mut self, buf: &[u8], count: u64, dtype: HcclDataType, root: u32) -> Result<Vec<u8>> {
        if root >= self.ranks() {
            return Err(CommError::Param(format!("root {root} of {} ranks", self.ranks())));
        }
        let header = Header { kind: CallKind::Broadcast, dtype, op: 0, root, count };
        let seq = self.next_call;
        self.next_call += 1;
        let t = &self.transport;
        let out = if t.rank == root {
            t.post(seq, &header, buf)?;
            buf.to_vec()
        } else {
            t.fetch(seq, root, &header)?
        };
        t.finish(seq)?;
        same_length(root, &out, buf.len())?;
        Ok(out)
    }

    /// Every member's buffer, concatenated in rank order.
    pub fn all_gather(&mut self, send: &[u8], count: u64, dtype: HcclDataType) -> Result<Vec<u8>> {
        let header = Header { kind: CallKind::AllGather, dtype, op: 0, root: 0, count };
        Ok(self.exchange(header, send)?.concat())
    }

    /// Part `rank` of the element-wise reduction of every member's `ranks` parts.
    pub fn reduce_scatter(
        &mut self,
        send: &[u8],
        recv_count: u64,
        dtype: HcclDataType,
        op: HcclReduceOp,
    ) -> Result<Vec<u8>> {
        reduce::check(dtype, op).map_err(CommError::Unsupported)?;
        let header = Header { kind: CallKind::ReduceScatter, dtype, op, root: 0, count: recv_count };
        let part_len = send.len() / self.ranks() as usize;
        let rank = self.rank() as usize;
        let parts = self.exchange(header, send)?;
        let mine = parts.into_iter().map(|p| p[rank * part_len..(rank + 1) * part_len].to_vec()).collect();
        Ok(self.fold(mine, dtype, op))
    }

    pub fn barrier(&mut self) -> Result<()> {
        let header = Header { kind: CallKind::Barrier, dtype: 0, op: 0, root: 0, count: 0 };
        self.exchange(header, &[]).map(drop)
    }

    fn peer(&self, peer: u32) -> Result<()> {
        if peer >= self.ranks() || peer == self.rank() {
            return Err(CommError::Param(format!(
                "peer {peer} (this is rank {} of {})",
                self.rank(),
                self.ranks()
            )));
        }
        Ok(())
    }

    pub fn send(&mut self, buf: &[u8], count: u64, dtype: HcclDataType, dst: u32) -> Result<()> {
        self.peer(dst)?;
        let k = self.sent.entry(dst).or_default();
        let header = Header { kind: CallKind::SendRecv, dtype, op: 0, root: 0, count };
        let mut damaged;
        let buf = match (std::mem::take(&mut self.corrupt_next_send), buf.is_empty()) {
            (true, false) => {
                damaged = buf.to_vec();
                // The first element's lowest bit (little-endian): the last bit of a float's mantissa, a
                // change no reader would notice in the values, only in their bytes.
                damaged[0] ^= 1;
                &damaged[..]
            }
            _ => buf,
        };
        self.transport.send(dst, *k, &header, buf)?;
        *k += 1;
        Ok(())
    }

    pub fn recv(&mut self, count: u64, dtype: HcclDataType, src: u32) -> Result<Vec<u8>> {
        self.peer(src)?;
        let k = self.received.entry(src).or_default();
        let header = Header { kind: CallKind::SendRecv, dtype, op: 0, root: 0, count };
        let payload = self.transport.recv(src, *k, &header)?;
        *k += 1;
        let len = dtype_bytes(dtype, count)?;
        same_length(src, &payload, len)?;
        Ok(payload)
    }

    /// Leaves the communicator (HcclCommDestroy).
    pub fn leave(self) {
        self.transport.leave();
    }
}
