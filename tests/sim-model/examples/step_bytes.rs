//! Prints the bytes one step reports (inputs + outputs of every op) for the presets named on the command
//! line: `cargo run --release -p sim-model --example step_bytes -- small medium`.

use sim_model::{ModelConfig, OpEvent, OpSink, OverflowMode, Trainer};

struct Count(u64, u64);

impl OpSink for Count {
    fn op(&mut self, e: &OpEvent<'_>) {
        self.0 += 1;
        self.1 += e.inputs.iter().chain(&e.outputs).map(|t| t.bytes.len() as u64).sum::<u64>();
    }
}

fn main() {
    for name in std::env::args().skip(1) {
        let Some(cfg) = ModelConfig::preset(&name) else {
            eprintln!("unknown preset {name}");
            std::process::exit(2);
        };
        let mut sink = Count(0, 0);
        let start = std::time::Instant::now();
        let r = Trainer::new(cfg).step(0, OverflowMode::InfNan, &mut sink);
        println!(
            "{name}: {} ops, {:.1} MB, loss {:.3}, {:.2?}",
            sink.0,
            sink.1 as f64 / 1e6,
            r.loss,
            start.elapsed()
        );
    }
}
