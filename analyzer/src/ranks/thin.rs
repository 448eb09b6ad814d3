//! A thinned HCCL call's buffers in a few words (`buffers` makes and reads them): a leaf, so that the events
//! can hold them without importing what reads them.

use crate::index::Io;

/// The event was thinned: its buffers are read here, not from its tensors.
const THIN: u8 = 1;
const HAS_INPUT: u8 = 2;
const INPUT_HASHED: u8 = 4;
const HAS_OUTPUT: u8 = 8;
const OUTPUT_HASHED: u8 = 16;
const INPUT_ANOMALOUS: u8 = 32;

/// A call's send buffer (input 0) and receive buffer (output 0), in 24 bytes: their hashes, which of them
/// the call had and hashed, and whether the send buffer was anomalous. The default is no thinned call (the
/// event keeps its tensors).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct ThinBuffers {
    input: u64,
    output: u64,
    flags: u8,
}

impl ThinBuffers {
    /// A thinned call with no buffer yet.
    pub fn empty() -> ThinBuffers {
        ThinBuffers { flags: THIN, ..ThinBuffers::default() }
    }

    /// Adds a buffer of side `io` at `index`, its hash and whether it is anomalous; `false` when it does not
    /// fit (a second buffer of a side, or one at another index than 0): the call must stay whole.
    pub fn add(&mut self, io: Io, index: u32, hash: Option<u64>, anomalous: bool) -> bool {
        let (has, hashed, slot) = match io {
            Io::Input => (HAS_INPUT, INPUT_HASHED, &mut self.input),
            Io::Output => (HAS_OUTPUT, OUTPUT_HASHED, &mut self.output),
        };
        if self.flags & has != 0 || index != 0 {
            return false;
        }
        self.flags |= has;
        if let Some(h) = hash {
            self.flags |= hashed;
            *slot = h;
        }
        if io == Io::Input && anomalous {
            self.flags |= INPUT_ANOMALOUS;
        }
        true
    }

    /// Whether the event was thinned (else its tensors are read).
    pub fn is_thin(&self) -> bool {
        self.flags & THIN != 0
    }

    /// Whether the call had a buffer of side `io`.
    pub fn has(&self, io: Io) -> bool {
        self.flags & if io == Io::Input { HAS_INPUT } else { HAS_OUTPUT } != 0
    }

    /// The hash of its buffer of side `io`, when it had one hashed.
    pub fn hash(&self, io: Io) -> Option<u64> {
        match io {
            Io::Input => (self.flags & INPUT_HASHED != 0).then_some(self.input),
            Io::Output => (self.flags & OUTPUT_HASHED != 0).then_some(self.output),
        }
    }
}

impl ThinBuffers {
    /// Its words (input hash, output hash, flags), for a form that lays them out with others.
    pub fn parts(&self) -> (u64, u64, u8) {
        (self.input, self.output, self.flags)
    }

    /// The buffers of [`ThinBuffers::parts`].
    pub fn from_parts((input, output, flags): (u64, u64, u8)) -> ThinBuffers {
        ThinBuffers { input, output, flags }
    }

    /// Whether its send buffer was anomalous.
    pub fn input_anomalous(&self) -> bool {
        self.flags & INPUT_ANOMALOUS != 0
    }

    /// Whether either buffer was hashed.
    pub fn any_hashed(&self) -> bool {
        self.flags & (INPUT_HASHED | OUTPUT_HASHED) != 0
    }
}
