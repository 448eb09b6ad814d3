//! A progress bar on stderr for long work; silent when stderr is not a terminal or when asked.

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::io::IsTerminal;

pub struct Progress(ProgressBar);

impl Progress {
    pub fn new(what: &str, total: u64, disabled: bool) -> Progress {
        Progress::counting(what, "tensors", total, disabled)
    }

    /// A bar that counts `unit` (summaries, ranks) instead of tensors.
    pub fn counting(what: &str, unit: &str, total: u64, disabled: bool) -> Progress {
        let bar = ProgressBar::new(total);
        if disabled || !std::io::stderr().is_terminal() {
            bar.set_draw_target(ProgressDrawTarget::hidden());
        }
        let style = ProgressStyle::with_template(&format!(
            "{{prefix}} [{{bar:40}}] {{pos}}/{{len}} {unit}, {{eta}} left"
        ))
        .unwrap_or_else(|_| ProgressStyle::default_bar())
        .progress_chars("=> ");
        bar.set_style(style);
        bar.set_prefix(what.to_string());
        Progress(bar)
    }

    pub fn inc(&self, n: u64) {
        self.0.inc(n);
    }

    pub fn finish(&self) {
        self.0.finish_and_clear();
    }
}

/// A bar left behind (an error returned half-way) is cleared too, so that the message is not drawn over.
impl Drop for Progress {
    fn drop(&mut self) {
        self.0.finish_and_clear();
    }
}

/// The stages of a job that runs several engines in turn (`analyzer report`), one line each on stderr as
/// it starts, with the time the previous one took; silent when stderr is not a terminal or when asked.
pub struct Stages {
    shown: bool,
    what: &'static str,
    total: usize,
    done: usize,
    since: std::time::Instant,
}

impl Stages {
    pub fn new(what: &'static str, total: usize, disabled: bool) -> Stages {
        let shown = !disabled && std::io::stderr().is_terminal();
        Stages { shown, what, total, done: 0, since: std::time::Instant::now() }
    }

    /// Counts `n` more stages, found to be needed once the job started.
    pub fn add(&mut self, n: usize) {
        self.total += n;
    }

    /// Announces the next stage.
    pub fn start(&mut self, stage: &str) {
        self.done += 1;
        if self.shown && self.total > 1 {
            let took = self.since.elapsed().as_secs_f64();
            eprintln!("{}: [{}/{}] {stage} (+{took:.1} s)", self.what, self.done.min(self.total), self.total);
        } else if self.shown {
            eprintln!("{}: {stage}", self.what);
        }
        self.since = std::time::Instant::now();
    }
}
