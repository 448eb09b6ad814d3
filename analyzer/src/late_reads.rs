//! Reads that failed after their input was opened and checked, where no report can take them any more: a
//! capture's statistics are read again from their records while a command runs (`Index::stats`), and a
//! record whose bytes changed since the capture was opened gives none. The command line ends with exit
//! status 2 while any was noted, naming them on standard error: the answer it printed missed them, so it is
//! no all-clear (docs/CLI.md, exit status).

use std::sync::{Mutex, PoisonError};

/// How many failures are kept word for word; the rest are counted.
const KEPT: usize = 5;

/// Failures so far: how many, and the first [`KEPT`] in words.
static NOTED: Mutex<(usize, Vec<String>)> = Mutex::new((0, Vec::new()));

/// Notes a read that failed after its input was checked (`what`: the file, the place, what is wrong).
pub fn note(what: String) {
    let mut noted = NOTED.lock().unwrap_or_else(PoisonError::into_inner);
    noted.0 += 1;
    if noted.1.len() < KEPT {
        noted.1.push(what);
    }
}

/// How many reads failed so far, and the first few in words.
pub fn noted() -> (usize, Vec<String>) {
    NOTED.lock().unwrap_or_else(PoisonError::into_inner).clone()
}
