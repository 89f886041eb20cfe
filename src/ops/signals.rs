//! How a command that publishes (`relay`, `replay`) stops on a signal: the first SIGTERM or SIGINT
//! asks it to stop (it finishes what is in flight), a second exits at once with
//! [`exit::INTERRUPTED`]; with a sink to reopen, SIGHUP reopens it (the file sink, for logrotate)
//! and never stops the command (its default action would, exit 129).

use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use crate::exit;
use crate::relay::RelayEvent;
use crate::sink::Sink;

/// Installs the handlers (before it returns, so no signal arriving later takes the default) and
/// watches them: the first stop signal calls `first` and cancels `shutdown`; the second calls
/// `second` and exits. `reopen` is the sink SIGHUP reopens, if any (without one, SIGHUP keeps
/// its default action).
pub fn stop_on_signals(
    shutdown: CancellationToken,
    reopen: Option<Arc<dyn Sink>>,
    first: impl Fn() + Send + 'static,
    second: impl Fn() + Send + 'static,
) -> anyhow::Result<()> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    let mut hup = match reopen {
        Some(sink) => Some((signal(SignalKind::hangup())?, sink)),
        None => None,
    };
    tokio::spawn(async move {
        let mut signals = 0;
        loop {
            let hangup = async {
                match hup.as_mut() {
                    Some((h, sink)) => {
                        h.recv().await;
                        Arc::clone(sink)
                    }
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                _ = term.recv() => {}
                _ = int.recv() => {}
                sink = hangup => {
                    let reopened = sink.reopen().await.map(|r| r.map_err(|e| e.to_string()));
                    RelayEvent::Hangup { sink: sink.describe(), reopened }.emit();
                    continue;
                }
            }
            signals += 1;
            if signals == 1 {
                first();
                shutdown.cancel();
            } else {
                second();
                std::process::exit(i32::from(exit::INTERRUPTED));
            }
        }
    });
    Ok(())
}
