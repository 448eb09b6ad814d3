//! Statistics mode without reassembly: the statistics and content hash of a tensor dump file that arrives
//! in several chunks, computed chunk by chunk as the chunks arrive, where they lie (in their slots).
//!
//! Statistics mode keeps no tensor bytes, so the file is never put back together: its first bytes are kept
//! until they hold the binary layout's header (`accutrace_formats::dump::BinaryHeader`, usually all in the
//! first chunk), then every later byte goes to the statistics stream of the tensor it belongs to
//! (`accutrace_formats::stats::StatsStream`), which gives bit for bit what `stats_and_hash` gives on the
//! whole tensor. At the file's end the header and one summary per input and output are what the writer
//! records, exactly as from the reassembled file.
//!
//! What the whole-file path would read differently is never streamed, or handed back whole:
//! - first bytes that are not a binary header (it does not decode): [`Fed::Whole`] hands back the bytes
//!   so far and the file is reassembled as before;
//! - a file that ends before its header is complete (an old-layout file, whose first 8 bytes announce a
//!   header longer than the file): [`End::Whole`] is the whole file, for `parse_dump`;
//! - a file whose length is not the one its header declares: [`End::Mismatch`], counted as unparsed with
//!   the error `parse_dump` gives for the binary layout. (`parse_dump` would then also try the old layout;
//!   a file whose first bytes decode as a binary header is not one in practice, see `parse_dump`.)
//!
//! Pure logic, no threads or I/O.

use accutrace_formats::dump::BinaryHeader;
use accutrace_formats::stats::{Histogram, StatsStream, TensorStats};
use accutrace_formats::{DType, FormatError, Result};

/// One tensor's statistics, histogram (when asked for) and content hash, as `stats_and_hash` (or
/// `stats_hash_and_histogram`) gives them.
#[derive(Debug, PartialEq)]
pub struct Summary {
    pub stats: Result<(TensorStats, Option<Histogram>)>,
    pub hash: u64,
}

/// A streamed file's header and the summaries of its inputs, then its outputs.
#[derive(Debug, PartialEq)]
pub struct Streamed {
    pub header: BinaryHeader,
    pub summaries: Vec<Summary>,
}

/// What [`FileStream::feed`] did with the bytes.
#[derive(Debug, PartialEq, Eq)]
pub enum Fed {
    /// Taken (counted, or into the statistics).
    Taken,
    /// The file's first bytes are not a binary header: here is everything fed so far (these bytes
    /// included), to reassemble the file as it is.
    Whole(Vec<u8>),
    /// The memory to keep the first bytes could not be had.
    NoMemory,
}

/// How a streamed file ended.
#[derive(Debug)]
pub enum End {
    /// Every byte its header declares arrived.
    Streamed(Box<Streamed>),
    /// The file ended before its header did: these are its bytes, all of them.
    Whole(Vec<u8>),
    /// The file's length is not the one its header declares.
    Mismatch(FormatError),
}

/// One tensor's bytes in the file, and its dtype.
struct Span {
    start: u64,
    end: u64,
    dtype: DType,
}

/// The state of one file being streamed. Reused from file to file ([`reset`](Self::reset)).
pub struct FileStream {
    histogram: bool,
    /// The file's first bytes, until they hold the header.
    prefix: Vec<u8>,
    header: Option<BinaryHeader>,
    /// Inputs then outputs.
    spans: Vec<Span>,
    /// The span being read (`spans.len()` once all are done).
    next: usize,
    /// Bytes of the file fed so far.
    pos: u64,
    stream: StatsStream,
    summaries: Vec<Summary>,
}

impl FileStream {
    /// A stream for files whose summaries carry a histogram when `histogram`.
    pub fn new(histogram: bool) -> FileStream {
        FileStream {
            histogram,
            prefix: Vec::new(),
            header: None,
            spans: Vec::new(),
            next: 0,
            pos: 0,
            stream: StatsStream::new(DType::FLOAT16, histogram),
            summaries: Vec::new(),
        }
    }

    /// Starts over for a new file (buffers kept).
    pub fn reset(&mut self) {
        self.prefix.clear();
        self.header = None;
        self.spans.clear();
        self.next = 0;
        self.pos = 0;
        self.summaries.clear();
    }

