//! Log output that can neither fail a request nor stop a shutdown.
//!
//! `serve` logs to stdout, often a pipe (`switchyard serve | head`). When the reader goes away every
//! write fails with `BrokenPipe`: `tracing-subscriber` would then report each failure with `eprintln!`,
//! which panics when stderr is that same closed pipe, inside whatever request or shutdown step was
//! logging. [`LogSink`] instead reports the first failure once (on stderr, when that still works) and
//! drops what follows: a closed sink stays closed, other errors lose only their own line.

use std::io::{self, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use tracing_subscriber::fmt::MakeWriter;

/// Which standard stream a [`LogSink`] writes to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stream {
    Stdout,
    Stderr,
}

/// A `MakeWriter` for the fmt layer whose writers always succeed.
#[derive(Clone)]
pub struct LogSink {
    stream: Stream,
    state: Arc<SinkState>,
}

#[derive(Default)]
struct SinkState {
    /// The reader is gone: nothing more is written.
    closed: AtomicBool,
    /// A failure was reported (there is only ever one report).
    reported: AtomicBool,
}

impl LogSink {
    pub fn new(stream: Stream) -> LogSink {
        LogSink {
            stream,
            state: Arc::default(),
        }
    }
}

impl SinkState {
    /// Writes `buf` to `out` unless the sink is closed; a failure is reported to `report` the first
    /// time only, and closes the sink when the reader is gone. Never fails.
    fn write(&self, out: &mut dyn Write, buf: &[u8], report: &mut dyn Write) {
        if self.closed.load(Ordering::Relaxed) {
            return;
        }
        let Err(e) = out.write_all(buf).and_then(|()| out.flush()) else {
            return;
        };
        let gone = e.kind() == io::ErrorKind::BrokenPipe;
        if gone {
            self.closed.store(true, Ordering::Relaxed);
        }
        if !self.reported.swap(true, Ordering::Relaxed) {
            let what = match gone {
                true => "the log output is closed; further log lines are dropped",
                false => {
                    "a log line could not be written; lines that cannot be written are dropped"
                }
            };
            let _ = writeln!(report, "switchyard: {what} ({e})");
        }
    }
}

/// One event's writer: the fmt layer makes one per event and writes the formatted line at once.
pub struct SinkWriter {
    sink: LogSink,
}

impl Write for SinkWriter {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let state = &self.sink.state;
        match self.sink.stream {
            // The report goes to stderr, unless stderr is the stream that failed.
            Stream::Stdout => state.write(&mut io::stdout().lock(), buf, &mut io::stderr()),
            Stream::Stderr => state.write(&mut io::stderr(), buf, &mut io::sink()),
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl<'a> MakeWriter<'a> for LogSink {
    type Writer = SinkWriter;

    fn make_writer(&'a self) -> SinkWriter {
        SinkWriter { sink: self.clone() }
    }
}

/// A line for the person or script reading stdout (e.g. the address `serve` listens on), written like
/// a log line: a closed stdout loses the line instead of failing the caller.
pub fn announce(sink: &LogSink, line: &str) {
    let mut w = sink.make_writer();
    let _ = w.write_all(format!("{line}\n").as_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A writer whose reader is gone.
    struct Closed(usize);

    impl Write for Closed {
        fn write(&mut self, _: &[u8]) -> io::Result<usize> {
            self.0 += 1;
            Err(io::ErrorKind::BrokenPipe.into())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn a_closed_sink_is_reported_once_and_dropped() {
        let state = SinkState::default();
        let (mut out, mut report) = (Closed(0), Vec::new());
        for _ in 0..3 {
            state.write(&mut out, b"line\n", &mut report);
        }
        assert_eq!(out.0, 1, "no write is tried after the sink closed");
        let report = String::from_utf8(report).unwrap();
        assert_eq!(report.lines().count(), 1, "{report}");
        assert!(report.contains("log output is closed"), "{report}");
        // A report that cannot be written is no failure either.
        let state = SinkState::default();
        state.write(&mut Closed(0), b"line\n", &mut Closed(0));
    }

    #[test]
    fn an_open_sink_writes_every_line() {
        let state = SinkState::default();
        let (mut out, mut report) = (Vec::new(), Vec::new());
        state.write(&mut out, b"a\n", &mut report);
        state.write(&mut out, b"b\n", &mut report);
        assert_eq!(out, b"a\nb\n");
        assert!(report.is_empty());
    }
}
