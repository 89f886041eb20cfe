//! Faults: the relay and its sinks while something they depend on fails. `scenarios` is the
//! fault-injection suite (issue 9), measured by [`checker`] under real faults against real
//! components (`bench/faults.sh` runs its full form); `postgres` is the relay under database
//! faults (terminated backends, a restart of a cluster of the test's own); `sink_outage` is a sink
//! that refuses connections or answers 503 for a while.

mod checker;
mod http;
mod postgres;
mod scenarios;
mod sink_outage;