    /// Starts over for a new file whose summaries carry a histogram when `histogram`.
    pub fn reset_for(&mut self, histogram: bool) {
        self.histogram = histogram;
        self.reset();
    }

    /// Before the header is read: every byte fed so far (the stream starts over).
    pub fn take_prefix(&mut self) -> Vec<u8> {
        let prefix = std::mem::take(&mut self.prefix);
        self.reset();
        prefix
    }

    /// Bytes fed so far: where the next bytes go in the file.
    pub fn position(&self) -> u64 {
        self.pos
    }

    /// Whether the header has been read (after that, bytes fed are not kept).
    pub fn has_header(&self) -> bool {
        self.header.is_some()
    }

    /// Feeds the file's next bytes.
    pub fn feed(&mut self, data: &[u8]) -> Fed {
        if self.header.is_some() {
            self.take(data);
            return Fed::Taken;
        }
        // Without a partial header kept, try the bytes where they are (the usual case: the whole header
        // in the first chunk), so that no byte of a tensor is copied.
        let parsed = if self.prefix.is_empty() {
            BinaryHeader::parse(data)
        } else {
            if self.prefix.try_reserve(data.len()).is_err() {
                return Fed::NoMemory;
            }
            self.prefix.extend_from_slice(data);
            BinaryHeader::parse(&self.prefix)
        };
        match parsed {
            Ok(Some(header)) => {
                self.start(header);
                if self.prefix.is_empty() {
                    self.take(data);
                } else {
                    let prefix = std::mem::take(&mut self.prefix);
                    self.take(&prefix);
                    self.prefix = prefix;
                    self.prefix.clear();
                }
                Fed::Taken
            }
            Ok(None) => {
                if self.prefix.is_empty() {
                    if self.prefix.try_reserve(data.len()).is_err() {
                        return Fed::NoMemory;
                    }
                    self.prefix.extend_from_slice(data);
                }
                self.pos = self.prefix.len() as u64;
                Fed::Taken
            }
            Err(_) => {
                let mut whole = std::mem::take(&mut self.prefix);
                if whole.is_empty() {
                    whole = data.to_vec();
                }
                self.reset();
                Fed::Whole(whole)
            }
        }
    }

    /// The file's end: its header and summaries when every byte it declares arrived.
    pub fn end(&mut self) -> End {
        let Some(header) = self.header.take() else {
            let whole = std::mem::take(&mut self.prefix);
            self.reset();
            return End::Whole(whole);
        };
        self.settle();
        let end = if self.pos == header.file_len && self.next == self.spans.len() {
            End::Streamed(Box::new(Streamed { header, summaries: std::mem::take(&mut self.summaries) }))
        } else {
            // parse_dump's words for a binary file of this length.
            let header_end = header.file_len - self.spans_and_more_len(&header);
            let total = header.file_len - header_end;
            let count = header.header.input.len()
                + header.header.output.len()
                + header.header.buffer.len()
                + header.header.space.len();
            End::Mismatch(FormatError::at(
                header_end,
                format!(
                    "header declares {count} tensors totalling {total} bytes but {} bytes follow the header",
                    self.pos.saturating_sub(header_end)
                ),
            ))
        };
        self.reset();
        end
    }

    /// The bytes after the header: every input, output, buffer and workspace.
    fn spans_and_more_len(&self, header: &BinaryHeader) -> u64 {
        let h = &header.header;
        let sizes = h.input.iter().map(|t| t.size).chain(h.output.iter().map(|t| t.size));
        let sizes = sizes.chain(h.buffer.iter().map(|t| t.size)).chain(h.space.iter().map(|t| t.size));
        // No overflow: BinaryHeader::parse checked that the header and these sum to file_len.
        sizes.sum()
    }

    fn start(&mut self, header: BinaryHeader) {
        self.spans.clear();
        for t in header.inputs.iter().chain(&header.outputs) {
            let start = t.offset;
            self.spans.push(Span { start, end: start + header.size(t), dtype: t.dtype });
        }
        self.next = 0;
        self.pos = 0;
        self.header = Some(header);
        if let Some(first) = self.spans.first() {
            self.stream.reset(first.dtype, self.histogram);
        }
        self.settle();
    }

