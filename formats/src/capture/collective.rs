//! Collective records (kind 7): one HCCL collective or point-to-point call as the collector saw it.
//!
//! Members of a communicator match their records by (communicator, sequence number): every member issues
//! the communicator's collectives in the same order, so the n-th on one member is the n-th on all of them.
//! Point-to-point calls count per (communicator, peer, direction) instead.

use crate::stats::TensorStats;
use crate::{FormatError, Result};
use accutrace_proto::capture as pb;

/// Which HCCL call a record describes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum CollectiveOp {
    /// `HcclAllReduce`: every member gets the reduction of all members' buffers.
    AllReduce,
    /// `HcclBroadcast`: every member gets the root's buffer.
    Broadcast,
    /// `HcclAllGather`: every member gets all members' buffers, in rank order.
    AllGather,
    /// `HcclReduceScatter`: member i gets part i of the reduction.
    ReduceScatter,
    /// `HcclBarrier`: no data.
    Barrier,
    /// `HcclSend`: to one peer.
    Send,
    /// `HcclRecv`: from one peer.
    Recv,
}

impl CollectiveOp {
    /// The HCCL function's name (`HcclAllReduce`): what reports show in the op column.
    pub fn api_name(self) -> &'static str {
        match self {
            CollectiveOp::AllReduce => "HcclAllReduce",
            CollectiveOp::Broadcast => "HcclBroadcast",
            CollectiveOp::AllGather => "HcclAllGather",
            CollectiveOp::ReduceScatter => "HcclReduceScatter",
            CollectiveOp::Barrier => "HcclBarrier",
            CollectiveOp::Send => "HcclSend",
            CollectiveOp::Recv => "HcclRecv",
        }
    }

    /// The op with this API name.
    pub fn from_api_name(name: &str) -> Option<CollectiveOp> {
        CollectiveOp::ALL.into_iter().find(|op| op.api_name() == name)
    }

    /// Every op, in code order.
    pub const ALL: [CollectiveOp; 7] = [
        CollectiveOp::AllReduce,
        CollectiveOp::Broadcast,
        CollectiveOp::AllGather,
        CollectiveOp::ReduceScatter,
        CollectiveOp::Barrier,
        CollectiveOp::Send,
        CollectiveOp::Recv,
    ];

    /// Point to point (matched per peer and direction, not by the communicator's sequence).
    pub fn is_point_to_point(self) -> bool {
        matches!(self, CollectiveOp::Send | CollectiveOp::Recv)
    }

    fn to_proto(self) -> pb::CollectiveOp {
        match self {
            CollectiveOp::AllReduce => pb::CollectiveOp::AllReduce,
            CollectiveOp::Broadcast => pb::CollectiveOp::Broadcast,
            CollectiveOp::AllGather => pb::CollectiveOp::AllGather,
            CollectiveOp::ReduceScatter => pb::CollectiveOp::ReduceScatter,
            CollectiveOp::Barrier => pb::CollectiveOp::Barrier,
            CollectiveOp::Send => pb::CollectiveOp::Send,
            CollectiveOp::Recv => pb::CollectiveOp::Recv,
        }
    }

    fn from_code(code: i32) -> Option<CollectiveOp> {
        Some(match pb::CollectiveOp::try_from(code).ok()? {
            pb::CollectiveOp::AllReduce => CollectiveOp::AllReduce,
            pb::CollectiveOp::Broadcast => CollectiveOp::Broadcast,
            pb::CollectiveOp::AllGather => CollectiveOp::AllGather,
            pb::CollectiveOp::ReduceScatter => CollectiveOp::ReduceScatter,
            pb::CollectiveOp::Barrier => CollectiveOp::Barrier,
            pb::CollectiveOp::Send => CollectiveOp::Send,
            pb::CollectiveOp::Recv => CollectiveOp::Recv,
            pb::CollectiveOp::Unknown => return None,
        })
    }
}

/// What was seen of one buffer: its statistics and content hash.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BufferSummary {
    /// Statistics over the buffer's elements, as a tensor's.
    pub stats: TensorStats,
    /// XXH3-64 of the raw bytes (`stats::content_hash`).
    pub content_hash: u64,
    /// The buffer's size in bytes.
    pub size: u64,
}

