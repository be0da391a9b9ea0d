//! Progress on a terminal: shown only when stderr is one, never in logs or `--json` output.

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::io::IsTerminal;

pub(crate) struct Progress {
    bar: Option<ProgressBar>,
}

impl Progress {
    pub(crate) fn new(enabled: bool) -> Self {
        let bar = (enabled && std::io::stderr().is_terminal()).then(|| {
            let bar = ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr());
            bar.enable_steady_tick(std::time::Duration::from_millis(120));
            bar
        });
        Self { bar }
    }

    /// Starts a phase without a known size.
    pub(crate) fn phase(&self, target: &str, phase: &str) {
        if let Some(bar) = &self.bar {
            bar.set_style(ProgressStyle::with_template("{spinner} {prefix} {msg} {elapsed}").unwrap());
            bar.set_prefix(target.to_string());
            bar.set_message(phase.to_string());
        }
    }

    /// Starts a phase that moves `total` bytes.
    pub(crate) fn bytes(&self, target: &str, phase: &str, total: u64) {
        if let Some(bar) = &self.bar {
            bar.set_style(
                ProgressStyle::with_template(
                    "{spinner} {prefix} {msg} [{bar:30}] {bytes}/{total_bytes} {bytes_per_sec} {elapsed}",
                )
                .unwrap()
                .progress_chars("=> "),
            );
            bar.set_prefix(target.to_string());
            bar.set_message(phase.to_string());
            bar.set_length(total);
            bar.set_position(0);
        }
    }

    /// A callback that moves the bar to a byte count, for the restore to call.
    pub(crate) fn byte_counter(&self) -> std::sync::Arc<dyn Fn(u64) + Send + Sync> {
        let bar = self.bar.clone();
        std::sync::Arc::new(move |n| {
            if let Some(b) = &bar {
                b.set_position(n);
            }
        })
    }

    pub(crate) fn finish(&self) {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        self.finish();
    }
}