    /// Feeds bytes that come after the header was read (or the bytes that held it, from the file's start).
    fn take(&mut self, mut data: &[u8]) {
        while !data.is_empty() {
            let Some(span) = self.spans.get(self.next) else {
                // Buffers, workspaces, or bytes past the declared end: counted, not read.
                self.pos += data.len() as u64;
                return;
            };
            let (start, end) = (span.start, span.end);
            let n = if self.pos < start {
                // The header (or anything before this tensor): skipped.
                (start - self.pos).min(data.len() as u64) as usize
            } else {
                let n = (end - self.pos).min(data.len() as u64) as usize;
                self.stream.update(&data[..n]);
                n
            };
            self.pos += n as u64;
            data = &data[n..];
            self.settle();
        }
    }

    /// Ends every tensor whose bytes have all arrived (empty tensors at once) and starts the next.
    fn settle(&mut self) {
        while let Some(span) = self.spans.get(self.next) {
            if span.end > self.pos {
                return;
            }
            let (stats, hash) = if self.histogram {
                let (found, hash) = self.stream.finish_with_histogram();
                (found.map(|(s, h)| (s, Some(h))), hash)
            } else {
                let (found, hash) = self.stream.finish();
                (found.map(|s| (s, None)), hash)
            };
            self.summaries.push(Summary { stats, hash });
            self.next += 1;
            if let Some(following) = self.spans.get(self.next) {
                self.stream.reset(following.dtype, self.histogram);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use accutrace_formats::dump::{encode_dump, parse_dump};
    use accutrace_formats::stats::{stats_and_hash, stats_hash_and_histogram};
    use accutrace_proto::dumpdata::{DumpData, OpBuffer, OpInput, OpOutput, Shape};

    /// A dump file of fp16, fp32, int8 (odd size) inputs, an empty output and a bf16 output, with a buffer.
    fn sample(seed: u64, sizes: [usize; 4]) -> Vec<u8> {
        let mut x = seed | 1;
        let mut bytes = |n: usize| -> Vec<u8> {
            (0..n)
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    // Mostly small values (exponent bytes below 0x7C), now and then any byte: NaN, inf.
                    if x.is_multiple_of(97) {
                        x as u8
                    } else {
                        (x as u8) & 0x5F
                    }
                })
                .collect()
        };
        let (a, b, c, d) = (bytes(sizes[0] * 2), bytes(sizes[1] * 4), bytes(sizes[2]), bytes(sizes[3] * 2));
        let shape = |n: usize| Some(Shape { dim: vec![n as u64] });
        let header = DumpData {
            op_name: "layer.0/add".into(),
            input: vec![
                OpInput { data_type: 1, shape: shape(sizes[0]), ..Default::default() },
                OpInput { data_type: 0, shape: shape(sizes[1]), ..Default::default() },
                OpInput { data_type: 2, shape: shape(sizes[2]), ..Default::default() },
            ],
            output: vec![
                OpOutput { data_type: 1, shape: shape(0), ..Default::default() },
                OpOutput { data_type: 27, shape: shape(sizes[3]), ..Default::default() },
            ],
            buffer: vec![OpBuffer::default()],
            ..Default::default()
        };
        encode_dump(&header, &[&a, &b, &c], &[&[], &d], &[&[1, 2, 3]], &[]).unwrap()
    }

    /// Feeds `file` cut at `cuts` and checks the summaries against the whole-file functions, bit for bit.
    fn check(s: &mut FileStream, file: &[u8], cuts: &[usize], histogram: bool) {
        let mut cuts: Vec<usize> = cuts.iter().map(|&c| c.min(file.len())).collect();
        cuts.sort_unstable();
        let mut at = 0;
        for c in cuts.into_iter().chain([file.len()]) {
            assert_eq!(s.feed(&file[at..c]), Fed::Taken);
            at = c;
        }
        let streamed = match s.end() {
            End::Streamed(x) => x,
            other => panic!("expected a streamed file, got {other:?}"),
        };
        let whole = parse_dump(file).unwrap();
        assert_eq!(streamed.header.header, whole.header);
        let tensors: Vec<_> = whole.inputs.iter().chain(&whole.outputs).collect();
        assert_eq!(streamed.summaries.len(), tensors.len());
        for (got, t) in streamed.summaries.iter().zip(tensors) {
            let want = if histogram {
                let (found, hash) = stats_hash_and_histogram(t.dtype, t.bytes);
                (found.map(|(s, h)| (s, Some(h))), hash)
            } else {
                let (found, hash) = stats_and_hash(t.dtype, t.bytes);
                (found.map(|s| (s, None)), hash)
            };
            // Debug prints each f64 exactly enough to tell any two apart.
            assert_eq!(format!("{:?} {}", got.stats, got.hash), format!("{:?} {}", want.0, want.1));
        }
    }

    #[test]
    fn split_anywhere_the_summaries_are_the_whole_files() {
        let mut s = FileStream::new(false);
        let mut h = FileStream::new(true);
        let file = sample(3, [5000, 2049, 4097, 3]);
        let header_end = 8 + u64::from_le_bytes(file[..8].try_into().unwrap()) as usize;
        // Inside the length field, inside the header, at its end, inside one element, at chunk edges.
        let cut_sets: Vec<Vec<usize>> = vec![
            vec![],
            vec![3],
            vec![8, 9],
            vec![header_end / 2],
            vec![header_end - 1, header_end + 1],
            vec![header_end + 4095, header_end + 4096, header_end + 4097],
            vec![header_end + 10_000 + 3],
            (0..file.len()).step_by(997).collect(),
            (0..file.len()).step_by(64 * 1024).collect(),
        ];
        for cuts in &cut_sets {
            check(&mut s, &file, cuts, false);
            check(&mut h, &file, cuts, true);
        }
        // Empty and tiny tensors, a file of one byte pieces.
        let file = sample(9, [0, 1, 1, 0]);
        check(&mut s, &file, &(0..file.len()).collect::<Vec<_>>(), false);
    }

    #[test]
    fn random_splits_of_random_files() {
        let mut x = 0x2545_F491_4F6C_DD1Du64;
        let mut next = |n: u64| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x % n.max(1)
        };
        let mut s = FileStream::new(false);
        for round in 0..60 {
            let sizes = [next(9000) as usize, next(3000) as usize, next(5000) as usize, next(3) as usize];
            let file = sample(round, sizes);
            let cuts: Vec<usize> = (0..next(12)).map(|_| next(file.len() as u64 + 1) as usize).collect();
            check(&mut s, &file, &cuts, false);
        }
    }