/// One collective or point-to-point call.
#[derive(Clone, Debug, PartialEq)]
pub struct CollectiveInfo {
    /// Communicator identity, the same on every member (see docs/CAPTURE_FORMAT.md).
    pub comm: String,
    /// This process's rank in the communicator (0 when unknown).
    pub comm_rank: u32,
    /// Members of the communicator (0 when unknown).
    pub comm_size: u32,
    /// Collectives: the communicator's count, from 0; send/recv: per (communicator, peer, direction).
    pub seq: u64,
    /// Which call.
    pub op: CollectiveOp,
    /// The element count argument as passed (`sendCount` for AllGather, `recvCount` for ReduceScatter).
    pub count: u64,
    /// `HcclDataType` code as passed (see `dtype::hccl`).
    pub dtype: u32,
    /// `HcclReduceOp` of AllReduce and ReduceScatter.
    pub reduce_op: Option<u32>,
    /// Broadcast: the root; Send: the destination; Recv: the source.
    pub peer: Option<u32>,
    /// The send buffer before the call, when it was read.
    pub input: Option<BufferSummary>,
    /// The receive buffer after the call, when it was read.
    pub output: Option<BufferSummary>,
    /// Host clock, µs since the epoch, when the call began (its stream synchronized: earlier work is done).
    pub start_us: u64,
    /// Host clock when the call returned and its stream was synchronized again.
    pub end_us: u64,
    /// `HcclResult` the call returned.
    pub result: i32,
}

fn buffer_to_proto(b: &BufferSummary) -> pb::CollectiveBuffer {
    pb::CollectiveBuffer { stats: Some((&b.stats).into()), content_hash: b.content_hash, size: b.size }
}

fn buffer_from_proto(b: &pb::CollectiveBuffer) -> BufferSummary {
    BufferSummary {
        stats: b.stats.as_ref().map(TensorStats::from).unwrap_or_default(),
        content_hash: b.content_hash,
        size: b.size,
    }
}

impl CollectiveInfo {
    /// The protobuf record, with the communicator already interned as `comm_id`.
    pub(crate) fn to_proto(&self, comm_id: u32) -> pb::CollectiveRecord {
        pb::CollectiveRecord {
            comm: comm_id,
            comm_rank: self.comm_rank,
            comm_size: self.comm_size,
            seq: self.seq,
            op: self.op.to_proto() as i32,
            count: self.count,
            dtype: self.dtype,
            reduce_op: self.reduce_op,
            peer: self.peer,
            input: self.input.as_ref().map(buffer_to_proto),
            output: self.output.as_ref().map(buffer_to_proto),
            start_us: self.start_us,
            end_us: self.end_us,
            result: self.result,
        }
    }

    /// From the protobuf record and its communicator's interned name.
    pub(crate) fn from_proto(r: &pb::CollectiveRecord, comm: String) -> Result<CollectiveInfo> {
        let op = CollectiveOp::from_code(r.op)
            .ok_or_else(|| FormatError::whole(format!("collective record with unknown op {}", r.op)))?;
        Ok(CollectiveInfo {
            comm,
            comm_rank: r.comm_rank,
            comm_size: r.comm_size,
            seq: r.seq,
            op,
            count: r.count,
            dtype: r.dtype,
            reduce_op: r.reduce_op,
            peer: r.peer,
            input: r.input.as_ref().map(buffer_from_proto),
            output: r.output.as_ref().map(buffer_from_proto),
            start_us: r.start_us,
            end_us: r.end_us,
            result: r.result,
        })
    }
}

/// Serialized as the HCCL function's name (`"HcclAllReduce"`), as reports show it.
impl serde::Serialize for CollectiveOp {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> std::result::Result<S::Ok, S::Error> {
        serializer.serialize_str(self.api_name())
    }
}

/// Read back from the HCCL function's name (per-rank summaries store it so).
impl<'de> serde::Deserialize<'de> for CollectiveOp {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> std::result::Result<Self, D::Error> {
        let name = <std::borrow::Cow<'de, str>>::deserialize(deserializer)?;
        CollectiveOp::from_api_name(&name)
            .ok_or_else(|| serde::de::Error::custom(format!("unknown HCCL call `{name}`")))
    }
}