    #[test]
    fn what_is_not_a_binary_file_comes_back_whole() {
        let mut s = FileStream::new(false);
        let file = sample(5, [100, 100, 100, 100]);
        // A header that does not decode: the bytes so far come back, the reassembly takes it from there.
        let mut bad = file.clone();
        bad[8] = 0xFF;
        bad[9] = 0xFF;
        assert_eq!(s.feed(&bad[..5]), Fed::Taken);
        assert_eq!(s.feed(&bad[5..200]), Fed::Whole(bad[..200].to_vec()));
        assert_eq!(s.feed(&bad[..300]), Fed::Whole(bad[..300].to_vec()), "in one piece too");
        // A file that ends before the header it announces: the whole file, for parse_dump.
        let mut long = file.clone();
        long[..8].copy_from_slice(&(1u64 << 40).to_le_bytes());
        assert_eq!(s.feed(&long[..50]), Fed::Taken);
        assert_eq!(s.feed(&long[50..]), Fed::Taken);
        match s.end() {
            End::Whole(bytes) => assert_eq!(bytes, long),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_length_other_than_the_declared_one_is_a_mismatch() {
        let mut s = FileStream::new(false);
        let file = sample(5, [100, 100, 100, 100]);
        let want = |f: &[u8]| parse_dump(f).unwrap_err().to_string();
        for cut in [file.len() - 1, file.len() - 300] {
            s.feed(&file[..cut]);
            match s.end() {
                End::Mismatch(e) => assert_eq!(e.to_string(), want(&file[..cut])),
                other => panic!("{other:?}"),
            }
        }
        let mut longer = file.clone();
        longer.extend_from_slice(&[0; 9]);
        s.feed(&longer[..file.len() - 5]);
        s.feed(&longer[file.len() - 5..]);
        match s.end() {
            End::Mismatch(e) => assert_eq!(e.to_string(), want(&longer)),
            other => panic!("{other:?}"),
        }
        // The stream is reusable after a mismatch.
        check(&mut s, &file, &[77], false);
    }
}
